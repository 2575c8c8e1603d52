"""``packager report``: one self-contained HTML page about a bundle (build facts,
per-layer times from a profile, the memory plan, tuning curves). Its charts need
matplotlib, an optional dependency (``pip install packager[report]``)."""

from __future__ import annotations

from pathlib import Path

from ..safe_paths import check_report_file, write_bytes_atomic
from . import charts, facts, page


def write_report(
    bundle: str | Path, out: str | Path, profile: str | None = None, tuning_logs=()
) -> Path:
    """Write the report of ``bundle`` to ``out`` (whole, through a temporary file)."""
    charts.require_matplotlib()
    b = facts.load_bundle(bundle)
    dest = check_report_file(out, b.path)
    prof = facts.load_profile(profile, b) if profile else None
    curves = facts.tuning_curves(list(tuning_logs))
    tensors = facts.arena_tensors(b)
    arena = int(b.graph.get("arena_bytes", 0))
    sections = [
        page.facts_section(facts.build_facts(b)),
        page.profile_section(prof, charts.profile_chart(prof["kernels"]) if prof else ""),
        page.plan_section(charts.plan_chart(tensors, len(b.kernels), arena), len(tensors), arena),
        page.tuning_section(charts.tuning_chart(curves) if curves else None, list(tuning_logs)),
    ]
    html = page.page(f"{b.model} on {b.board}", sections)
    write_bytes_atomic(dest, html.encode())
    return dest
