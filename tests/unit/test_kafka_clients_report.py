"""benchmarks/kafka_clients_report.py: every measure the bench writes reaches the HTML view, the
kcat consume beside confluent-kafka's, and the consume's CPU split (who limits that row)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from kafka_clients_report import measures, report_html


def _result() -> dict:
    consume = {"records_s": 400_000.0, "records_s_after_first": 480_000.0, "broker_cores": 0.33, "client_cores": 0.87}
    run = {
        "librdkafka_produce_100B": {"records_s": 160_000.0},
        "librdkafka_produce_1KiB": {"MB_s": 95.5},
        "librdkafka_consume_100B": consume,
        "kcat_consume_100B": {"records_s": 490_000.0, "records_s_after_first": 601_296.0},
    }
    return {"started": "2026-11-28T02:00:00Z", "load1_start": 1.0, "load1_end": 2.0, "runs": [run, dict(run)]}


def test_the_kcat_consume_is_charted_beside_confluent_kafkas() -> None:
    consume = next(series for title, _, _, series in measures(_result()) if title == "consume 100 B")
    assert consume["kraftpy, kcat, after 1st batch"] == [601_296.0, 601_296.0]
    assert consume["kraftpy, librdkafka, after 1st batch"] == [480_000.0, 480_000.0]


def test_the_view_says_which_side_limits_the_consume() -> None:
    page = report_html(_result())
    assert "kraftpy, kcat, after 1st batch</td><td>601,296.0" in page
    assert "the three brokers used 0.33 cores and the client 0.87" in page


def test_a_result_from_before_the_cpu_split_still_renders() -> None:
    result = _result()
    for run in result["runs"]:
        run["librdkafka_consume_100B"] = {"records_s": 1.0, "records_s_after_first": 2.0}
        del run["kcat_consume_100B"]
    page = report_html(result)
    assert "kcat" not in page and "cores and the client" not in page
