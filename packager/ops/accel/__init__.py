"""Schedule templates of the accel family (docs/accel.md, "Compiler"): accel_conv2d and
accel_dense tiled over the output, their operands copied into the accelerator's buffers
(``cache_read`` into "accel.inp" / "accel.wgt", the epilogue parameters into
"accel.acc"), the accumulator computed in "accel.acc" (``cache_write``) with its
innermost (block_out, block_in) GEMM tensorized, the epilogue computed in place there,
and an outer tile axis split into ``vthreads`` virtual threads so one thread's loads
overlap another's compute. packager/accel/codegen.py turns the lowered loops into a
Program.

``fits`` tells the placement pass whether a node can run here at all: "" when some tiling
fits the buffers, else the reason it stays on the CPU."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ... import te
from ...accel.intrin import gemm_intrin
from ...errors import PackagerError
from ...target import AccelTarget
from .. import accel_ops  # noqa: F401  (registers the ops these templates schedule)
from .._window import out_len, split_pads
from ..registry import register_schedule

# Virtual threads the template offers: 2 overlaps one thread's loads with the other's
# compute; more only divide the buffers further.
VTHREADS = (1, 2)
# Padding fields of LOAD are 4 bits wide.
MAX_PAD = 15


@dataclass(frozen=True)
class Tiles:
    """One tile of the output (tob output-channel blocks x th rows x tw columns) and the
    input-channel blocks (tic) loaded per reduction step, for ``vt`` virtual threads."""

    tob: int
    th: int
    tw: int
    tic: int
    vt: int


@dataclass(frozen=True)
class ConvShape:
    """An accel_conv2d (a dense is a 1x1 conv over a 1x1 image)."""

    cb: int  # input channel blocks
    ob: int  # output channel blocks
    h: int
    w: int
    kh: int
    kw: int
    sh: int
    sw: int
    oh: int
    ow: int

    def __str__(self) -> str:
        return (
            f"{self.cb} input x {self.ob} output channel blocks, "
            f"{self.h}x{self.w} in, {self.kh}x{self.kw} kernel, stride {self.sh}x{self.sw}, "
            f"{self.oh}x{self.ow} out"
        )

    def inp_rows(self, th: int) -> int:
        return (th - 1) * self.sh + self.kh

    def inp_cols(self, tw: int) -> int:
        return (tw - 1) * self.sw + self.kw


def buffer_use(s: ConvShape, t: Tiles) -> dict[str, int]:
    """Tiles of each buffer a tiling occupies (all virtual threads)."""
    return {
        "inp": t.vt * t.tic * s.inp_rows(t.th) * s.inp_cols(t.tw),
        "wgt": t.vt * t.tob * t.tic * s.kh * s.kw,
        "acc": t.vt * t.tob * (t.th * t.tw + 6),  # accumulators, then the epilogue params
    }


def misfit(s: ConvShape, t: Tiles, target: AccelTarget) -> str:
    """Why the tiling does not fit the accelerator ("" when it does)."""
    depth = {"inp": target.inp_depth, "wgt": target.wgt_depth, "acc": target.acc_depth}
    for buf, used in buffer_use(s, t).items():
        if used > depth[buf]:
            return f"{buf} buffer: the tiling needs {used} tiles, the accelerator has {depth[buf]}"
    outer = {"ob": s.ob // t.tob, "oh": s.oh // t.th, "ow": s.ow // t.tw}
    if t.vt > 1 and not any(n % t.vt == 0 for n in outer.values()):
        return f"no outer tile axis {outer} splits into {t.vt} virtual threads"
    return ""


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _cost(s: ConvShape, t: Tiles, target: AccelTarget) -> float:
    """Estimated DMA cycles of a tiling: bytes moved plus a latency per transfer."""
    n_sp = (s.oh // t.th) * (s.ow // t.tw)
    n_ob = s.ob // t.tob
    steps = n_sp * n_ob * (s.cb // t.tic)
    inp = steps * t.tic * s.inp_rows(t.th) * s.inp_cols(t.tw) * target.inp_tile_bytes
    wgt = steps * t.tob * t.tic * s.kh * s.kw * target.wgt_tile_bytes
    loads = steps * (t.tic + t.tob)
    return (inp + wgt) / target.dma_bytes_per_cycle + loads * target.dma_latency_cycles


def best_tiles(s: ConvShape, target: AccelTarget, vt: int) -> Tiles | None:
    """The fitting tiling with the least estimated DMA time (None: nothing fits)."""
    best, best_cost = None, None
    for tob, th, tw, tic in itertools.product(
        _divisors(s.ob), _divisors(s.oh), _divisors(s.ow), _divisors(s.cb)
    ):
        t = Tiles(tob, th, tw, tic, vt)
        if misfit(s, t, target):
            continue
        cost = _cost(s, t, target)
        if best_cost is None or cost < best_cost:
            best, best_cost = t, cost
    return best


def conv_shape(op: str, attrs: dict, in_shapes: list) -> ConvShape:
    x, w = in_shapes[0], in_shapes[1]
    if op == "accel_dense":
        return ConvShape(w[1], w[0], 1, 1, 1, 1, 1, 1, 1, 1)
    strides = list(attrs.get("strides") or [1, 1])
    before, after = split_pads(attrs.get("pads"), 2)
    oh, ow = (out_len(x[2 + i], w[2 + i], strides[i], 1, before[i], after[i]) for i in range(2))
    return ConvShape(w[1], w[0], x[2], x[3], w[2], w[3], strides[0], strides[1], oh, ow)


def _unsupported(op: str, attrs: dict, in_shapes: list, target: AccelTarget) -> str:
    if op not in ("accel_conv2d", "accel_dense"):
        return f"{op} has no accelerator schedule"
    if target.batch != 1:
        return f"the accelerator's batch is {target.batch}; only batch 1 cores are supported"
    if in_shapes[0][0] != 1:
        return f"batch {in_shapes[0][0]}: the accelerator runs batch 1"
    w = in_shapes[1]
    if (w[-2], w[-1]) != (target.block_out, target.block_in):
        return f"weights blocked {w[-2]}x{w[-1]}, the core is {target.block_out}x{target.block_in}"
    if op == "accel_conv2d":
        if any(d != 1 for d in attrs.get("dilations") or [1, 1]):
            return f"dilations {list(attrs['dilations'])}: the accelerator runs dilation 1"
        if any(p > MAX_PAD for p in attrs.get("pads") or []):
            return f"pads {list(attrs['pads'])}: LOAD pads at most {MAX_PAD}"
    return ""


def fits(op: str, attrs: dict, in_shapes: list, target: AccelTarget) -> str:
    """ "" when the accelerator can run the node (supported, and some tiling fits its
    buffers), else the reason."""
    why = _unsupported(op, attrs, in_shapes, target)
    if why:
        return why
    s = conv_shape(op, attrs, in_shapes)
    if best_tiles(s, target, 1) is None:
        smallest = Tiles(1, 1, 1, 1, 1)
        return f"no tiling fits the buffers; the smallest: {misfit(s, smallest, target)}"
    return ""


def choose_tiles(cfg, s: ConvShape, target: AccelTarget, spatial: bool = True) -> Tiles:
    """The tiling from the knobs (tile_oc, tile_oh, tile_ow (conv only), tile_ic,
    vthreads; defaults: the best fitting tiling, two virtual threads where they fit); a
    chosen tiling that does not fit is refused."""
    vt_def = 2 if best_tiles(s, target, 2) is not None else 1
    vt = cfg.define("vthreads", VTHREADS, vt_def)
    d = best_tiles(s, target, vt)
    if d is None and vt > 1:
        raise PackagerError(
            f"no tiling of the conv ({s}) fits the buffers with {vt} virtual threads"
        )
    d = d or Tiles(1, 1, 1, 1, vt)
    tob = cfg.define_split("tile_oc", s.ob, d.tob)
    th = cfg.define_split("tile_oh", s.oh, d.th) if spatial else 1
    tw = cfg.define_split("tile_ow", s.ow, d.tw) if spatial else 1
    t = Tiles(tob, th, tw, cfg.define_split("tile_ic", s.cb, d.tic), vt)
    why = misfit(s, t, target)
    if why:
        raise PackagerError(
            f"accelerator tiling tile_oc={t.tob} tile_oh={t.th} tile_ow={t.tw} "
            f"tile_ic={t.tic} vthreads={t.vt} does not fit: {why}"
        )
    return t


def _find(t: te.Tensor, tag: str) -> te.Tensor:
    for x in t.op.input_tensors:
        if isinstance(x.op, te.ComputeOp) and x.op.tag == tag:
            return x
    raise PackagerError(f"{t.name}: no {tag} stage under the accelerator's epilogue")


def _schedule(ctx, s: ConvShape, data_axes: int):
    """The common schedule: ``data_axes`` spatial axes (2 for conv, 0 for dense)."""
    target = ctx.target
    if not isinstance(target, AccelTarget):
        raise PackagerError(f"{ctx.anchor.name}: the accel schedule needs an accel target")
    y = ctx.anchor
    if len(ctx.outs) != 1 or ctx.outs[0] is not y:
        raise PackagerError(f"{y.name}: the accelerator runs its op alone, without fused ops")
    t = choose_tiles(ctx.cfg, s, target, spatial=data_axes > 0)
    acc = _find(y, "accel_gemm")
    sch = te.create_schedule(ctx.outs)
    xp, w = acc.op.input_tensors[:2]
    p = next(x for x in y.op.input_tensors if x is not acc)
    if isinstance(xp.op, te.ComputeOp):  # the padding: the LOAD's pad fields
        sch[xp].compute_inline()
    y_c = sch.cache_write(y, "accel.acc")
    acc_c = sch.cache_write(acc, "accel.acc")
    sch[acc].compute_inline()
    inp = sch.cache_read(xp, "accel.inp", [acc_c])
    wgt = sch.cache_read(w, "accel.wgt", [acc_c])
    prm = sch.cache_read(p, "accel.acc", [y_c])

    ys = sch[y]
    n, ob, *sp, oi = ys.leaf_iter_vars
    factors = [t.tob, t.th, t.tw][: 1 + data_axes]
    pairs = [ys.split(a, f) for a, f in zip([ob, *sp], factors, strict=True)]
    outer, inner = [o for o, _ in pairs], [i for _, i in pairs]
    vaxis = max(
        (k for k, o in enumerate(outer) if o.extent % t.vt == 0),
        key=lambda k: outer[k].extent,
        default=None,
    )
    if vaxis is None:
        raise PackagerError(f"{y.name}: no outer tile axis splits into {t.vt} virtual threads")
    outer[vaxis], vthread = ys.split(outer[vaxis], t.vt)
    ys.reorder(n, *outer, vthread, *inner, oi)
    if t.vt > 1:
        ys.virtual_thread(vthread)
    for st in (prm, acc_c, y_c):
        sch[st].compute_at(ys, vthread)

    cs = sch[acc_c]
    cn, cob, *csp, coi = cs.op.axis
    rcb, *rk, rci = cs.op.reduce_axis
    rcb_o, rcb_i = cs.split(rcb, t.tic)
    cs.reorder(cn, rcb_o, rcb_i, *rk, cob, *csp, coi, rci)
    cs.tensorize(coi, gemm_intrin(target.block_in, target.block_out))
    for st in (inp, wgt):
        sch[st].compute_at(cs, rcb_o)
    return sch


@register_schedule("accel_conv2d", "accel")
def schedule_accel_conv2d(ctx):
    return _schedule(ctx, _anchor_shape(ctx, "accel_conv2d"), 2)


@register_schedule("accel_dense", "accel")
def schedule_accel_dense(ctx):
    return _schedule(ctx, _anchor_shape(ctx, "accel_dense"), 0)


def _anchor_shape(ctx, op: str) -> ConvShape:
    acc = _find(ctx.anchor, "accel_gemm")
    xp, w = acc.op.input_tensors[:2]
    x = xp.op.input_tensors[0] if isinstance(xp.op, te.ComputeOp) else xp
    return conv_shape(op, ctx.attrs, [x.shape, w.shape])
