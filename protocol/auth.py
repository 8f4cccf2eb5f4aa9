"""Request authentication (sans-I/O): HMAC-SHA256 signatures with a timestamp and a nonce, and their check.

Design notes: docs/security.md, section "protocol/auth.py".
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from kraftpy.protocol.credentials import Credential
from kraftpy.protocol.errors import ErrorCode, KafkaError

SCHEME = "KRAFTPY-HMAC-SHA256"
HEADER = "Authorization"
PROOF_HEADER = "X-Kraftpy-Auth-Proof"
DEFAULT_MAX_CLOCK_SKEW_MS = 60_000
DEFAULT_MAX_NONCES = 100_000
MAX_HEADER_LEN = 1024
_PROOF_LABEL = b"kraftpy server proof\n"


def auth_failed(message: str) -> KafkaError:
    return KafkaError(f"authentication failed: {message}", ErrorCode.SASL_AUTHENTICATION_FAILED)


@dataclass(frozen=True)
class Principal:
    """Who a verified request comes from."""

    name: str
    role: str


@dataclass(frozen=True)
class Signature:
    principal: str
    ts_ms: int
    nonce: str
    mac: str


def _mac(key: bytes, principal: str, ts_ms: int, nonce: str, method: str, host: str, path: str, body: bytes) -> str:
    text = "\n".join(
        (SCHEME, principal, str(ts_ms), nonce, method.upper(), host, path, hashlib.sha256(body).hexdigest())
    )
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def sign(
    credential: Credential, method: str, host: str, path: str, body: bytes, now_ms: int, nonce: str | None = None
) -> str:
    """The Authorization header value for one request to `host` ("host:port")."""
    nonce = nonce if nonce is not None else secrets.token_hex(16)
    mac = _mac(credential.key, credential.principal, now_ms, nonce, method, host, path, body)
    return f"{SCHEME} principal={credential.principal},ts={now_ms},nonce={nonce},mac={mac}"


def parse(header: str) -> Signature:
    """The parts of an Authorization header, or SASL_AUTHENTICATION_FAILED saying what is wrong with it."""
    if len(header) > MAX_HEADER_LEN:
        raise auth_failed(f"Authorization header is {len(header)} characters; at most {MAX_HEADER_LEN}")
    scheme, _, params = header.partition(" ")
    if scheme != SCHEME:
        raise auth_failed(f"unsupported Authorization scheme {scheme!r:.40}; expected {SCHEME}")
    fields: dict[str, str] = {}
    for item in params.split(","):
        name, eq, value = item.strip().partition("=")
        if not eq:
            raise auth_failed(f"malformed Authorization parameter {item!r:.40}")
        fields[name] = value
    try:
        ts_ms = int(fields["ts"])
        signature = Signature(fields["principal"], ts_ms, fields["nonce"], fields["mac"])
    except KeyError as exc:
        raise auth_failed(f"Authorization header lacks {exc}") from None
    except ValueError:
        raise auth_failed(f"timestamp {fields['ts']!r:.30} is not an integer") from None
    if not 8 <= len(signature.nonce) <= 64:
        raise auth_failed("the nonce must be 8-64 characters")
    return signature


def server_proof(credential: Credential, request_mac: str) -> str:
    """What a server answers to a verified signature: only a holder of the same key can compute it."""
    return hmac.new(credential.key, _PROOF_LABEL + request_mac.encode(), hashlib.sha256).hexdigest()


def check_proof(credential: Credential, request_header: str, proof: str | None) -> bool:
    """Whether `proof` answers the request signed with `request_header` (the caller's side of server_proof)."""
    if not proof:
        return False
    expected = server_proof(credential, parse(request_header).mac)
    return hmac.compare_digest(expected, proof)


class ReplayWindow:
    """Nonces of accepted signatures, kept until their timestamp can no longer pass the skew check.

    Bounded: when full, the oldest entry is dropped and its timestamp becomes a
    floor below which every signature is refused (it could be a replay of a
    dropped nonce), so a bound on memory never opens a window for replays.
    """

    def __init__(self, max_skew_ms: int, max_nonces: int) -> None:
        self.max_skew_ms = max_skew_ms
        self.max_nonces = max_nonces
        self._seen: set[tuple[str, str]] = set()
        self._order: collections.deque[tuple[int, tuple[str, str]]] = collections.deque()
        self.floor_ms = -1

    def __len__(self) -> int:
        return len(self._seen)

    def admit(self, principal: str, nonce: str, ts_ms: int, now_ms: int) -> None:
        """Record a nonce, or SASL_AUTHENTICATION_FAILED if it was seen or is too old to tell."""
        self._expire(now_ms)
        skew_ms = ts_ms - now_ms
        if abs(skew_ms) > self.max_skew_ms:
            raise auth_failed(
                f"request timestamp is {skew_ms / 1000:+.1f} s from the server's clock; at most "
                f"{self.max_skew_ms / 1000:.0f} s allowed (check the clocks, or the request is replayed)"
            )
        if ts_ms <= self.floor_ms:
            raise auth_failed("request timestamp is older than the replay window still remembers; send it again")
        key = (principal, nonce)
        if key in self._seen:
            raise auth_failed("this nonce was already used: a replayed request")
        self._seen.add(key)
        self._order.append((ts_ms, key))
        if len(self._order) > self.max_nonces:
            old_ts, old_key = self._order.popleft()
            self._seen.discard(old_key)
            self.floor_ms = max(self.floor_ms, old_ts)

    def _expire(self, now_ms: int) -> None:
        # Entries arrive roughly in timestamp order; one that is out of order only stays longer.
        while self._order and self._order[0][0] < now_ms - self.max_skew_ms:
            self._seen.discard(self._order.popleft()[1])


class Verifier:
    """Checks signatures against a keyring (principal -> Credential)."""

    def __init__(
        self,
        keyring: Mapping[str, Credential],
        *,
        max_clock_skew_ms: int = DEFAULT_MAX_CLOCK_SKEW_MS,
        max_nonces: int = DEFAULT_MAX_NONCES,
    ) -> None:
        self.keyring = dict(keyring)
        self.window = ReplayWindow(max_clock_skew_ms, max_nonces)

    def verify(
        self, header: str, method: str, host: str, path: str, body: bytes, now_ms: int, *, local_port: int | None
    ) -> tuple[Principal, Signature]:
        """The principal a request comes from, or SASL_AUTHENTICATION_FAILED.

        `local_port`: the port the request arrived on; a signature made for another server is refused.
        """
        signature = parse(header)
        credential = self.keyring.get(signature.principal)
        if credential is None:
            raise auth_failed(f"unknown principal {signature.principal!r:.60}")
        _, _, port_text = host.rpartition(":")
        if local_port is not None and port_text != str(local_port):
            raise auth_failed(f"request was signed for {host!r:.60}, not for a server on port {local_port}")
        expected = _mac(
            credential.key, credential.principal, signature.ts_ms, signature.nonce, method, host, path, body
        )
        if not hmac.compare_digest(expected, signature.mac):
            raise auth_failed(
                f"signature of {signature.principal!r} does not match (a wrong key, or the request was altered)"
            )
        self.window.admit(signature.principal, signature.nonce, signature.ts_ms, now_ms)
        return Principal(credential.principal, credential.role), signature

    def credential(self, principal: str) -> Credential:
        return self.keyring[principal]
