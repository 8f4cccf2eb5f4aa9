"""Credentials: who a process is (principal, role) and the secret key that proves it.

Design notes: docs/security.md, section "protocol/credentials.py".
"""

from __future__ import annotations

import base64
import binascii
import secrets
import tomllib
from dataclasses import dataclass

from kraftpy.protocol.errors import ErrorCode, KafkaError

ROLE_CLUSTER = "cluster"  # a node of this cluster: every route
ROLE_ADMIN = "admin"  # an operator: admin routes, not the cluster-internal ones
ROLES = (ROLE_CLUSTER, ROLE_ADMIN)
KEY_BYTES = 32  # HMAC-SHA256's block-size-safe key length (RFC 2104: at least the hash length)
SUFFIX = ".credential"
NODE_FILE = "node" + SUFFIX
ADMIN_FILE = "admin" + SUFFIX
MAX_PRINCIPAL_LEN = 255


def invalid_credential(message: str) -> KafkaError:
    return KafkaError(message, ErrorCode.INVALID_CONFIG)


@dataclass(frozen=True)
class Credential:
    principal: str
    role: str
    key: bytes

    def __post_init__(self) -> None:
        if not self.principal or len(self.principal) > MAX_PRINCIPAL_LEN or not self.principal.isprintable():
            raise invalid_credential(
                f"principal must be 1-{MAX_PRINCIPAL_LEN} printable characters, got {self.principal!r:.60}"
            )
        if any(c in self.principal for c in ' ,="'):
            raise invalid_credential(f"principal {self.principal!r} must not contain spaces, commas, quotes or '='")
        if self.role not in ROLES:
            raise invalid_credential(f"role must be one of {', '.join(ROLES)}, got {self.role!r}")
        if len(self.key) < KEY_BYTES:
            raise invalid_credential(
                f"the key of {self.principal!r} has {len(self.key)} bytes; at least {KEY_BYTES} needed"
            )

    def __repr__(self) -> str:  # never print a key into a log
        return f"Credential(principal={self.principal!r}, role={self.role!r})"

    @classmethod
    def generate(cls, principal: str, role: str) -> Credential:
        return cls(principal, role, secrets.token_bytes(KEY_BYTES))

    def render(self) -> str:
        key = base64.b64encode(self.key).decode()
        return (
            "# A kraftpy credential (docs/security.md). Whoever reads this file can act as "
            f"{self.principal!r}: keep it mode 0600.\n"
            f'principal = "{self.principal}"\nrole = "{self.role}"\nkey = "{key}"\n'
        )


def parse_credential(text: str, where: str) -> Credential:
    """A credential file's text; INVALID_CONFIG naming `where` if it is malformed."""
    try:
        values = tomllib.loads(text)
        key = base64.b64decode(values["key"], validate=True)
        return Credential(str(values["principal"]), str(values["role"]), key)
    except (tomllib.TOMLDecodeError, KeyError, TypeError, binascii.Error) as exc:
        raise invalid_credential(
            f"credential {where} is malformed ({type(exc).__name__}: {exc}); expected principal, role, key"
        ) from None
    except KafkaError as exc:
        raise invalid_credential(f"credential {where}: {exc.message}") from None
