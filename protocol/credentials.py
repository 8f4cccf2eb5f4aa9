"""Credential files: who a process is (principal, role) and the secret key that proves it.

A credential is a small TOML file, readable by its owner only (mode 0600):

    principal = "admin"
    role = "admin"
    key = "<base64 of 32 random bytes>"

A node signs what it sends with its `cluster` credential and accepts every
credential in its `secrets_dir` (docs/security.md). `kraftpy cluster start`
writes `secrets/node.credential` (role cluster) and `secrets/admin.credential`
(role admin) into the cluster dir; an operator adds a principal by adding a
file. The same principal/role/key triple is what Kafka's SCRAM credentials
hold, so the Kafka listener's SASL (a later issue) can read this keyring too.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path

from kraftpy.protocol.errors import ErrorCode, KafkaError

ROLE_CLUSTER = "cluster"  # a node of this cluster: every route
ROLE_ADMIN = "admin"  # an operator: admin routes, not the cluster-internal ones
ROLES = (ROLE_CLUSTER, ROLE_ADMIN)
KEY_BYTES = 32  # HMAC-SHA256's block-size-safe key length (RFC 2104: at least the hash length)
SUFFIX = ".credential"
NODE_FILE = "node" + SUFFIX
ADMIN_FILE = "admin" + SUFFIX
MAX_PRINCIPAL_LEN = 255


def _bad(message: str) -> KafkaError:
    return KafkaError(message, ErrorCode.INVALID_CONFIG)


@dataclass(frozen=True)
class Credential:
    principal: str
    role: str
    key: bytes

    def __post_init__(self) -> None:
        if not self.principal or len(self.principal) > MAX_PRINCIPAL_LEN or not self.principal.isprintable():
            raise _bad(f"principal must be 1-{MAX_PRINCIPAL_LEN} printable characters, got {self.principal!r:.60}")
        if any(c in self.principal for c in ' ,="'):
            raise _bad(f"principal {self.principal!r} must not contain spaces, commas, quotes or '='")
        if self.role not in ROLES:
            raise _bad(f"role must be one of {', '.join(ROLES)}, got {self.role!r}")
        if len(self.key) < KEY_BYTES:
            raise _bad(f"the key of {self.principal!r} has {len(self.key)} bytes; at least {KEY_BYTES} needed")

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


def write_credential(path: Path, credential: Credential) -> None:
    """Create `path` (mode 0600 from the first byte on); an existing file is an error, never overwritten."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(credential.render())
        f.flush()
        os.fsync(f.fileno())


def load_credential(path: Path) -> Credential:
    """Read a credential file; INVALID_CONFIG naming the file if it is missing, malformed or readable by others."""
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as exc:
        raise _bad(f"cannot read credential {path}: {exc.strerror or exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise _bad(f"credential {path} is accessible by other users (mode {stat.S_IMODE(mode):o}); run chmod 600 on it")
    try:
        values = tomllib.loads(text)
        key = base64.b64decode(values["key"], validate=True)
        return Credential(str(values["principal"]), str(values["role"]), key)
    except (tomllib.TOMLDecodeError, KeyError, TypeError, binascii.Error) as exc:
        raise _bad(
            f"credential {path} is malformed ({type(exc).__name__}: {exc}); expected principal, role, key"
        ) from None
    except KafkaError as exc:
        raise _bad(f"credential {path}: {exc.message}") from None


def load_keyring(directory: Path) -> dict[str, Credential]:
    """Every `*.credential` in `directory`, by principal; a principal named twice is an error."""
    if not directory.is_dir():
        raise _bad(f"secrets_dir {directory} is not a directory")
    keyring: dict[str, Credential] = {}
    for path in sorted(directory.glob("*" + SUFFIX)):
        credential = load_credential(path)
        if credential.principal in keyring:
            raise _bad(f"principal {credential.principal!r} is defined twice in {directory}")
        keyring[credential.principal] = credential
    return keyring


def create_cluster_secrets(directory: Path) -> None:
    """A new cluster's node and admin credentials in `directory` (mode 0700); kept if already there."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    for name, principal, role in ((NODE_FILE, "node", ROLE_CLUSTER), (ADMIN_FILE, "admin", ROLE_ADMIN)):
        if not (directory / name).exists():
            write_credential(directory / name, Credential.generate(principal, role))


def load_node_secrets(directory: Path | None) -> tuple[dict[str, Credential], Credential]:
    """A node's keyring and its own credential (`node.credential`, role cluster), or INVALID_CONFIG saying why."""
    if directory is None:
        raise _bad(
            "secrets_dir is not set: a node accepts cluster-internal and admin requests only from holders of the "
            "credentials there (docs/security.md); `kraftpy cluster start` and `kraftpy storage format` create them"
        )
    keyring = load_keyring(directory)
    own = load_credential(directory / NODE_FILE)
    if own.role != ROLE_CLUSTER:
        raise _bad(f"{directory / NODE_FILE} has role {own.role!r}; a node's own credential needs role cluster")
    return keyring, own
