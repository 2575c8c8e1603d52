"""The report's charts, drawn with matplotlib (an optional dependency: ``pip install
packager[report]``) as SVG text to inline in the page.

The SVG is trimmed for inlining in HTML: no XML prolog, DOCTYPE, metadata or namespace
declarations (the page makes no reference to any other document). Tooltips: matplotlib
writes an artist's gid as the id of its group, and we add a <title> there.
"""

from __future__ import annotations

import html
import io
import re

from ..errors import PackagerError
from ..graph.plan_png import color
from .facts import Curve, PlanTensor

INSTALL_HINT = "pip install packager[report]"
MAX_BARS = 40  # the profile chart's slowest kernels (the table lists every one)


def require_matplotlib() -> None:
    """PackagerError naming the install command when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError as e:
        raise PackagerError(
            f"packager report draws its charts with matplotlib, which is not installed "
            f"({e}); install it with: {INSTALL_HINT}"
        ) from None


def _figure(width: float, height: float):
    import matplotlib
    from matplotlib.figure import Figure

    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: searchable, selectable
    matplotlib.rcParams["svg.hashsalt"] = "packager-report"  # the same ids on every run
    return Figure(figsize=(width, height), layout="constrained")


def _svg(fig, titles: dict[str, str] = ()) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    svg = re.sub(r'\s+xml:space="[^"]*"', "", svg)
    for gid, title in dict(titles).items():
        svg = svg.replace(
            f'<g id="{gid}">', f'<g id="{gid}"><title>{html.escape(title)}</title>', 1
        )
    return svg.strip()


def _hex(key: int) -> str:
    return "#" + "".join(f"{c:02x}" for c in color(key))


def profile_chart(rows: list[dict]) -> str:
    """Horizontal bars of each kernel's median ms, slowest at the top."""
    rows = rows[:MAX_BARS]
    fig = _figure(11, 1.2 + 0.34 * len(rows))
    ax = fig.add_subplot()
    labels = [f"{r['func']} ({'+'.join(r.get('ops') or [])})" for r in rows]
    ms = [float(r["median_ms"]) for r in rows]
    y = list(range(len(rows)))[::-1]
    bars = ax.barh(y, ms, color="#6f9fd8", height=0.7)
    for bar, r in zip(bars, rows, strict=True):
        bar.set_gid(f"bar-{r['func']}")
        note = f" {float(r['median_ms']):.3f} ms  {100 * float(r['share']):.1f}%"
        if r.get("gflops"):
            note += f"  {float(r['gflops']):.1f} GFLOP/s"
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, note, va="center", size=8)
    ax.set_yticks(y, labels, size=8)
    ax.set_xlabel("median ms per run (all calls of the kernel)")
    ax.set_xlim(0, max(ms, default=1) * 1.45 or 1)
    ax.spines[["top", "right"]].set_visible(False)
    titles = {f"bar-{r['func']}": _bar_title(r) for r in rows}
    return _svg(fig, titles)


def _bar_title(r: dict) -> str:
    nodes = ", ".join(r.get("nodes") or [])
    return f"{r['func']}: {float(r['median_ms']):.4f} ms, {r.get('calls', '?')} calls; {nodes}"


def plan_chart(tensors: list[PlanTensor], steps: int, arena: int) -> str:
    """Each arena tensor as a rectangle over (steps it is alive, its byte range), coloured
    by the kind of op that writes it; names on hover, and inside where they fit."""
    from matplotlib.patches import Patch, Rectangle

    kinds = list(dict.fromkeys(t.kind for t in tensors))
    fig = _figure(11, 5.5)
    ax = fig.add_subplot()
    unit, scale = ("MiB", 1 << 20) if arena >= 4 << 20 else ("KiB", 1 << 10)
    titles = {}
    for n, t in enumerate(tensors):
        key = kinds.index(t.kind)
        rect = Rectangle(
            (t.first - 0.45, t.offset / scale),
            t.last - t.first + 0.9,
            max(t.nbytes, 1) / scale,
            facecolor=_hex(key),
            edgecolor="#444444",
            linewidth=0.6,
        )
        rect.set_gid(f"tensor-{n}")
        ax.add_patch(rect)
        titles[f"tensor-{n}"] = (
            f"{t.name} ({t.kind}, {t.func}): {t.nbytes:,} bytes at offset {t.offset:,}, "
            f"steps {t.first}-{t.last}, storage {t.storage}"
        )
    _label_rects(fig, ax, tensors, scale, steps, arena)
    ax.set_xlim(-0.6, max(steps, 1) - 0.4)
    ax.set_ylim(0, max(arena, 1) / scale)
    ax.set_xlabel("step (kernel call)")
    ax.set_ylabel(f"arena offset ({unit})")
    handles = [
        Patch(facecolor=_hex(k), edgecolor="#444444", label=kind) for k, kind in enumerate(kinds)
    ]
    ax.legend(handles=handles, title="written by", loc="upper left", bbox_to_anchor=(1.01, 1))
    return _svg(fig, titles)


def _label_rects(fig, ax, tensors, scale, steps, arena) -> None:
    """A tensor's name inside its rectangle when the rectangle is big enough for it."""
    width_in, height_in = 8.5, 4.5  # roughly the axes' size in inches
    for t in tensors:
        w = (t.last - t.first + 0.9) / max(steps, 1) * width_in * 72  # points
        h = t.nbytes / max(arena, 1) * height_in * 72
        if h >= 9 and w >= 4.6 * len(t.name):
            ax.text(
                (t.first + t.last) / 2,
                (t.offset + t.nbytes / 2) / scale,
                t.name,
                ha="center",
                va="center",
                size=7,
                clip_on=True,
            )


def tuning_chart(curves: list[Curve]) -> str:
    """Best effective GFLOP/s so far against the trial number, one line per task."""
    fig = _figure(11, 6)
    ax = fig.add_subplot()
    for k, c in enumerate(curves):
        trials = range(1, len(c.best_gflops) + 1)
        (line,) = ax.plot(trials, c.best_gflops, label=c.label, linewidth=1.2, color=_tab(k))
        line.set_gid(f"curve-{k}")
        done = [(x, v) for x, v in zip(trials, c.best_gflops, strict=True) if v == v]
        if done:
            ax.annotate(
                c.label.split()[0], done[-1], size=7, xytext=(3, 0), textcoords="offset points"
            )
    ax.set_xlabel("trial")
    ax.set_ylabel("best effective GFLOP/s so far\n(task's nominal flops / measured time)")
    ax.grid(alpha=0.3)
    ax.legend(
        loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7, ncol=1 if len(curves) <= 16 else 2
    )
    titles = {f"curve-{k}": c.label for k, c in enumerate(curves)}
    return _svg(fig, titles)


def _tab(k: int) -> str:
    from matplotlib import colormaps

    return colormaps["tab20"](k % 20)
