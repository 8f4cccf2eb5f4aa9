"""The linearizable registers: cas decisions, the read index before every read, snapshots, the broken build."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from kraftpy.metadata.controller.register_control import write_register
from kraftpy.metadata.controller.requests import RegisterWriteRequest
from kraftpy.metadata.image.metadata_delta import MetadataDelta
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.image.snapshot import decode_image, encode_image
from kraftpy.metadata.records import RegisterValueRecord, record_from_list, record_to_list
from kraftpy.metadata.shell.controller_component import ControllerComponent
from kraftpy.protocol.errors import ErrorCode, KafkaError
from tests.unit.metadata.test_controller_shell_component import CONFIG, Shell


def image_with(**registers: int) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    for offset, (key, value) in enumerate(registers.items()):
        delta.replay(RegisterValueRecord(key, value), offset)
    return delta.apply()


def test_cas_compares_with_the_image_and_a_mismatch_writes_nothing() -> None:
    image = image_with(a=3)
    result = write_register(image, RegisterWriteRequest("a", 4, cas=True, expected=3))
    assert result.records == (RegisterValueRecord("a", 4),) and result.response.previous == 3
    with pytest.raises(KafkaError) as info:
        write_register(image, RegisterWriteRequest("a", 5, cas=True, expected=2))
    assert info.value.code is ErrorCode.INVALID_UPDATE_VERSION
    with pytest.raises(KafkaError):  # never written: only a cas from None succeeds
        write_register(image, RegisterWriteRequest("b", 1, cas=True, expected=0))
    assert write_register(image, RegisterWriteRequest("b", 1, cas=True, expected=None)).records


def test_registers_survive_a_snapshot_and_records_round_trip() -> None:
    image = image_with(a=3, b=-7)
    assert dict(decode_image(encode_image(image)).registers) == {"a": 3, "b": -7}
    assert record_from_list(record_to_list(RegisterValueRecord("k", 2**62))) == RegisterValueRecord("k", 2**62)


async def test_writes_commit_through_the_controller_and_reads_wait_for_the_read_index(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    await shell.activate()
    write = shell.call("register_write", {"key": "x", "value": 1})
    await shell.settle()
    shell.raft.commit()
    assert await write == {"previous": None}
    cas = shell.call("register_write", {"key": "x", "value": 2, "from": 1})
    bad = shell.call("register_write", {"key": "x", "value": 9, "from": 1})  # decided after the first cas
    await shell.settle()
    shell.raft.commit()
    assert await cas == {"previous": 1}
    with pytest.raises(KafkaError) as info:
        await bad
    assert info.value.code is ErrorCode.INVALID_UPDATE_VERSION
    read = shell.call("register_read", {"key": "x"})
    await shell.settle()
    assert not read.done(), "a read answers only after a quorum confirmed the leadership"
    shell.raft.confirm_reads()
    assert await read == {"value": 2}


async def test_a_deposed_leader_never_answers_a_read(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    await shell.activate()
    read = shell.call("register_read", {"key": "x"})
    await shell.settle()
    shell.raft.fail_reads(ErrorCode.NOT_LEADER_OR_FOLLOWER)  # its round found a newer epoch
    with pytest.raises(KafkaError) as info:
        await read
    assert info.value.code is ErrorCode.NOT_CONTROLLER
    shell.raft.elect(2)
    with pytest.raises(KafkaError) as info:
        await shell.call("register_read", {"key": "x"})
    assert info.value.code is ErrorCode.NOT_CONTROLLER


async def test_a_refused_write_says_it_was_not_appended_and_a_pending_one_does_not(tmp_path: Path) -> None:
    """A Jepsen-style client may count a write refused before anything was appended as failed (it can
    never happen); one pending when leadership moved may still commit, so its NOT_CONTROLLER says nothing
    of the kind and the client must count it unknown."""
    shell = Shell(tmp_path)
    await shell.activate()
    pending = shell.call("register_write", {"key": "x", "value": 1})
    await shell.settle()
    shell.raft.elect(2)  # what we appended may yet commit under the new leader
    with pytest.raises(KafkaError) as lost:
        await pending
    assert lost.value.code is ErrorCode.NOT_CONTROLLER and "appended" not in lost.value.details
    with pytest.raises(KafkaError) as refused:
        await shell.call("register_write", {"key": "x", "value": 2})
    assert refused.value.code is ErrorCode.NOT_CONTROLLER and refused.value.details["appended"] is False
    assert refused.value.details["leader_id"] == 2


async def test_malformed_register_bodies_answer_invalid_request(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    await shell.activate()
    for route, body in [
        ("register_write", {"key": "x"}),
        ("register_write", {"key": "x", "value": 2**63}),
        ("register_write", {"key": "k" * 300, "value": 1}),
        ("register_read", {"key": 5}),
        ("register_read", []),
    ]:
        with pytest.raises(KafkaError) as info:
            await shell.call(route, body)
        assert info.value.code is ErrorCode.INVALID_REQUEST, (route, body)


async def test_the_stale_read_broken_build_answers_without_the_read_index(tmp_path: Path) -> None:
    """KRAFTPY_TEST_BREAK=stale-read must really be broken: a follower answers from its own image."""
    shell = Shell(tmp_path)
    broken = ControllerComponent(shell.node, shell.raft, shell.metadata, CONFIG, rng=random.Random(3), stale_reads=True)
    shell.raft.elect(2)  # not the leader: a correct controller refuses
    answer = await asyncio.wait_for(broken.routes()["/controller/register_read"]({"key": "x"}), 1)
    assert answer == {"value": None}
