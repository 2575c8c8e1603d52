"""The report as one self-contained HTML page: inline CSS and SVG, no scripts, no links
to anything outside the file. Every text from the bundle, profile or logs is escaped."""

from __future__ import annotations

from html import escape

from ..safe_paths import REPORT_MARKER

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1150px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 13px; }
td, th { padding: 2px 10px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fafafa; }
code { background: #f3f3f3; padding: 1px 4px; }
.note { color: #555; }
svg { max-width: 100%; height: auto; }
"""

PROFILE_HOWTO = (
    "No profile given. Measure one on the board and pass it with <code>--profile</code>: "
    "<code>run_bundle BUNDLE --repeat 20 --profile-json prof.json</code> (the bundle's "
    "build/run_bundle) or <code>packager run BUNDLE --board BOARD --repeat 20 "
    "--profile-json prof.json</code>, then <code>packager report BUNDLE -o report.html "
    "--profile prof.json</code>."
)


def table(headers: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{escape(c)}</td>' if k in numeric else f"<td>{escape(c)}</td>"
            for k, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def facts_section(facts: list[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in facts)
    return f"<h2>Board and build</h2><table>{rows}</table>"


def profile_section(profile: dict | None, chart: str) -> str:
    if profile is None:
        return f'<h2>Per-layer times</h2><p class="note">{PROFILE_HOWTO}</p>'
    total = profile.get("total", {})
    summary = (
        f"median {_num(total.get('median_ms'))} ms per run (min {_num(total.get('min_ms'))}) "
        f"on {profile.get('device', '?')}, {profile.get('threads', '?')} threads, "
        f"{profile.get('repeat', '?')} runs"
    )
    rows = [
        [
            r["func"],
            str(r.get("device", "cpu")),
            "+".join(r.get("ops") or []),
            str(r.get("calls", "")),
            f"{float(r['median_ms']):.4f}",
            f"{100 * float(r['share']):.1f}%",
            _num(r.get("gflops")),
            _num(r.get("gbps")),
        ]
        for r in profile["kernels"]
    ]
    headers = ["kernel", "device", "fused ops", "calls", "ms", "share", "GFLOP/s", "GB/s"]
    return (
        f'<h2>Per-layer times</h2><p class="note">{escape(summary)}</p>{chart}'
        f"{table(headers, rows, {3, 4, 5, 6, 7})}"
    )


def _num(v) -> str:
    return "-" if v is None else f"{float(v):.2f}"


def plan_section(chart: str, tensors: int, arena: int) -> str:
    note = (
        f"{tensors} arena tensors in {arena:,} bytes. Each rectangle spans the kernel calls "
        f"a tensor is alive (written to last read) and its bytes in the arena; hover for its "
        f"name, size and storage."
    )
    return f'<h2>Memory plan</h2><p class="note">{escape(note)}</p>{chart}'


def tuning_section(chart: str | None, logs: list[str]) -> str:
    if chart is None:
        why = (
            "No tuning records in the logs given."
            if logs
            else "No tuning logs given: pass <code>--tuning-log LOG</code> (repeatable), "
            "e.g. the log of <code>packager tune</code>."
        )
        return f'<h2>Tuning curves</h2><p class="note">{why}</p>'
    names = ", ".join(escape(p) for p in logs)
    return f'<h2>Tuning curves</h2><p class="note">From {names}.</p>{chart}'


def page(title: str, sections: list[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"{REPORT_MARKER}<title>{escape(title)}</title><style>{CSS}</style></head>"
        f"<body><h1>{escape(title)}</h1>{''.join(sections)}</body></html>\n"
    )
