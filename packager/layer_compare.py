"""The accelerator's layers beside the same layers on the board's CPU (``packager bench``).

An accelerated bundle's profile gives, per accelerator kernel, the accelerator's counters
for one run (cycles, GEMM utilisation); its time is the cycles at the profile's clock
(what the board's accelerator would take: the simulator's cycle model, or the board's
cycle counter). A bundle of the same model built with ``--cpu-only`` for the same board
runs those layers on the board's CPU; its profile gives their measured time. Layers are
matched by node name (graph.json's names are the model's, kept by both builds).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LayerRow:
    func: str  # the accelerator kernel
    nodes: list[str]  # the layers (graph nodes) calling it
    macs: float  # multiply-accumulates of one run, the model's (unpadded) count
    cycles: int
    utilisation: float
    accel_ms: float  # cycles at the clock
    cpu_ms: float | None  # the same layers on the CPU (None: no CPU bundle, or unmatched)
    cpu_ops: str = ""  # what the CPU kernels of those layers fuse


def pair_bundles(manifests: list[dict]) -> list[tuple[int, int | None]]:
    """(accelerated, CPU-only or None) index pairs: each bundle with accelerator kernels
    and the first ``--cpu-only`` bundle of the same model, shapes and frozen inputs."""

    def same_model(m: dict) -> tuple:
        return (m["model"]["sha256"], repr(m.get("input_shapes")), repr(m.get("input_values")))

    cpu = [k for k, m in enumerate(manifests) if m.get("cpu_only")]
    pairs = []
    for k, m in enumerate(manifests):
        if "accel" not in m:
            continue
        match = [c for c in cpu if same_model(manifests[c]) == same_model(m)]
        pairs.append((k, match[0] if match else None))
    return pairs


def compare(accel_doc: dict, clock_mhz: float, cpu_doc: dict | None = None) -> list[LayerRow]:
    """One row per accelerator kernel of ``accel_doc`` (run_bundle's profile document),
    slowest on the accelerator first, with the CPU time of its layers from ``cpu_doc``."""
    per_call = {}  # node name -> (ms of one call of its CPU kernel, the kernel's ops)
    for k in (cpu_doc or {}).get("kernels", []):
        for name in k.get("nodes", []):
            per_call[name] = (k["median_ms"] / max(k["calls"], 1), "+".join(k["ops"]))
    rows = []
    for k in accel_doc["kernels"]:
        if k.get("device") != "accel" or "accel" not in k:
            continue
        a, nodes = k["accel"], list(k.get("nodes", []))
        found = [per_call[n] for n in nodes if n in per_call]
        cpu_ms = sum(ms for ms, _ in found) if found and len(found) == len(nodes) else None
        rows.append(
            LayerRow(
                func=k["func"],
                nodes=nodes,
                macs=(k.get("flops") or 0) / 2,
                cycles=int(a["cycles"]),
                utilisation=float(a["gemm_utilisation"]),
                accel_ms=a["cycles"] / (clock_mhz * 1e3),
                cpu_ms=cpu_ms,
                cpu_ops=" ".join(dict.fromkeys(ops for _, ops in found)),
            )
        )
    return sorted(rows, key=lambda r: -r.accel_ms)


def model_estimate(accel_doc: dict, rows: list[LayerRow]) -> float:
    """The accelerated model's time, ms: its CPU kernels as measured, its accelerator
    kernels at the clock (the simulator's wall time says nothing of the board)."""
    cpu = sum(k["median_ms"] for k in accel_doc["kernels"] if k.get("device") != "accel")
    return cpu + sum(r.accel_ms for r in rows)


def table(rows: list[LayerRow], clock_mhz: float) -> str:
    """The rows as text, with a total line."""
    head = (
        f"{'accel kernel':<22} {'layers':<28} {'MMACs':>8} {'cycles':>10} "
        f"{f'ms @{clock_mhz:g} MHz':>13} {'GEMM util':>9} {'CPU ms':>9} {'CPU/accel':>9}"
    )
    lines = [head]

    def line(func, layers, macs, cycles, util, accel_ms, cpu_ms):
        ratio = f"{cpu_ms / accel_ms:8.2f}x" if cpu_ms is not None and accel_ms > 0 else "-"
        cpu = f"{cpu_ms:9.4f}" if cpu_ms is not None else "-"
        return (
            f"{func:<22} {_cut(layers, 28):<28} {macs / 1e6:8.2f} {cycles:>10} "
            f"{accel_ms:13.4f} {100 * util:8.1f}% {cpu:>9} {ratio:>9}"
        )

    for r in rows:
        names = r.nodes[0] + (f" (+{len(r.nodes) - 1})" if len(r.nodes) > 1 else "")
        lines.append(line(r.func, names, r.macs, r.cycles, r.utilisation, r.accel_ms, r.cpu_ms))
    if rows:
        cycles = sum(r.cycles for r in rows)
        accel_ms = sum(r.accel_ms for r in rows)
        # the run's GEMM cycles over its cycles, as each row's utilisation is
        util = sum(r.utilisation * r.cycles for r in rows) / cycles if cycles else 0.0
        matched = all(r.cpu_ms is not None for r in rows)
        cpu_ms = sum(r.cpu_ms for r in rows) if matched else None
        macs = sum(r.macs for r in rows)
        lines.append(line(f"total ({len(rows)})", "", macs, cycles, util, accel_ms, cpu_ms))
    return "\n".join(lines)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
