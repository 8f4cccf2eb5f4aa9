"""Every group request is validated: malformed bodies raise INVALID_REQUEST before any state changes; none crash."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.broker.groups import GROUP_APIS, GroupCoordinator, GroupCoordinatorConfig
from kraftpy.protocol.errors import ErrorCode, KafkaError

E = ErrorCode


def coordinator() -> GroupCoordinator:
    c = GroupCoordinator(GroupCoordinatorConfig(offsets_topic_num_partitions=1), rng=random.Random(0))
    c.complete_loading(0, [], 0)
    return c


@pytest.mark.parametrize(
    ("api", "body", "names"),
    [
        ("join_group", {"group_id": "g"}, "session_timeout_ms"),
        (
            "join_group",
            {"group_id": 3, "session_timeout_ms": 10_000, "protocol_type": "c", "protocols": []},
            "group_id",
        ),
        (
            "join_group",
            {"group_id": "g", "session_timeout_ms": 10_000, "protocol_type": "c", "protocols": [{"name": "r"}]},
            "metadata",
        ),
        (
            "join_group",
            {
                "group_id": "g",
                "session_timeout_ms": 10_000,
                "protocol_type": "c",
                "protocols": [{"name": "r", "metadata": b""}, {"name": "r", "metadata": b""}],
            },
            "twice",
        ),
        ("sync_group", {"group_id": "g", "generation_id": "1"}, "generation_id"),
        ("sync_group", {"group_id": "g", "assignments": [{"member_id": "a", "assignment": "text"}]}, "assignment"),
        ("heartbeat", {"group_id": "g", "generation_id": -2}, "generation_id"),
        ("leave_group", {"group_id": "g", "members": []}, "members"),
        (
            "offset_commit",
            {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]},
            "committed_offset",
        ),
        (
            "offset_commit",
            {
                "group_id": "g",
                "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": -1}]}],
            },
            "committed_offset",
        ),
        ("offset_fetch", {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [-1]}]}, "partition_indexes"),
        ("describe_groups", {"groups": "g"}, "groups"),
        ("delete_groups", {"groups_names": [1]}, "groups_names"),
        ("nope", {}, "unknown group API"),
    ],
)
def test_malformed_requests_name_the_field(api: str, body: dict, names: str) -> None:
    c = coordinator()
    with pytest.raises(KafkaError) as info:
        c.handle(1, api, body, 0)
    assert info.value.code is E.INVALID_REQUEST and names in str(info.value)
    assert c.groups == {}


values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.text(max_size=8), st.binary(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12,
)
FIELDS = [
    "group_id",
    "member_id",
    "generation_id",
    "group_instance_id",
    "session_timeout_ms",
    "rebalance_timeout_ms",
    "protocol_type",
    "protocols",
    "assignments",
    "members",
    "topics",
    "groups",
    "groups_names",
    "states_filter",
    "name",
    "metadata",
    "partitions",
    "partition_index",
    "committed_offset",
    "partition_indexes",
    "require_stable",
]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(GROUP_APIS),
    st.dictionaries(st.sampled_from(FIELDS), values, max_size=8),
)
def test_random_bodies_never_crash_the_coordinator(api: str, body: dict) -> None:
    c = coordinator()
    try:
        actions = c.handle(1, api, body, 0)
    except KafkaError as err:
        assert err.code is E.INVALID_REQUEST
    else:
        assert all(hasattr(a, "body") or hasattr(a, "records") for a in actions)
