"""The quorum-state file: KRaft's JSON fields plus a CRC, atomic replacement, loud refusal when damaged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.raft.quorum_state import QuorumState
from kraftpy.raft.shell import quorum_state_file as qsf

CLUSTER = "c-1"


@settings(max_examples=50, deadline=None)
@given(
    epoch=st.integers(0, 2**31 - 1),
    voted=st.none() | st.integers(0, 1000),
    leader=st.none() | st.integers(0, 1000),
)
def test_round_trip(epoch: int, voted: int | None, leader: int | None) -> None:
    state = QuorumState(epoch, voted, leader)
    assert qsf.decode(qsf.encode(state, CLUSTER), Path("quorum-state"), CLUSTER) == state


@pytest.mark.parametrize("state", [QuorumState(2**31), QuorumState(3, 2**31, None), QuorumState(3, None, -2)])
def test_a_value_outside_int32_is_never_persisted(tmp_path: Path, state: QuorumState) -> None:
    qsf.write(tmp_path, QuorumState(2, 1, 1), CLUSTER)
    with pytest.raises(qsf.QuorumStateFileError, match="refusing to persist"):
        qsf.write(tmp_path, state, CLUSTER)
    assert qsf.read(tmp_path, CLUSTER) == QuorumState(2, 1, 1)  # the old state stands


def test_a_file_holding_an_epoch_beyond_int32_is_refused() -> None:
    body = {"clusterId": CLUSTER, "leaderId": -1, "leaderEpoch": 2**31 + 1, "votedId": -1, "data_version": 0}
    body["crc"] = qsf.crc32c.crc32c(qsf._canonical(body))
    with pytest.raises(qsf.QuorumStateFileError, match="leaderEpoch"):
        qsf.decode(json.dumps(body).encode(), Path("quorum-state"), CLUSTER)


def test_kraft_field_names_and_minus_one_for_none(tmp_path: Path) -> None:
    qsf.write(tmp_path, QuorumState(7, None, 3), CLUSTER)
    body = json.loads((tmp_path / qsf.FILE_NAME).read_text())
    assert {k: body[k] for k in ("leaderEpoch", "leaderId", "votedId", "clusterId")} == {
        "leaderEpoch": 7,
        "leaderId": 3,
        "votedId": -1,
        "clusterId": CLUSTER,
    }
    assert isinstance(body["crc"], int)


def test_missing_file_means_never_voted(tmp_path: Path) -> None:
    assert qsf.read(tmp_path, CLUSTER) is None


def test_write_replaces_atomically_and_leaves_no_temp_file(tmp_path: Path) -> None:
    qsf.write(tmp_path, QuorumState(1, 2, None), CLUSTER)
    qsf.write(tmp_path, QuorumState(2, 2, 2), CLUSTER)
    assert qsf.read(tmp_path, CLUSTER) == QuorumState(2, 2, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [qsf.FILE_NAME]


def test_a_temp_file_left_by_a_crash_does_not_change_the_state(tmp_path: Path) -> None:
    qsf.write(tmp_path, QuorumState(4, 1, 1), CLUSTER)
    (tmp_path / (qsf.FILE_NAME + ".tmp")).write_bytes(qsf.encode(QuorumState(5, 2, None), CLUSTER)[:20])
    assert qsf.read(tmp_path, CLUSTER) == QuorumState(4, 1, 1)
    qsf.write(tmp_path, QuorumState(5, 2, None), CLUSTER)  # and the next write still works
    assert qsf.read(tmp_path, CLUSTER) == QuorumState(5, 2, None)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_damage_is_refused_with_a_clear_message(data: st.DataObject) -> None:
    good = qsf.encode(QuorumState(9, 2, 2), CLUSTER)
    kind = data.draw(st.sampled_from(["flip", "truncate", "garbage"]))
    if kind == "flip":
        i = data.draw(st.integers(0, len(good) - 2))  # (the final newline is not part of the JSON)
        bad = good[:i] + bytes([good[i] ^ data.draw(st.integers(1, 255))]) + good[i + 1 :]
    elif kind == "truncate":
        bad = good[: data.draw(st.integers(0, len(good) - 3))]
    else:
        bad = data.draw(st.binary(min_size=0, max_size=80))
    try:
        state = qsf.decode(bad, Path("/data/quorum-state"), CLUSTER)
    except KafkaError as err:
        assert err.code in (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.INCONSISTENT_CLUSTER_ID)
        assert "quorum-state" in str(err)
    else:  # a flip inside insignificant whitespace leaves the same JSON
        assert state == QuorumState(9, 2, 2)


def test_edited_values_fail_the_crc(tmp_path: Path) -> None:
    qsf.write(tmp_path, QuorumState(9, 2, 2), CLUSTER)
    path = tmp_path / qsf.FILE_NAME
    path.write_text(path.read_text().replace('"votedId": 2', '"votedId": 3'))
    with pytest.raises(qsf.QuorumStateFileError, match="CRC"):
        qsf.read(tmp_path, CLUSTER)


def test_another_clusters_file_is_refused(tmp_path: Path) -> None:
    qsf.write(tmp_path, QuorumState(3, None, 1), "other-cluster")
    with pytest.raises(KafkaError) as info:
        qsf.read(tmp_path, CLUSTER)
    assert info.value.code is ErrorCode.INCONSISTENT_CLUSTER_ID
