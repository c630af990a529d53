"""The run's HTML report: one self-contained file a person reads instead of the tables.

Per cluster: the under-replicated, under-min-ISR and offline partition counts over time (a step
plot), a timeline of fencings, elections, rolls (controlled shutdowns and re-registrations) and
metadata.version changes, and the DR check table with pass/fail and evidence. The plots are PNGs
drawn with matplotlib's object API (a `Figure` saved through Agg: no pyplot state, no display) and embedded as data URIs, so the file
can be mailed or attached to an incident as it is. The tables it draws from are small (counts,
events, checks); they are collected to the driver.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
from collections.abc import Sequence
from typing import Any

import matplotlib.dates as mdates
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from kraft_pipeline.job import Tables

__all__ = ["TIMELINE_EVENTS", "render_report"]

# Event kinds on the timeline, top to bottom, with their marker colours.
TIMELINE_EVENTS = {
    "controller_elected": "#6a3d9a",
    "voters_changed": "#cab2d6",
    "feature_level_changed": "#ff7f00",
    "broker_registered": "#1f78b4",
    "broker_controlled_shutdown": "#a6cee3",
    "broker_fenced": "#e31a1c",
    "broker_unfenced": "#33a02c",
    "broker_unregistered": "#b15928",
}
# Wider lines first, so a state whose count equals another's still shows around it.
_STATES = (("under_replicated", "under-replicated", "#e31a1c", 4.0), ("under_min_isr", "under min ISR", "#ff7f00", 2.5),
           ("offline", "offline", "#000000", 1.2))


def _time(ms: int) -> float:
    """Matplotlib's date number of a Unix time in ms (UTC)."""
    return float(mdates.date2num(dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)))  # type: ignore[no-untyped-call]


def _png(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _span(times_ms: Sequence[int]) -> tuple[float, float]:
    """One time axis for both plots of a cluster (a margin of 2% each side), so that a fencing on
    the timeline sits above the URP step it caused."""
    low, high = _time(min(times_ms)), _time(max(times_ms))
    margin = max((high - low) * 0.02, 1 / 86_400)  # at least a second
    return low - margin, high + margin


def _urp_plot(rows: Sequence[dict[str, Any]], span: tuple[float, float]) -> str:
    figure = Figure(figsize=(10, 3.2))
    axes = figure.subplots()
    rows = sorted(rows, key=lambda r: r["offset"])
    times = [_time(r["timestamp_ms"]) for r in rows]
    for column, label, colour, width in _STATES:
        axes.step(times, [r[column] for r in rows], where="post", label=label, color=colour, linewidth=width)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylabel("partitions")
    axes.set_title("Partitions under-replicated, under min ISR and offline")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: never over the lines
    axes.grid(alpha=0.3)
    axes.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))  # type: ignore[no-untyped-call]
    axes.set_ylim(bottom=0)
    axes.set_xlim(*span)
    figure.autofmt_xdate()
    return _png(figure)


def _timeline_plot(events: Sequence[dict[str, Any]], span: tuple[float, float]) -> str:
    kinds = list(TIMELINE_EVENTS)
    figure = Figure(figsize=(10, 0.45 * len(kinds) + 1.2))
    axes = figure.subplots()
    for row, kind in enumerate(kinds):
        hits = [e for e in events if e["event"] == kind]
        axes.scatter([_time(e["batch_timestamp_ms"]) for e in hits], [row] * len(hits),
                     color=TIMELINE_EVENTS[kind], s=40, zorder=3)
        labels: dict[int, list[str]] = {}
        for e in hits:
            label = e["value"] if kind == "feature_level_changed" else e["node_id"]
            if kind == "feature_level_changed" and e["name"] != "metadata.version":
                continue
            if label is not None and str(label) not in labels.setdefault(e["batch_timestamp_ms"], []):
                labels[e["batch_timestamp_ms"]].append(str(label))
        for time_ms, names in labels.items():  # one label per instant: "101,102,103"
            axes.annotate(",".join(names), (_time(time_ms), row), textcoords="offset points",
                          xytext=(0, 6), ha="center", fontsize=7)
    axes.set_yticks(range(len(kinds)), [k.replace("_", " ") for k in kinds])
    axes.invert_yaxis()
    axes.set_title("Lifecycle timeline (labels: node id, or metadata.version level)")
    axes.grid(axis="x", alpha=0.3)
    axes.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))  # type: ignore[no-untyped-call]
    axes.set_xlim(*span)
    figure.autofmt_xdate()
    return _png(figure)


def _checks_table(checks: Sequence[dict[str, Any]]) -> str:
    lines = ["<table><tr><th>check</th><th>subject</th><th>status</th><th>evidence</th></tr>"]
    for c in sorted(checks, key=lambda c: (c["status"] == "pass", c["check"], c["subject"] or "", c["evidence"] or "")):
        status = html.escape(c["status"])
        lines.append(
            f"<tr class='{status}'><td>{html.escape(c['check'])}</td><td>{html.escape(c['subject'] or '')}</td>"
            f"<td class='status'>{status.upper()}</td><td>{html.escape(c['evidence'] or '')}</td></tr>"
        )
    lines.append("</table>")
    return "\n".join(lines)


_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
table { border-collapse: collapse; width: 100%; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }
tr.fail td.status { background: #f8d0d0; color: #900; font-weight: bold; }
tr.pass td.status { background: #d6f0d6; color: #060; }
.summary { font-size: 1.1em; } img { max-width: 100%; }
"""


def _order(row: dict[str, Any]) -> tuple[tuple[bool, str], ...]:
    """A total order over rows of one table (None first, then values by their text)."""
    return tuple((value is not None, f"{value:020d}" if isinstance(value, int) else str(value)) for value in row.values())


def render_report(tables: Tables) -> str:
    """The report as one HTML document."""
    # Rows arrive in whatever order the executors finish; sorted here, so the same tables give the
    # same page byte for byte, on one machine or a cluster.
    checks = sorted((r.asDict() for r in tables.dr_checks.collect()), key=_order)
    urp = sorted((r.asDict() for r in tables.urp_history.collect()), key=_order)
    events = sorted(
        (
            r.asDict()
            for r in tables.events.where(tables.events.event.isin(*TIMELINE_EVENTS))
            .select("cluster_id", "offset", "event", "batch_timestamp_ms", "node_id", "name", "value")
            .collect()
        ),
        key=_order,
    )
    problems = tables.problems.groupBy("cluster_id").count().collect()
    problem_counts = {r["cluster_id"]: r["count"] for r in problems}
    clusters = sorted({c["cluster_id"] for c in checks} | {e["cluster_id"] for e in events} | set(problem_counts))
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>kraftwerk pipeline report</title>",
        f"<style>{_STYLE}</style></head><body><h1>kraftwerk pipeline report</h1>",
        f"<p class='summary'>{len(clusters)} cluster(s); "
        f"{sum(c['status'] == 'fail' for c in checks)} failed DR check(s) of {len(checks)}.</p>",
    ]
    for cluster in clusters:
        own_checks = [c for c in checks if c["cluster_id"] == cluster]
        failed = sum(c["status"] == "fail" for c in own_checks)
        parts.append(f"<h2>Cluster {html.escape(cluster)}</h2>")
        parts.append(
            f"<p class='summary'>DR checks: {len(own_checks) - failed} passed, {failed} failed; "
            f"{problem_counts.get(cluster, 0)} problem row(s) in the input.</p>"
        )
        own_urp = [r for r in urp if r["cluster_id"] == cluster]
        own_events = [e for e in events if e["cluster_id"] == cluster]
        times_ms = [r["timestamp_ms"] for r in own_urp] + [e["batch_timestamp_ms"] for e in own_events]
        if own_urp:
            parts.append(f"<img alt='partition states over time' src='{_urp_plot(own_urp, _span(times_ms))}'>")
        if own_events:
            parts.append(f"<img alt='lifecycle timeline' src='{_timeline_plot(own_events, _span(times_ms))}'>")
        parts.append("<h3>Disaster-recovery checks</h3>")
        parts.append(_checks_table(own_checks))
    parts.append("</body></html>")
    return "\n".join(parts)
