"""Credential files on disk: written mode 0600, read only if nobody else can, a directory of them a keyring."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kraftpy.protocol.credentials import (
    ADMIN_FILE,
    NODE_FILE,
    ROLE_ADMIN,
    ROLE_CLUSTER,
    SUFFIX,
    Credential,
    invalid_credential,
    parse_credential,
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
        raise invalid_credential(f"cannot read credential {path}: {exc.strerror or exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise invalid_credential(
            f"credential {path} is accessible by other users (mode {stat.S_IMODE(mode):o}); run chmod 600 on it"
        )
    return parse_credential(text, str(path))


def load_keyring(directory: Path) -> dict[str, Credential]:
    """Every `*.credential` in `directory`, by principal; a principal named twice is an error."""
    if not directory.is_dir():
        raise invalid_credential(f"secrets_dir {directory} is not a directory")
    keyring: dict[str, Credential] = {}
    for path in sorted(directory.glob("*" + SUFFIX)):
        credential = load_credential(path)
        if credential.principal in keyring:
            raise invalid_credential(f"principal {credential.principal!r} is defined twice in {directory}")
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
        raise invalid_credential(
            "secrets_dir is not set: a node accepts cluster-internal and admin requests only from holders of the "
            "credentials there (docs/security.md); `kraftpy cluster start` and `kraftpy storage format` create them"
        )
    keyring = load_keyring(directory)
    own = load_credential(directory / NODE_FILE)
    if own.role != ROLE_CLUSTER:
        raise invalid_credential(
            f"{directory / NODE_FILE} has role {own.role!r}; a node's own credential needs role cluster"
        )
    return keyring, own
