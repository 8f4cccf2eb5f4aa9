"""Request signatures, the replay window, credential files, the route table, and the RPC hook on a real
aiohttp server on loopback (docs/security.md)."""

from __future__ import annotations

import contextvars
import os
import stat
from pathlib import Path

import pytest
from aiohttp import web

from kraftpy.metadata.controller import wire
from kraftpy.node.process import STATUS_PATH
from kraftpy.protocol import access
from kraftpy.protocol.access import REPLICA_FETCH_PATH, WRITE_TXN_MARKERS_PATH
from kraftpy.protocol.auth import Principal, ReplayWindow, Verifier, check_proof, server_proof, sign
from kraftpy.protocol.credentials import ADMIN_FILE, NODE_FILE, Credential
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell import rpc_auth
from kraftpy.protocol.shell.credential_files import (
    create_cluster_secrets,
    load_credential,
    load_keyring,
    load_node_secrets,
    write_credential,
)
from kraftpy.protocol.shell.rpc import RpcClient, make_app
from kraftpy.protocol.shell.rpc_auth import ServerAuth
from kraftpy.protocol.shell.rpc_calls import Reply, inline_handler
from kraftpy.raft.codec import ROUTES as RAFT_ROUTES

NODE = Credential.generate("node", "cluster")
ADMIN = Credential.generate("admin", "admin")
HOST = "127.0.0.1:9092"
NOW = 1_700_000_000_000


def verifier(**kwargs) -> Verifier:
    return Verifier({"node": NODE, "admin": ADMIN}, **kwargs)


def test_a_signed_request_verifies_as_its_principal() -> None:
    header = sign(ADMIN, "POST", HOST, "/controller/create_topics", b"body", NOW)
    principal, _ = verifier().verify(header, "POST", HOST, "/controller/create_topics", b"body", NOW, local_port=9092)
    assert (principal.name, principal.role) == ("admin", "admin")


@pytest.mark.parametrize(
    "method, host, path, body, port, why",
    [
        ("POST", HOST, "/x", b"other", 9092, "does not match"),  # body altered
        ("POST", HOST, "/y", b"body", 9092, "does not match"),  # path altered
        ("GET", HOST, "/x", b"body", 9092, "does not match"),  # method altered
        ("POST", "127.0.0.1:9093", "/x", b"body", 9093, "does not match"),  # Host rewritten for another server
        ("POST", HOST, "/x", b"body", 9093, "signed for"),  # sent to another server as it is
    ],
)
def test_anything_altered_fails(method: str, host: str, path: str, body: bytes, port: int, why: str) -> None:
    header = sign(NODE, "POST", HOST, "/x", b"body", NOW)
    with pytest.raises(KafkaError) as info:
        verifier().verify(header, method, host, path, body, NOW, local_port=port)
    assert info.value.code is ErrorCode.SASL_AUTHENTICATION_FAILED and why in info.value.message


def test_wrong_key_unknown_principal_and_garbage_fail() -> None:
    impostor = Credential.generate("node", "cluster")
    stranger = Credential.generate("mallory", "cluster")
    for header in (
        sign(impostor, "POST", HOST, "/x", b"", NOW),
        sign(stranger, "POST", HOST, "/x", b"", NOW),
        "Basic YWRtaW46YWRtaW4=",
        "KRAFTPY-HMAC-SHA256 principal=node",
        "KRAFTPY-HMAC-SHA256 principal=node,ts=soon,nonce=12345678,mac=00",
        "KRAFTPY-HMAC-SHA256 " + "x" * 5000,
    ):
        with pytest.raises(KafkaError) as info:
            verifier().verify(header, "POST", HOST, "/x", b"", NOW, local_port=None)
        assert info.value.code is ErrorCode.SASL_AUTHENTICATION_FAILED, header


def test_a_replayed_or_stale_signature_fails() -> None:
    v = verifier(max_clock_skew_ms=60_000)
    header = sign(NODE, "POST", HOST, "/x", b"", NOW)
    v.verify(header, "POST", HOST, "/x", b"", NOW + 10, local_port=None)
    with pytest.raises(KafkaError, match="already used"):
        v.verify(header, "POST", HOST, "/x", b"", NOW + 20, local_port=None)
    with pytest.raises(KafkaError, match="from the server's clock"):
        v.verify(sign(NODE, "POST", HOST, "/x", b"", NOW), "POST", HOST, "/x", b"", NOW + 60_001, local_port=None)


def test_the_replay_window_is_bounded_and_never_forgets_into_a_replay() -> None:
    window = ReplayWindow(max_skew_ms=1000, max_nonces=3)
    for i in range(3):
        window.admit("node", f"nonce-{i}", NOW + i, NOW + i)
    window.admit("node", "nonce-3", NOW + 3, NOW + 3)  # drops nonce-0: its timestamp becomes the floor
    assert len(window) == 3 and window.floor_ms == NOW
    with pytest.raises(KafkaError, match="older than the replay window"):
        window.admit("node", "nonce-0", NOW, NOW + 4)  # would be a replay of the dropped nonce
    window.admit("node", "nonce-4", NOW + 2000, NOW + 2000)  # the others expired
    assert len(window) == 1


def test_server_proof_needs_the_key() -> None:
    header = sign(NODE, "GET", HOST, "/rpc/stream", b"", NOW)
    _, signature = verifier().verify(header, "GET", HOST, "/rpc/stream", b"", NOW, local_port=9092)
    assert check_proof(NODE, header, server_proof(NODE, signature.mac))
    assert not check_proof(NODE, header, server_proof(Credential.generate("node", "cluster"), signature.mac))
    assert not check_proof(NODE, header, None)


def test_credential_files_are_private_and_checked(tmp_path: Path) -> None:
    create_cluster_secrets(tmp_path / "secrets")
    assert stat.S_IMODE((tmp_path / "secrets").stat().st_mode) == 0o700
    for name in (NODE_FILE, ADMIN_FILE):
        assert stat.S_IMODE((tmp_path / "secrets" / name).stat().st_mode) == 0o600
    keyring, own = load_node_secrets(tmp_path / "secrets")
    assert set(keyring) == {"node", "admin"} and own.role == "cluster"
    assert "key" not in repr(own) and own.key.hex() not in repr(own)
    with pytest.raises(KafkaError, match="secrets_dir is not set"):
        load_node_secrets(None)
    os.chmod(tmp_path / "secrets" / ADMIN_FILE, 0o644)
    with pytest.raises(KafkaError, match="chmod 600"):
        load_credential(tmp_path / "secrets" / ADMIN_FILE)
    os.chmod(tmp_path / "secrets" / ADMIN_FILE, 0o600)
    write_credential(tmp_path / "secrets" / "again.credential", Credential.generate("admin", "admin"))
    with pytest.raises(KafkaError, match="defined twice"):
        load_keyring(tmp_path / "secrets")
    with pytest.raises(KafkaError, match="role must be"):
        Credential.generate("x", "superuser")
    bad = tmp_path / "bad.credential"
    write_credential(bad, ADMIN)
    bad.write_text('principal = "a"\nrole = "admin"\nkey = "not base64!"\n')
    with pytest.raises(KafkaError, match="malformed"):
        load_credential(bad)


def test_every_route_a_node_serves_is_named_in_the_access_table() -> None:
    served = {
        *RAFT_ROUTES.values(),
        *(f"/controller/{route}" for route in wire.ROUTES),
        "/controller/describe_quorum",
        REPLICA_FETCH_PATH, WRITE_TXN_MARKERS_PATH, STATUS_PATH,
    }  # fmt: skip
    assert served - set(access.ROUTES) == set()
    assert not [path for path in access.ROUTES if path.startswith("/kafka/")]  # clients use the Kafka listener
    assert access.required("/something/new") is access.CLUSTER  # closed by default
    assert access.required(REPLICA_FETCH_PATH) is access.CLUSTER  # followers only: it moves the HW and ISR
    assert access.required(WRITE_TXN_MARKERS_PATH) is access.CLUSTER


async def _ok(body: dict) -> dict:
    return {"seen": True}


def _ok_inline(body: dict, reply: Reply) -> None:
    reply({"seen": True})


@pytest.fixture
async def server():
    auth = ServerAuth(verifier())
    routes = {
        "/raft/vote": _ok,
        "/raft/fetch": inline_handler(_ok_inline),  # an inline route: on a stream it runs in the read
        "/controller/delete_topics": _ok,
        "/admin/status": _ok,
    }
    runner = web.AppRunner(make_app(routes, auth=auth))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield ("127.0.0.1", port), auth
    await runner.cleanup()


@pytest.mark.parametrize("stream", [False, True])
async def test_the_server_admits_by_role(server, stream: bool) -> None:
    address, auth = server
    anonymous, admin, node = (
        RpcClient(peer_streams=stream),
        RpcClient(credential=ADMIN, peer_streams=stream),
        RpcClient(credential=NODE, peer_streams=stream),
    )
    try:
        for client in (anonymous, admin, node):
            assert (await client.call(address, "/admin/status", {}))["seen"]
        refused = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        for client, code in ((anonymous, refused), (admin, refused), (node, 0)):  # Raft is for nodes only
            for path in ("/raft/vote", "/raft/fetch"):
                answer = await client.call(address, path, {}, raise_errors=False)
                assert answer["error_code"] == code, (path, answer)
                assert answer.get("seen") is (True if code == 0 else None)
        answer = await anonymous.call(address, "/controller/delete_topics", {}, raise_errors=False)
        assert answer["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED and "docs/security.md" in answer["message"]
        assert (await admin.call(address, "/controller/delete_topics", {}))["seen"]
        assert auth.refused == 5
        if stream:  # every call above went over a stream, none fell back to HTTP
            assert all(client._streams and not client._http_only for client in (anonymous, admin, node))
    finally:
        for client in (anonymous, admin, node):
            await client.close()


def test_the_guard_keeps_an_inline_route_inline_and_checks_its_caller() -> None:
    """On a stream an inline route runs in the read, as the caller the upgrade verified: the guard
    must keep that form (else the route silently becomes a task) and check that caller."""
    auth = ServerAuth(verifier())
    guarded = auth.guard("/raft/fetch", inline_handler(_ok_inline))
    answers: list = []
    for caller, admitted in ((None, False), (Principal("admin", "admin"), False), (Principal("n1", "cluster"), True)):
        context = contextvars.copy_context()
        context.run(rpc_auth._caller.set, caller)
        if admitted:
            context.run(guarded.inline, {}, answers.append)
            assert answers.pop() == {"seen": True}
        else:
            with pytest.raises(KafkaError) as info:
                context.run(guarded.inline, {}, answers.append)
            assert info.value.code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED and not answers
    assert auth.refused == 2


async def test_a_client_refuses_a_server_that_cannot_prove_the_key(server) -> None:
    address, _ = server
    impostor = RpcClient(credential=Credential.generate("node", "cluster"), peer_streams=True)
    try:
        with pytest.raises(KafkaError) as info:
            await impostor.call(address, "/admin/status", {})
        assert info.value.code is ErrorCode.SASL_AUTHENTICATION_FAILED  # refused at the upgrade, no HTTP fallback
    finally:
        await impostor.close()
    # The other way round: a server without our key (here: one without authentication) proves nothing.
    runner = web.AppRunner(make_app({"/admin/status": _ok}))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    node = RpcClient(credential=NODE, peer_streams=True)
    try:
        with pytest.raises(KafkaError, match="did not prove"):
            await node.call(("127.0.0.1", port), "/admin/status", {})
    finally:
        await node.close()
        await runner.cleanup()


def test_storage_format_creates_the_cluster_credentials_and_a_node_needs_them(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kraftpy.node.config import build_config
    from kraftpy.node.process import Node
    from kraftpy.tools.commands.server import format_storage

    flags = ["--node-id", "1", "--voters", "1@127.0.0.1:9092", "--data-dir", str(tmp_path / "data")]
    secrets = tmp_path / "secrets"
    result = CliRunner().invoke(format_storage, [*flags, "-t", "c1", "--set", f"secrets_dir={secrets}"])
    assert result.exit_code == 0, result.output
    assert "copy this directory to every node" in result.output
    assert stat.S_IMODE((secrets / NODE_FILE).stat().st_mode) == 0o600
    node_key = load_credential(secrets / NODE_FILE).key
    # Formatting the next node keeps the credentials that are there (they must be the same on every node).
    flags[1], flags[-1] = "2", str(tmp_path / "data2")
    flags[3] = "2@127.0.0.1:9093"
    result = CliRunner().invoke(format_storage, [*flags, "-t", "c1", "--set", f"secrets_dir={secrets}"])
    assert result.exit_code == 0 and load_credential(secrets / NODE_FILE).key == node_key, result.output
    values = {"node_id": 1, "controller_quorum_voters": "1@127.0.0.1:9092", "data_dir": str(tmp_path / "data")}
    with pytest.raises(KafkaError, match="secrets_dir is not set"):
        Node(build_config(values))
    assert Node(build_config({**values, "secrets_dir": str(secrets)})).auth.verifier.keyring.keys() == {"node", "admin"}
