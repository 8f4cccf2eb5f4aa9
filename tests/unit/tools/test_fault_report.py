"""The fault run's report (tools/faults/report.py): fault spans, latencies and throughput from a history."""

from __future__ import annotations

from kraftpy.tools.faults.report import NS_PER_S, audit_section, fault_timeline, lanes, plots_svg, run_section


def ev(process, type_, f, t_s, **fields):
    return {"process": process, "type": type_, "f": f, "time": int(t_s * NS_PER_S), **fields}


HISTORY = [
    ev(0, "invoke", "send", 0.0, key=0, value="p0-0"),
    ev(0, "ok", "send", 0.010, key=0, value="p0-0", offset=0),
    ev("nemesis", "info", "pause-start", 1.0, value={"nemesis": "pause", "node": 2}),
    ev(0, "invoke", "send", 1.5, key=1, value="p0-1"),
    ev("nemesis", "info", "pause-end", 3.0, value={"restarted": []}),
    ev(0, "info", "send", 3.5, key=1, value="p0-1"),
    ev("nemesis", "info", "kill-leader-start", 4.0, value={"nemesis": "kill-leader", "node": 1}),
]


def test_spans_run_from_each_fault_start_to_its_end_or_the_history_end() -> None:
    t = fault_timeline(HISTORY)
    assert [(s["nemesis"], s["start"], s["end"]) for s in t["spans"]] == [
        ("pause", 1.0, 3.0),
        ("kill-leader", 4.0, 4.0),
    ]
    assert t["end_s"] == 4.0


def test_latency_is_completion_minus_invocation_and_throughput_counts_per_second() -> None:
    t = fault_timeline(HISTORY)
    assert [(round(at, 3), round(ms), kind) for at, ms, kind in t["latencies"]] == [
        (0.01, 10, "ok"),
        (3.5, 2000, "info"),
    ]
    assert t["per_second"] == {(0, "ok"): 1, (3, "info"): 1}


def test_the_plots_shade_each_fault_and_draw_each_send() -> None:
    svg = plots_svg(fault_timeline(HISTORY))
    assert svg.count("<svg") == 2
    assert svg.count("<circle") == 2
    assert svg.count("fill-opacity") == 4  # two faults, under each of the two plots
    assert "pause 1.0-3.0 s" in svg


def test_the_audit_section_lists_findings_or_says_it_did_not_run() -> None:
    assert "not run" in audit_section(None)
    finding = {"kind": "lost_acked_write", "topic": "faults", "partition": 0}
    page = audit_section({"ok": False, "findings": [finding], "replicas": []})
    assert "1 finding(s)" in page and "lost_acked_write" in page


def test_overlapping_faults_of_one_nemesis_pair_up_by_id_and_stack_in_lanes() -> None:
    history = [
        ev("nemesis", "info", "pause-start", 1.0, value={"fault": 1, "nemesis": "pause", "node": 2}),
        ev("nemesis", "info", "isolate-start", 1.5, value={"fault": 2, "nemesis": "isolate", "node": None}),
        ev("nemesis", "info", "pause-start", 2.0, value={"fault": 3, "nemesis": "pause", "node": 3}),
        ev("nemesis", "info", "pause-end", 2.5, value={"fault": 1, "restarted": []}),
        ev("nemesis", "info", "isolate-end", 4.0, value={"fault": 2, "restarted": []}),
        ev("nemesis", "info", "pause-end", 5.0, value={"fault": 3, "restarted": []}),
        ev("nemesis", "info", "kill-start", 6.0, value={"fault": 4, "nemesis": "kill", "node": 1}),
        ev("nemesis", "info", "kill-end", 7.0, value={"fault": 4, "restarted": [1]}),
    ]
    spans = fault_timeline(history)["spans"]
    assert sorted((s["nemesis"], s["start"], s["end"]) for s in spans) == [
        ("isolate", 0.5, 3.0),  # seconds from the history's first event
        ("kill", 5.0, 6.0),
        ("pause", 0.0, 1.5),
        ("pause", 1.0, 4.0),
    ]
    by_start = {s["start"]: lane for s, lane in zip(spans, lanes(spans), strict=True)}
    assert by_start[0.0] != by_start[0.5] != by_start[1.0] != by_start[0.0]  # three faults on at 1.0-1.5 s
    assert by_start[5.0] == 0  # alone again
    assert plots_svg(fault_timeline(history)).count('class="lane"') == 2 * len(spans)


def test_the_run_section_names_the_faults_the_model_skipped() -> None:
    summary = {
        "seed": 105, "faults": {"lose-tail": 1}, "skipped": {"lose-tail": 2}, "anomalies": {}, "valid": True,
        "sends": {"invoked": 1, "ok": 1, "info": 0},
    }  # fmt: skip
    history = [*HISTORY, ev("nemesis", "info", "lose-tail-skip", 5.0, value={"node": 1, "waited_s": 30.0})]
    page = run_section(summary, "kraftpy faults run --seed 105", fault_timeline(history))
    assert "<td>skipped</td><td>lose-tail \u00d72</td>" in page, page
    assert "skipped" not in run_section({**summary, "skipped": {}}, "", fault_timeline(HISTORY))
