"""Hand-made histories with known verdicts, for every linearizability model."""

from __future__ import annotations

import pytest

from kraftpy.tools.checker.linearizability import check_linearizability
from kraftpy.tools.checker.model import ModelError
from tests.unit.tools.checker.histories import history, op, seq


def verdict(h, model: str, **kw):
    return check_linearizability(h, model, **kw).valid


# --- register (Knossos semantics) -------------------------------------------------------------


def test_register_sequential() -> None:
    assert verdict(seq(op(0, "write", 1), op(0, "read", result=1)), "register") is True
    assert verdict(seq(op(0, "write", 1), op(0, "read", result=2)), "register") is False


def test_register_nil_read_is_always_legal() -> None:
    assert verdict(seq(op(0, "write", 1), op(1, "read", result=None)), "register") is True


def test_register_init() -> None:
    h = seq(op(0, "read", result=0))
    assert verdict(h, "register") is False
    assert verdict(h, "register", init=0) is True


def test_register_concurrent_read_may_precede_write() -> None:
    h = history((0, "invoke", "write", 1), (1, "invoke", "read"), (1, "ok", "read", 0), (0, "ok", "write", 1))
    assert verdict(h, "register", init=0) is True


def test_register_stale_read_after_write_completed() -> None:
    # p1 reads 1 while the write is in flight, then p2 reads the old 0 after both finished.
    h = history(
        (0, "invoke", "write", 1),
        (1, "invoke", "read"),
        (1, "ok", "read", 1),
        (0, "ok", "write", 1),
        (2, "invoke", "read"),
        (2, "ok", "read", 0),
    )
    assert verdict(h, "register", init=0) is False


def test_knossos_list_file_blames_the_impossible_read() -> None:
    """A Knossos-style file (a list, with comments): the read of 9 is the op that cannot be placed,
    not the later, innocent read."""
    from kraftpy.tools.checker.formats import parse_history

    text = (
        "({:type :invoke, :f :write, :value 1, :process 0}\n"
        " {:type :ok, :f :write, :value 1, :process 0}\n"
        " ; a write of 2 races a read that returns a value nobody wrote\n"
        " {:type :invoke, :f :write, :value 2, :process 1}\n"
        " {:type :invoke, :f :read, :value nil, :process 2}\n"
        " {:type :ok, :f :read, :value 9, :process 2}\n"
        " {:type :ok, :f :write, :value 2, :process 1}\n"
        " {:type :invoke, :f :read, :value nil, :process 3}\n"
        " {:type :ok, :f :read, :value 2, :process 3})\n"
    )
    result = check_linearizability(parse_history(text), "cas-register")
    assert result.valid is False
    assert [c["line"] for c in result.anomalies[0]["unplaceable"]] == [5]


def test_register_failed_write_did_not_happen_and_info_may_have() -> None:
    assert verdict(seq(op(0, "write", 2, status="fail"), op(1, "read", result=2)), "register", init=1) is False
    info = seq(op(0, "write", 2, status="info"), op(1, "read", result=2), op(1, "read", result=2))
    assert verdict(info, "register", init=1) is True
    never = seq(op(0, "write", 2, status="info"), op(1, "read", result=1))
    assert verdict(never, "register", init=1) is True
    # once it has taken effect it cannot be undone
    flip = seq(op(0, "write", 2, status="info"), op(1, "read", result=2), op(1, "read", result=1))
    assert verdict(flip, "register", init=1) is False


def test_register_rejects_cas() -> None:
    with pytest.raises(ModelError, match="line 1"):
        check_linearizability(seq(op(0, "cas", (1, 2))), "register")


def test_cas_register() -> None:
    assert verdict(seq(op(0, "cas", (0, 1)), op(0, "read", result=1)), "cas-register", init=0) is True
    assert verdict(seq(op(0, "cas", (5, 1))), "cas-register", init=0) is False
    # a failed CAS did not happen (Knossos drops it)
    assert verdict(seq(op(0, "cas", (0, 1), status="fail"), op(0, "read", result=0)), "cas-register", init=0)
    # an unknown CAS may have succeeded
    assert verdict(seq(op(0, "cas", (0, 1), status="info"), op(1, "read", result=1)), "cas-register", init=0)


# --- etcd (Porcupine semantics) ----------------------------------------------------------------


def test_etcd_nil_read_means_absent() -> None:
    assert verdict(seq(op(0, "read", result=None)), "etcd") is True
    assert verdict(seq(op(0, "write", 1), op(0, "read", result=None)), "etcd") is False


def test_etcd_failed_cas_returned_false() -> None:
    assert verdict(seq(op(0, "write", 1), op(0, "cas", (3, 2), status="fail"), op(0, "read", result=1)), "etcd")
    assert verdict(seq(op(0, "write", 1), op(0, "cas", (1, 2), status="fail")), "etcd") is False


def test_etcd_timed_out_read_constrains_nothing() -> None:
    h = seq(op(0, "write", 1), [(1, "invoke", "read"), (1, "fail", "read", "timed-out")], op(0, "read", result=1))
    assert verdict(h, "etcd") is True


def test_etcd_unknown_cas() -> None:
    h = seq(op(0, "write", 1), op(1, "cas", (1, 2), status="info"), op(0, "read", result=2))
    assert verdict(h, "etcd") is True
    h = seq(op(0, "write", 1), op(1, "cas", (3, 2), status="info"), op(0, "read", result=2))
    assert verdict(h, "etcd") is False


# --- kv ------------------------------------------------------------------------------------------


def kv(p, f, k, v=None, result=None, status="ok"):
    return op(p, f, v, result, key=k, status=status)


@pytest.mark.parametrize("partition", [True, False])
def test_kv(partition: bool) -> None:
    ok = seq(
        kv(0, "put", "a", "x"), kv(1, "append", "a", "y"), kv(0, "get", "b", result=""), kv(1, "get", "a", result="xy")
    )
    assert verdict(ok, "kv", partition=partition) is True
    bad = seq(kv(0, "append", "a", "x"), kv(1, "append", "b", "y"), kv(0, "get", "a", result="xy"))
    assert verdict(bad, "kv", partition=partition) is False
    unknown = seq(kv(0, "append", "a", "x", status="info"), kv(1, "get", "a", result="x"))
    assert verdict(unknown, "kv", partition=partition) is True


def test_kv_result_names_the_failing_key() -> None:
    bad = seq(kv(0, "append", "a", "x"), kv(1, "put", "b", "y"), kv(0, "get", "b", result="z"))
    result = check_linearizability(bad, "kv")
    assert [a["key"] for a in result.anomalies] == ["b"]
    assert check_linearizability(bad, "kv", partition=False).model == "kv-nopartition"


# --- set and queue -------------------------------------------------------------------------------


def test_set() -> None:
    assert verdict(seq(op(0, "add", 1), op(1, "add", 2), op(0, "read", result=(1, 2))), "set") is True
    assert verdict(seq(op(0, "add", 1), op(1, "add", 2), op(0, "read", result=(1,))), "set") is False
    concurrent = history((0, "invoke", "add", 1), (1, "invoke", "read"), (1, "ok", "read", ()), (0, "ok", "add", 1))
    assert verdict(concurrent, "set") is True


def test_queue() -> None:
    fifo = seq(op(0, "enqueue", 1), op(0, "enqueue", 2), op(1, "dequeue", result=1), op(1, "dequeue", result=2))
    assert verdict(fifo, "queue") is True
    lifo = seq(op(0, "enqueue", 1), op(0, "enqueue", 2), op(1, "dequeue", result=2))
    assert verdict(lifo, "queue") is False
    assert verdict(seq(op(1, "dequeue", result=None)), "queue") is True
    assert verdict(seq(op(0, "enqueue", 1), op(1, "dequeue", result=None)), "queue") is False
    # an unknown dequeue may have taken the head
    lost = seq(op(0, "enqueue", 1), op(0, "enqueue", 2), op(2, "dequeue", status="info"), op(1, "dequeue", result=2))
    assert verdict(lost, "queue") is True
