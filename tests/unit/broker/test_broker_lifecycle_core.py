"""BrokerLifecycle (sans-I/O): registration, heartbeats, leader hints, fencing and controlled shutdown."""

from __future__ import annotations

import pytest

from kraftpy.broker.lifecycle import HEARTBEAT, REGISTRATION, BrokerLifecycle, BrokerState
from kraftpy.metadata.image.metadata_delta import apply_records
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import Listener, RegisterBrokerRecord, UnfenceBrokerRecord
from kraftpy.protocol.errors import ErrorCode, KafkaError

VOTERS = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002), 3: ("127.0.0.1", 9003)}


def lifecycle(previous_broker_epoch: int = -1) -> BrokerLifecycle:
    return BrokerLifecycle(
        broker_id=4,
        cluster_id="c1",
        incarnation_id="inc-1",
        listeners=(Listener("PLAINTEXT", "127.0.0.1", 9004),),
        rack=None,
        voters=VOTERS,
        heartbeat_interval_ms=300,
        previous_broker_epoch=previous_broker_epoch,
    )


def heartbeat_answer(fenced: bool, shut_down: bool = False) -> dict:
    return {"is_caught_up": not fenced, "is_fenced": fenced, "should_shut_down": shut_down}


def test_registers_with_the_raft_leader_then_heartbeats_until_unfenced() -> None:
    lc = lifecycle()
    assert lc.status(-1, now_ms=0)["heartbeat_answered_ms_ago"] is None
    assert lc.next_request(0, -1, None) is None  # no controller known: nothing to send
    assert lc.next_deadline_ms() == 100  # look again later, no spinning
    sent = lc.next_request(100, -1, 2)
    assert sent is not None and sent.address == VOTERS[2] and sent.path == REGISTRATION
    assert sent.body["incarnation_id"] == "inc-1" and sent.body["listeners"][0]["port"] == 9004
    assert lc.next_request(0, -1, 2) is None  # one request in flight at a time
    lc.on_answer(sent, {"broker_epoch": 7}, 10)
    assert lc.state is BrokerState.RECOVERY and lc.registered and lc.fenced
    beat = lc.next_request(10, 42, 2)  # at once after registering
    assert beat.path == HEARTBEAT and beat.body == {
        "broker_id": 4,
        "broker_epoch": 7,
        "current_metadata_offset": 42,
        "want_fence": False,
        "want_shut_down": False,
    }
    lc.on_answer(beat, heartbeat_answer(fenced=False), 20)
    assert lc.state is BrokerState.RUNNING and not lc.fenced
    assert lc.next_request(21, 43, 2) is None and lc.next_deadline_ms() == 320
    assert lc.next_request(320, 43, 2).path == HEARTBEAT
    status = lc.status(43, now_ms=400)
    assert status["registered"] and status["fenced"] is False and status["broker_epoch"] == 7
    assert status["metadata_offset"] == 43
    assert status["heartbeat_answered_ms_ago"] == 380  # answered at 20; the registration answer does not count


def test_follows_not_controller_hints_and_forgets_unreachable_controllers() -> None:
    lc = lifecycle()
    sent = lc.next_request(0, -1, 1)
    hint = KafkaError("no", ErrorCode.NOT_CONTROLLER, leader_id=3, leader_address="127.0.0.1:9003")
    lc.on_error(sent, hint, 5)
    again = lc.next_request(5, -1, 1)
    assert again.address == VOTERS[3]  # the hint wins over the (stale) Raft leader
    lc.on_error(again, KafkaError("down", ErrorCode.NETWORK_EXCEPTION), 6)
    assert lc.next_request(6, -1, 1) is None  # backing off
    assert lc.next_deadline_ms() == 106
    assert lc.next_request(106, -1, 1).address == VOTERS[1]  # hint forgotten: the Raft leader again


def test_backoff_grows_and_is_capped_by_the_heartbeat_interval() -> None:
    lc = lifecycle()
    waits = []
    now = 0
    for _ in range(6):
        sent = lc.next_request(now, -1, 1)
        lc.on_error(sent, KafkaError("t", ErrorCode.REQUEST_TIMED_OUT), now)
        waits.append(lc.next_deadline_ms() - now)
        now = lc.next_deadline_ms()
    assert waits == [100, 200, 300, 300, 300, 300]


@pytest.mark.parametrize("code", [ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED])
def test_a_lost_registration_registers_again_with_the_same_incarnation(code: ErrorCode) -> None:
    lc = lifecycle()
    sent = lc.next_request(0, -1, 1)
    lc.on_answer(sent, {"broker_epoch": 3}, 0)
    beat = lc.next_request(0, 5, 1)
    lc.on_answer(beat, heartbeat_answer(fenced=False), 0)
    beat = lc.next_request(300, 5, 1)
    lc.on_error(beat, KafkaError("gone", code), 300)
    assert not lc.registered and lc.fenced and lc.state is BrokerState.STARTING
    again = lc.next_request(300, 5, 1)
    assert again.path == REGISTRATION and again.body["incarnation_id"] == "inc-1"


def test_every_registration_of_the_process_carries_the_previous_epoch_decided_at_start() -> None:
    lc = lifecycle(previous_broker_epoch=7)
    first = lc.next_request(0, -1, 1)
    assert first.path == REGISTRATION and first.body["previous_broker_epoch"] == 7
    lc.on_answer(first, {"broker_epoch": 9}, 0)
    lc.on_error(lc.next_request(0, 5, 1), KafkaError("gone", ErrorCode.STALE_BROKER_EPOCH), 0)
    # Nothing was lost since the start, and a registration the controller lost left epoch 7 registered there.
    assert lc.next_request(0, 5, 1).body["previous_broker_epoch"] == 7
    assert lifecycle().next_request(0, -1, 1).body["previous_broker_epoch"] == -1


def test_fenced_again_after_running_goes_back_to_recovery() -> None:
    lc = lifecycle()
    lc.on_answer(lc.next_request(0, -1, 1), {"broker_epoch": 3}, 0)
    lc.on_answer(lc.next_request(0, 1, 1), heartbeat_answer(fenced=False), 0)
    lc.on_answer(lc.next_request(300, 1, 1), heartbeat_answer(fenced=True), 300)
    assert lc.state is BrokerState.RECOVERY and lc.fenced


def test_controlled_shutdown_heartbeats_want_shut_down_until_released() -> None:
    lc = lifecycle()
    lc.on_answer(lc.next_request(0, -1, 1), {"broker_epoch": 3}, 0)
    lc.on_answer(lc.next_request(0, 1, 1), heartbeat_answer(fenced=False), 0)
    lc.begin_controlled_shutdown(10)
    assert lc.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN
    beat = lc.next_request(10, 1, 1)  # at once, not a full interval later
    assert beat.body["want_shut_down"] is True
    lc.on_answer(beat, heartbeat_answer(fenced=False, shut_down=False), 12)
    assert lc.next_deadline_ms() == 212  # leaderships are moving: ask again soon
    beat = lc.next_request(212, 2, 1)
    lc.on_answer(beat, heartbeat_answer(fenced=True, shut_down=True), 215)
    assert lc.state is BrokerState.SHUTTING_DOWN and lc.shutdown_released
    assert lc.next_request(1000, 2, 1) is None and lc.next_deadline_ms() is None


def test_a_fenced_or_unregistered_broker_shuts_down_without_asking() -> None:
    lc = lifecycle()
    lc.begin_controlled_shutdown(0)
    assert lc.state is BrokerState.SHUTTING_DOWN and lc.next_request(0, -1, 1) is None
    lc2 = lifecycle()
    lc2.on_answer(lc2.next_request(0, -1, 1), {"broker_epoch": 3}, 0)
    lc2.begin_controlled_shutdown(0)  # registered but still fenced: leads nothing
    assert lc2.state is BrokerState.SHUTTING_DOWN


def test_giving_up_controlled_shutdown_stops_anyway() -> None:
    lc = lifecycle()
    lc.on_answer(lc.next_request(0, -1, 1), {"broker_epoch": 3}, 0)
    lc.on_answer(lc.next_request(0, 1, 1), heartbeat_answer(fenced=False), 0)
    lc.begin_controlled_shutdown(0)
    lc.give_up_controlled_shutdown()
    assert lc.state is BrokerState.SHUTTING_DOWN and not lc.shutdown_released


def test_a_malformed_answer_raises_for_the_shell_to_treat_as_a_failure() -> None:
    lc = lifecycle()
    sent = lc.next_request(0, -1, 1)
    with pytest.raises(KafkaError) as info:
        lc.on_answer(sent, {"broker_epoch": "seven"}, 0)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def image_with(*records) -> MetadataImage:
    return apply_records(MetadataImage.EMPTY, records)


def registration(lc: BrokerLifecycle, incarnation: str, broker_epoch: int) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(lc.broker_id, incarnation, broker_epoch, lc.listeners, lc.rack)


def test_partition_roles_wait_for_this_incarnations_registration_in_the_image() -> None:
    """KIP-631's catch-up: a restarted broker must not act on the image its previous incarnation left."""
    lc = lifecycle()
    stale = image_with(registration(lc, "inc-0", 3), UnfenceBrokerRecord(lc.broker_id, 3))
    assert not lc.may_take_partition_roles(stale)  # not registered yet
    sent = lc.next_request(0, stale.offset, 2)
    lc.on_answer(sent, {"broker_epoch": 9}, 10)
    assert not lc.may_take_partition_roles(stale)  # registered, but the image predates the registration
    # Another incarnation's registration under our epoch number is not ours either.
    assert not lc.may_take_partition_roles(image_with(registration(lc, "someone-else", 9)))
    assert not lc.partition_roles_allowed and lc.status(0, now_ms=0)["partition_roles_from_offset"] == -1
    caught_up = apply_records(stale, [registration(lc, "inc-1", 9)], offset=0)
    assert lc.may_take_partition_roles(caught_up)
    assert lc.partition_roles_allowed and lc.roles_from_offset == caught_up.offset == 0
    # Once allowed, it stays allowed (images only move forward; a re-registration is followed in them).
    lc.on_error(lc.next_request(10, caught_up.offset, 2), KafkaError("gone", ErrorCode.STALE_BROKER_EPOCH), 20)
    assert not lc.registered and lc.may_take_partition_roles(caught_up)
