"""A self-contained HTML page for a check: one lane per process, operations as bars in time.

Everything is inline (CSS, JS, data; the timeline is SVG drawn by the page's
script), so the file opens offline. For a linearizability check the page
shows, per part, the linearization found or the longest linearizable prefix
(order numbers on the bars, a path through feasible linearization points)
and marks the operations that cannot be placed; for a Kafka check it lists
the anomalies and highlights the operations of the one selected. Hovering a
bar shows the operation's details.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

from kraftpy.tools.checker.explain import explain, verdict_word
from kraftpy.tools.checker.linearizability import LinearizabilityDetail
from kraftpy.tools.checker.result import CheckResult, jsonable


def _short(value: Any) -> str:
    text = json.dumps(jsonable(value), separators=(",", ":"))
    return text if len(text) <= 40 else text[:39] + "\u2026"


def _label(op: Any) -> str:
    """A short text for the bar: what the operation did."""
    key = "" if op.key is None else f" {_short(op.key)}"
    if op.f == "send" and "offset" in op.extra:
        return f"send{key} {_short(op.value)} @{op.extra['offset']}"
    if op.f == "poll" and op.status == "ok" and isinstance(op.result, tuple):
        return "poll " + " ".join(f"{_short(r[2])}@{r[1]}" for r in op.result if isinstance(r, tuple) and len(r) == 3)
    if op.status == "ok" and op.result is not None and op.result != op.value:
        return f"{op.f}{key} \u2192 {_short(op.result)}"
    return f"{op.f}{key}" + ("" if op.value is None else f" {_short(op.value)}")


def _page_data(result: CheckResult) -> dict[str, Any]:
    h = result.history
    ops = h.operations if h is not None else []
    finite = [t for op in ops for t in (op.call, op.ret) if not math.isinf(t)]
    data: dict[str, Any] = {
        "verdict": verdict_word(result),
        "valid": result.valid,
        "model": result.model,
        "timeUnit": "time" if h is not None and h.timed else "line",
        "tmin": min(finite, default=0),
        "tmax": max(finite, default=1),
        "processes": sorted({op.process for op in ops}),
        "ops": [
            {
                "id": op.id,
                "p": op.process,
                "f": op.f,
                "key": jsonable(op.key),
                "value": jsonable(op.value),
                "result": jsonable(op.result),
                "status": op.status,
                "call": op.call,
                "ret": None if math.isinf(op.ret) else op.ret,
                "line": op.invoke_line,
                "cline": op.complete_line,
                "label": _label(op),
            }
            for op in ops
        ],
        "parts": [],
        "anomalies": [],
        "kafka": result.model.startswith("kafka"),
    }
    detail = result.detail
    if isinstance(detail, LinearizabilityDetail):
        for part in detail.parts:
            r = part.result
            calls = part.calls
            part_model = part.model or detail.model
            verdict = (
                "unchecked" if r is None else {True: "linearizable", False: "not linearizable"}.get(r.valid, "unknown")
            )
            data["parts"].append(
                {
                    "label": "whole history" if part.label is None else f"key {jsonable(part.label)!r}",
                    "verdict": verdict,
                    "ops": [c.op.id for c in calls],
                    "order": [] if r is None else [calls[i].op.id for i in r.order],
                    "blocked": [] if r is None else [calls[i].op.id for i in r.blocked],
                    "state": "" if r is None else part_model.describe_state(r.state),
                    "text": {c.op.id: part_model.describe_call(c) for c in calls},
                }
            )
        rank = {"not linearizable": 0, "unknown": 1, "unchecked": 2, "linearizable": 3}
        data["parts"].sort(key=lambda p: rank[p["verdict"]])
    else:
        for a in result.anomalies:
            brief = ", ".join(f"{k}={json.dumps(v)}" for k, v in a.items() if k not in ("type", "ops", "failure"))
            ids = [o["id"] for o in a["ops"]]
            data["anomalies"].append({"type": a["type"], "failure": a.get("failure", True), "brief": brief, "ops": ids})
    return data


def render_html(result: CheckResult, *, title: str = "kraftpy check", before: str = "", after: str = "") -> str:
    """The report page as one string; `before` and `after` are HTML put around the check's own sections
    (a fault run's report adds its timeline and audit there)."""
    data = json.dumps(_page_data(result), separators=(",", ":")).replace("</", "<\\/")
    title = f"{title}: {verdict_word(result)}"
    source = html.escape(result.history.source if result.history is not None else "")
    verdict_class = {True: "ok", False: "bad"}.get(result.valid, "unknown")  # type: ignore[arg-type]
    return (
        _TEMPLATE.replace("@TITLE@", html.escape(title))
        .replace("@VERDICT@", html.escape(verdict_word(result)))
        .replace("@VCLASS@", verdict_class)
        .replace("@SUMMARY@", html.escape(f"model {result.model} · {result.operations} operations · {source}"))
        .replace("@EXPLAIN@", html.escape(explain(result)))
        .replace("@BEFORE@", before)
        .replace("@AFTER@", after)
        .replace("@DATA@", data)
    )


_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>@TITLE@</title>
<style>
 body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;
      color:#1d2733;background:#f6f7f9}
 header{padding:14px 20px;background:#fff;border-bottom:1px solid #dde2e8;display:flex;gap:18px;
        align-items:center;flex-wrap:wrap}
 .verdict{font-weight:700;font-size:18px;padding:4px 12px;border-radius:6px;color:#fff}
 .verdict.ok{background:#2e7d4f}.verdict.bad{background:#c0392b}.verdict.unknown{background:#b7791f}
 .summary{color:#52606d}
 main{padding:12px 20px}
 .controls{display:flex;gap:16px;align-items:center;flex-wrap:wrap;margin-bottom:8px}
 .legend span{display:inline-flex;align-items:center;gap:5px;margin-right:12px;font-size:12px;color:#3e4c59}
 .legend i{display:inline-block;width:18px;height:10px;border-radius:2px;border:1px solid #0002}
 #chart{overflow:auto;background:#fff;border:1px solid #dde2e8;border-radius:6px;max-height:70vh}
 svg text{font-size:11px;fill:#3e4c59}
 .lane-label{font-weight:600}
 .bar-text{font-size:10px;pointer-events:none;fill:#1d2733}.bar-text.light{fill:#fff}
 .blocked-label{fill:#b03a2e;font-weight:600;paint-order:stroke;stroke:#fff;stroke-width:3px}
 .bar{stroke:#0003;stroke-width:1;cursor:pointer}
 .bar:hover{stroke:#000;stroke-width:2}
 #tip{position:fixed;pointer-events:none;background:#1d2733;color:#fff;padding:6px 9px;border-radius:5px;
      font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;white-space:pre;display:none;z-index:10;max-width:720px}
 details{margin-top:12px;background:#fff;border:1px solid #dde2e8;border-radius:6px;padding:6px 12px}
 pre{white-space:pre-wrap;font:12px/1.45 ui-monospace,Menlo,Consolas,monospace;margin:6px 0}
 #anoms li{cursor:pointer;margin:2px 0}#anoms li.sel{background:#fdecea}
 .fail-tag{color:#c0392b;font-weight:600}.allow-tag{color:#52606d}
 #info{font-size:13px;color:#3e4c59;margin:6px 0}
</style></head>
<body>
<header><span class="verdict @VCLASS@">@VERDICT@</span><span class="summary">@SUMMARY@</span></header>
<main>
@BEFORE@
 <div class="controls">
  <label id="partbox">Part <select id="part"></select></label>
  <label id="otherbox"><input id="others" type="checkbox"> show other parts</label>
  <label>Zoom <input id="zoom" type="range" min="0" max="100" value="0"></label>
  <span class="legend" id="kleg"><span><i style="background:#8fb3d9"></i>operation</span>
   <span><i style="background:#d64541"></i>involved in the selected anomaly (click one below)</span>
   <span><i style="background:#f0b35b"></i>info / pending</span></span>
  <span class="legend" id="lleg">
   <span><i style="background:#3f9e63"></i>linearized (order shown)</span>
   <span><i style="background:#d64541"></i>cannot be placed</span>
   <span><i style="background:#8fb3d9"></i>in part, not reached</span>
   <span><i style="background:#f0b35b"></i>info / pending (may take effect later)</span>
   <span><i style="background:#e3e7ec"></i>failed / other part</span>
  </span>
 </div>
 <div id="info"></div>
 <div id="chart"></div>
 <details id="anomsbox" open><summary>Anomalies</summary><ul id="anoms"></ul></details>
 <details open><summary>Explanation</summary><pre>@EXPLAIN@</pre></details>
@AFTER@
</main>
<div id="tip"></div>
<script>
const D = @DATA@;
const NS = "http://www.w3.org/2000/svg";
const byId = new Map(D.ops.map(o => [o.id, o]));
const lanes = new Map(D.processes.map((p, i) => [p, i]));
const LANE = 24, BAR = 14, LEFT = 64, TOP = 30, RIGHTPAD = 40;
let sel = 0, anomSel = D.anomalies.findIndex(a => a.failure);
document.getElementById(D.kafka ? "lleg" : "kleg").style.display = "none";
function el(name, attrs, parent) {
  const e = document.createElementNS(NS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
function show(v) { return v === null || v === undefined ? "nil" : JSON.stringify(v); }
function draw() {
  const chart = document.getElementById("chart");
  chart.innerHTML = "";
  const span = Math.max(D.tmax - D.tmin, 1);
  const baseW = Math.max(chart.clientWidth - LEFT - RIGHTPAD - 20, 300);
  const zoom = Math.pow(40, document.getElementById("zoom").value / 100);
  const W = baseW * zoom, H = TOP + LANE * D.processes.length + 10;
  const x = t => LEFT + (t - D.tmin) / span * W;
  const svg = el("svg", {width: LEFT + W + RIGHTPAD, height: H}, chart);
  // time axis: a "nice" step (1, 2 or 5 x 10^k) about every 110 px
  const raw = span * 110 / W, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(m => m * mag).find(s => s >= raw) || raw;
  for (let t = Math.ceil(D.tmin / step) * step; t <= D.tmax; t += step) {
    el("line", {x1: x(t), x2: x(t), y1: TOP - 6, y2: H, stroke: "#eef1f4"}, svg);
    el("text", {x: x(t) + 2, y: TOP - 10}, svg).textContent = +t.toPrecision(12);
  }
  el("text", {x: 4, y: 14, "font-weight": 600}, svg).textContent = D.timeUnit;
  D.processes.forEach((p, i) => {
    const y = TOP + i * LANE;
    if (i % 2) el("rect", {x: 0, y: y, width: LEFT + W + RIGHTPAD, height: LANE, fill: "#fafbfc"}, svg);
    el("text", {x: 8, y: y + LANE / 2 + 4, class: "lane-label"}, svg).textContent = "p" + p;
  });
  const part = D.parts[sel];
  const inPart = part ? new Set(part.ops) : null;
  const rank = part ? new Map(part.order.map((id, i) => [id, i + 1])) : new Map();
  const blocked = part ? new Set(part.blocked) : new Set();
  const showOthers = document.getElementById("others").checked;
  const marked = anomSel >= 0 ? new Set(D.anomalies[anomSel].ops) : null;
  const late = [];  // labels drawn over every bar
  for (const o of D.ops) {
    const y = TOP + lanes.get(o.p) * LANE + (LANE - BAR) / 2;
    const x1 = x(o.call), x2 = o.ret === null ? LEFT + W + RIGHTPAD - 4 : Math.max(x(o.ret), x1 + 3);
    let fill = "#8fb3d9", opacity = 1;
    if (o.status === "fail") fill = "#e3e7ec";
    else if (o.ret === null) fill = "#f0b35b";
    if (inPart) {
      if (!inPart.has(o.id)) { if (!showOthers) continue; fill = "#e3e7ec"; opacity = 0.45; }
      else if (blocked.has(o.id)) fill = "#d64541";
      else if (rank.has(o.id)) fill = "#3f9e63";
    }
    if (marked) { if (marked.has(o.id)) fill = "#d64541"; else opacity = 0.35; }
    const r = el("rect", {x: x1, y: y, width: x2 - x1, height: BAR, rx: 3, fill: fill, opacity: opacity,
                          class: "bar"}, svg);
    if (o.ret === null) r.setAttribute("stroke-dasharray", "4 3");
    r.addEventListener("mousemove", ev => tip(ev, o, part, rank, blocked));
    r.addEventListener("mouseleave", () => document.getElementById("tip").style.display = "none");
    if (blocked.has(o.id)) late.push([x2 + 4, y + BAR - 3, "\u2715 cannot be placed: " + (part.text[o.id] || o.f)]);
    let text = (rank.has(o.id) ? "#" + rank.get(o.id) + " " : "") + o.label;
    const room = Math.floor((Math.min(x2, LEFT + W) - x1 - 6) / 5.6);
    if (room >= 2) {
      if (text.length > room) text = text.slice(0, room - 1) + "\u2026";
      const dark = fill === "#3f9e63" || fill === "#d64541";
      el("text", {x: x1 + 3, y: y + BAR - 3, class: dark ? "bar-text light" : "bar-text"}, svg).textContent = text;
    }
  }
  for (const [lx, ly, text] of late) {
    el("rect", {x: lx - 2, y: ly - 11, width: text.length * 6.4 + 4, height: 15, rx: 3, fill: "#fff",
                stroke: "#d64541", "stroke-width": 1}, svg);
    el("text", {x: lx, y: ly, class: "blocked-label"}, svg).textContent = text;
  }
  // A path through feasible linearization points: each no earlier than its call or its predecessor.
  if (part && part.order.length) {
    let t = -Infinity, pts = [];
    for (const id of part.order) {
      const o = byId.get(id);
      t = Math.max(t, o.call);
      pts.push([x(t) + 1, TOP + lanes.get(o.p) * LANE + LANE / 2]);
    }
    el("polyline", {points: pts.map(p => p.join(",")).join(" "), fill: "none", stroke: "#1d2733",
                    "stroke-width": 1, "stroke-opacity": 0.55}, svg);
    for (const p of pts) el("circle", {cx: p[0], cy: p[1], r: 2.2, fill: "#1d2733"}, svg);
  }
}
function tip(ev, o, part, rank, blocked) {
  const t = document.getElementById("tip");
  let s = "line " + o.line + (o.cline ? " \\u2192 " + o.cline : "") + "   p" + o.p + "   " + o.f;
  if (o.key !== null) s += "   key " + show(o.key);
  s += "\\nvalue  " + show(o.value) + "\\nresult " + (o.status === "ok" ? show(o.result) : "-") +
       "\\nstatus " + o.status + (o.ret === null ? " (may take effect any time after its call, or never)" : "");
  if (part && part.text[o.id]) s += "\\nmodel  " + part.text[o.id];
  if (rank.has(o.id)) s += "\\nlinearized #" + rank.get(o.id) + " of " + part.order.length;
  if (blocked.has(o.id)) s += "\\ncannot be placed after the prefix (state " + part.state + ")";
  t.textContent = s;
  t.style.display = "block";
  t.style.left = Math.min(ev.clientX + 14, window.innerWidth - t.offsetWidth - 8) + "px";
  t.style.top = (ev.clientY + 14) + "px";
}
function info() {
  const part = D.parts[sel];
  const box = document.getElementById("info");
  if (!part) { box.textContent = ""; return; }
  box.textContent = part.label + ": " + part.verdict + " \\u2014 " + part.ops.length + " operations; " +
    (part.verdict === "linearizable" ? "linearization" : "longest linearizable prefix found") + ": " +
    part.order.length + (part.blocked.length ? "; " + part.blocked.length + " cannot be placed; state there: " +
    part.state : "");
}
const selBox = document.getElementById("part");
if (D.parts.length) {
  D.parts.forEach((p, i) => { const o = document.createElement("option"); o.value = i;
    o.textContent = p.label + " \\u2014 " + p.verdict; selBox.appendChild(o); });
  selBox.addEventListener("change", () => { sel = +selBox.value; info(); draw(); });
  if (D.parts.length < 2) document.getElementById("otherbox").style.display = "none";
} else {
  document.getElementById("partbox").style.display = "none";
  document.getElementById("otherbox").style.display = "none";
}
document.getElementById("others").addEventListener("change", draw);
const ul = document.getElementById("anoms");
if (D.anomalies.length) {
  D.anomalies.forEach((a, i) => {
    const li = document.createElement("li");
    li.innerHTML = '<span class="' + (a.failure ? "fail-tag" : "allow-tag") + '"></span> ';
    li.firstChild.textContent = a.type + (a.failure ? "" : " (allowed)");
    li.appendChild(document.createTextNode(" " + a.brief));
    li.addEventListener("click", () => { anomSel = anomSel === i ? -1 : i;
      [...ul.children].forEach((c, j) => c.classList.toggle("sel", j === anomSel)); draw(); });
    if (i === anomSel) li.classList.add("sel");
    ul.appendChild(li);
  });
} else document.getElementById("anomsbox").style.display = "none";
document.getElementById("zoom").addEventListener("input", draw);
window.addEventListener("resize", draw);
info(); draw();
</script></body></html>
"""
