"""Malformed requests (fields of the wrong type) are answered with an error, never a crash."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.requests import (
    AllocateProducerIdsRequest,
    AlterConfigsResource,
    AlterPartitionItem,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    UnregisterBrokerRequest,
)
from kraftpy.metadata.harness import ControllerHarness, check_image_invariants
from kraftpy.protocol.errors import ErrorCode, KafkaError

garbage = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.text(max_size=3),
    st.booleans(),
    st.floats(allow_nan=True),
    st.lists(st.integers(-1, 3), max_size=3).map(tuple),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def mangled(cls: type, nested: dict[str, st.SearchStrategy] | None = None) -> st.SearchStrategy:
    fields = {f.name: garbage for f in dataclasses.fields(cls)}
    fields.update(nested or {})
    return st.builds(cls, **fields)


requests = st.one_of(
    mangled(BrokerRegistrationRequest),
    mangled(BrokerHeartbeatRequest),
    mangled(UnregisterBrokerRequest),
    mangled(CreateTopicsRequest, {"topics": st.lists(mangled(CreatableTopic) | garbage, max_size=2).map(tuple)}),
    mangled(DeleteTopicsRequest),
    mangled(CreatePartitionsRequest, {"topics": st.lists(mangled(CreatePartitionsTopic), max_size=2).map(tuple)}),
    mangled(
        IncrementalAlterConfigsRequest,
        {"resources": st.lists(mangled(AlterConfigsResource) | garbage, max_size=2).map(tuple)},
    ),
    mangled(AlterPartitionRequest, {"partitions": st.lists(mangled(AlterPartitionItem), max_size=2).map(tuple)}),
    mangled(ElectLeadersRequest),
    mangled(AllocateProducerIdsRequest),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(requests, min_size=1, max_size=5))
def test_garbage_never_crashes_the_controller(batch) -> None:
    h = ControllerHarness(ControllerConfig(cluster_id="c", metadata_max_idle_interval_ms=0))
    h.start_brokers([0, 1, 2])
    h.send(CreateTopicsRequest((CreatableTopic("t", 2, 2),)))
    for request in batch:
        result = h.send(request)
        assert result.response is not None
        if isinstance(result.response, KafkaError):
            assert result.records == ()
    check_image_invariants(h.latest)


def test_a_bool_broker_id_or_epoch_is_refused_not_written() -> None:
    # True == 1 in Python: a bool that matched broker 0's epoch 1 went into a ProducerIdsRecord that no node
    # could decode (the example hypothesis found above). Heartbeats check epochs the same way.
    h = ControllerHarness(ControllerConfig(cluster_id="c", metadata_max_idle_interval_ms=0))
    h.start_brokers([0, 1, 2])
    epoch = h.latest.broker(0).broker_epoch
    assert epoch == 1  # so True "matches" it
    for request in (
        AllocateProducerIdsRequest(broker_id=0, broker_epoch=True),
        AllocateProducerIdsRequest(broker_id=True, broker_epoch=h.latest.broker(1).broker_epoch),
    ):
        result = h.send(request)
        assert isinstance(result.response, KafkaError) and result.response.code == ErrorCode.INVALID_REQUEST
        assert result.records == ()
    assert h.send(AllocateProducerIdsRequest(broker_id=0, broker_epoch=epoch)).records != ()
