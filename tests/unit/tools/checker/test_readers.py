"""History readers: kraftpy JSON Lines, Jepsen EDN, Porcupine etcd logs, detection and pairing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kraftpy.tools.checker.edn import Keyword
from kraftpy.tools.checker.formats import detect_format, parse_history, read_history
from kraftpy.tools.checker.history import HistoryError

JSONL = """{"process": 0, "type": "invoke", "f": "write", "value": 1, "time": 10}
{"process": "nemesis", "type": "info", "f": "start", "time": 11}
{"process": 1, "type": "invoke", "f": "read", "time": 12}
{"process": 0, "type": "ok", "f": "write", "value": 1, "time": 13}
{"process": 1, "type": "info", "f": "read", "time": 14}
"""


def test_jsonl_pairs_operations_and_skips_nemesis() -> None:
    h = parse_history(JSONL)
    assert h.format == "jsonl" and h.timed
    w, r = h.operations
    assert (w.f, w.status, w.call, w.ret, w.invoke_line, w.complete_line) == ("write", "ok", 10, 13, 1, 4)
    assert (r.f, r.status, r.call) == ("read", "info", 12)
    assert math.isinf(r.ret), "an info op stays open to the end"


def test_edn_lines_with_nemesis_and_keywords() -> None:
    text = (
        "{:process 0, :type :invoke, :f :cas, :value [1 2]}\n"
        "{:process :nemesis, :type :info, :f :start, :value nil}\n"
        "{:process 0, :type :fail, :f :cas, :value [1 2]}\n"
        "{:process 1, :type :invoke, :f :read, :value nil}\n"
    )
    h = parse_history(text)
    assert h.format == "edn" and not h.timed
    cas, read = h.operations
    assert (cas.value, cas.status, cas.call, cas.ret) == ((1, 2), "fail", 1, 3)
    assert read.status == "pending" and math.isinf(read.ret)


def test_edn_vector_of_maps_with_time() -> None:
    text = '[{:process 0 :type :invoke :f :put :key "k" :value "a" :time 5}\n {:process 0 :type :ok :f :put :time 9}]'
    (put,) = parse_history(text).operations
    assert (put.key, put.value, put.call, put.ret) == ("k", "a", 5, 9)


def test_etcd_log_both_separators(tmp_path: Path) -> None:
    path = tmp_path / "etcd.log"
    path.write_text(
        "INFO  jepsen.util - 3\t:invoke\t:cas\t[1 2]\n"
        "INFO  jepsen.util - 17  :invoke :read   nil\n"
        "INFO  jepsen.util - 17  :fail   :read   :timed-out\n"
        "INFO  jepsen.util - 3\t:info\t:cas\t:timed-out\n"
    )
    assert detect_format(path.read_text()) == "etcd"
    h = read_history(path)
    cas, read = h.operations
    assert cas.value == (1, 2) and cas.status == "info" and math.isinf(cas.ret)
    assert read.status == "fail" and read.result == Keyword("timed-out") and read.ret == 3


def test_format_override_and_detection() -> None:
    assert detect_format('{"process": 0}') == "jsonl"
    assert detect_format("{:process 0}") == "edn"
    assert detect_format('{"process": 0, "type": "invoke"') == "jsonl"  # broken JSON is still reported as JSON
    assert detect_format("[{:process 0}]") == "edn"
    with pytest.raises(HistoryError):
        parse_history(JSONL, "etcd")


T5 = '{"process": 0, "type": "invoke", "f": "r", "time": 5}'


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ('{"process": 0, "type": "invoke", "f": "read"}\n{"process": 0, "type": "ok"', 2, "not JSON"),
        ('{"process": 0, "type": "ok", "f": "read"}', 1, "no open invocation"),
        ('{"process": 0, "type": "invoke", "f": "read"}\n{"process": 0, "type": "invoke", "f": "read"}', 2, "open"),
        ('{"process": 0, "type": "invoke", "f": "read"}\n{"process": 0, "type": "ok", "f": "write"}', 2, "differs"),
        ('{"process": 0, "type": "begin", "f": "read"}', 1, "type"),
        (T5 + '\n{"process": 1, "type": "invoke", "f": "r"}', 2, "time"),
        ("{:process 0, :type :invoke, :f :read}\n{:process 0 :type :ok}", 2, "no :f"),
        ("{:process 0, :type :invoke, :f :read}\n{:process 0 :type :ok :f :read", 2, "never closed"),
        ("INFO  jepsen.util - 1\t:invoke\t:read\tnil\nINFO  jepsen.util - 1\t:ok\t:read\tfoo\n", 2, "value"),
        ("INFO  jepsen.util - 1\t:invoke\t:read\tnil\nINFO jepsen.util - 1\t:ok\t:read\t1\n", 2, "start"),
        ("INFO  jepsen.util - 1\t:invoke\t:incr\tnil\n", 1, ":incr"),
    ],
)
def test_malformed_input_names_the_line(text: str, line: int, fragment: str) -> None:
    with pytest.raises(HistoryError) as info:
        parse_history(text, source="h")
    assert info.value.line == line
    assert fragment in info.value.reason
    assert str(info.value).startswith(f"h:{line}: ")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="cannot read"):
        read_history(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"process": 0, "type": "invoke", "f": "r"}\n\xff\n')
    with pytest.raises(HistoryError) as info:
        read_history(bad)
    assert info.value.line == 2
