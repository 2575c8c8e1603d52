"""Loop IR of an accel schedule -> a Program (docs/accel.md, "Compiler").

Lowering an accel schedule (packager/ops/accel/) gives nests of four kinds inside
Allocates of the accelerator's scopes; each perfect loop nest becomes instructions:

- a copy from a kernel argument into an accel.* buffer: LOAD (2-D strided DMA: the
  row and column strides read off the index expressions, the padding off the pad
  compute's condition, pad_value its other side);
- a copy from accel.acc to an argument: STORE;
- the accumulator's zeroing and its tensorized GEMM: GEMM instructions, with reset for
  the zeroing. The innermost loop's iterations become micro-ops, the two longest other
  loops the instruction's iter_out / iter_in with their index factors, and any further
  loop is unrolled into one instruction per iteration;
- the epilogue computed in accel.acc: one ALU instruction (group) per operation of its
  expression, in place on the accumulator tiles (ADD, MULHI, ADD, SHR, ADD imm, MAX,
  MIN for the requantize), the second operand a tile of the parameters or an immediate.

Loops around these nests (the tiles, the reduction steps) are unrolled at compile time:
shapes are static. A virtual-thread loop interleaves its copies statement by statement,
each with its own buffers. Buffers get tiles of their scope in allocation order. Then
micro-ops are loaded at the start, tokens inserted (packager/accel/tokens.py), and a
FINISH ends the program."""

from __future__ import annotations

import itertools

import numpy as np

from ..errors import PackagerError
from ..target import AccelTarget
from ..te import expr as E
from ..te.ir import Allocate, BufferLoad, For, PrimFunc, Seq, Store
from ..te.tensorize import Intrinsic
from . import isa
from .program import UOPS, Program
from .tokens import insert_tokens

_SCOPE_BUF = {"accel.inp": isa.INP, "accel.wgt": isa.WGT, "accel.acc": isa.ACC}
_NP_BIN = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "floordiv": np.floor_divide,
    "floormod": np.mod,
    "min": np.minimum,
    "max": np.maximum,
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
    "==": np.equal,
    "!=": np.not_equal,
    "and": np.logical_and,
    "or": np.logical_or,
}
# field widths of the GEMM / ALU loop factors (isa.GEMM_FIELDS)
_FACTOR_LIMIT = {"dst": 1 << 11, "src": 1 << 11, "wgt": 1 << 10}
_ITER_LIMIT = 1 << 14


class AccelCodegenError(PackagerError):
    pass


def _eval(e, env: dict):
    """An index or condition expression over int / numpy values of its variables."""
    if isinstance(e, E.Const):
        return e.value
    if isinstance(e, E.Var):
        if e not in env:
            raise AccelCodegenError(f"accel codegen: {e.name} is not a loop variable here")
        return env[e]
    if isinstance(e, E.Binary):
        return _NP_BIN[e.op](_eval(e.a, env), _eval(e.b, env))
    if isinstance(e, E.Cast):
        return _eval(e.a, env)
    if isinstance(e, E.Unary) and e.op == "not":
        return np.logical_not(_eval(e.a, env))
    raise AccelCodegenError(f"accel codegen: cannot evaluate {type(e).__name__} in an index")


def _tile_grid(loops: list, env: dict):
    """The environment of a loop nest as broadcast index arrays, one axis per loop."""
    n = len(loops)
    grid = dict(env)
    for k, (var, ext) in enumerate(loops):
        shape = [1] * n
        shape[k] = ext
        grid[var] = np.arange(ext).reshape(shape)
    return grid


def _full(a, shape) -> np.ndarray:
    return np.broadcast_to(np.asarray(a, dtype=np.int64), shape)


def _merged_dims(dims: list, *arrays: np.ndarray) -> list:
    """``dims`` with adjacent loops fused where every array steps through them as one
    (the outer loop's stride is the inner's times its extent)."""
    affs = [_affine(a.reshape(dims)) if dims else None for a in arrays]
    if not dims or any(a is None for a in affs):
        return dims
    out = [(dims[-1], [a[1][-1] for a in affs])]
    for k in range(len(dims) - 2, -1, -1):
        ext, strides = out[0]
        mine = [a[1][k] for a in affs]
        if all(m == s * ext for m, s in zip(mine, strides, strict=True)):
            out[0] = (ext * dims[k], strides)
        else:
            out.insert(0, (dims[k], mine))
    return [e for e, _ in out]


def _in_lane_order(idx: np.ndarray, lanes: int) -> bool:
    """Whether the ``lanes`` innermost axes of ``idx`` step through consecutive
    elements, row-major (a tile's elements in its order)."""
    inner = idx.shape[idx.ndim - lanes :]
    first = idx[(Ellipsis,) + (0,) * lanes][(Ellipsis,) + (None,) * lanes]
    return np.array_equal(idx, first + np.arange(int(np.prod(inner))).reshape(inner))


def _steps_by_one(arr: np.ndarray) -> bool:
    """Whether the innermost axis of ``arr`` steps by one (or has one element)."""
    return arr.shape[-1] == 1 or bool(np.all(np.diff(arr, axis=-1) == 1))


def _affine(arr: np.ndarray) -> tuple[int, list[int]] | None:
    """(base, stride per axis) when ``arr`` is affine in its axis indices, else None."""
    base = int(arr.flat[0]) if arr.size else 0
    strides = []
    for k in range(arr.ndim):
        idx = [0] * arr.ndim
        if arr.shape[k] > 1:
            idx[k] = 1
            strides.append(int(arr[tuple(idx)]) - base)
        else:
            strides.append(0)
    fit = base + sum(
        s * np.arange(n).reshape([-1 if j == k else 1 for j in range(arr.ndim)])
        for k, (s, n) in enumerate(zip(strides, arr.shape, strict=True))
    )
    return (base, strides) if np.array_equal(arr, fit) else None


class _Codegen:
    def __init__(self, prim: PrimFunc, target: AccelTarget, n_args: int):
        self.prim = prim
        self.target = target
        self.args = {id(b): k for k, b in enumerate(prim.params)}
        if len(prim.params) != n_args:
            raise AccelCodegenError(
                f"{prim.name}: the kernel has {len(prim.params)} arguments, the node {n_args}"
            )
        self.prog = Program(prim.name, n_args)
        self.arg_of: list[int | None] = []  # per instruction: its relocation region
        self.uop_at: dict[tuple, int] = {}  # micro-op sequence -> where it starts
        self.uop_starts: dict[tuple, list[int]] = {}  # micro-op -> where it is
        self.env: dict = {}
        self.vthread: tuple = ()
        self.base: dict = {}  # (buffer id, vthread key) -> first tile
        self.used = {isa.INP: 0, isa.WGT: 0, isa.ACC: 0}
        self.depth = {isa.INP: target.inp_depth, isa.WGT: target.wgt_depth}
        self.depth[isa.ACC] = target.acc_depth
        self.tile_elems = {
            isa.INP: target.batch * target.block_in,
            isa.WGT: target.block_out * target.block_in,
            isa.ACC: target.batch * target.block_out,
        }

    # --- buffers ---

    def _buf(self, buffer) -> int:
        if buffer.scope not in _SCOPE_BUF:
            raise AccelCodegenError(
                f"{self.prim.name}: buffer {buffer.name} of scope {buffer.scope} is not an "
                "accelerator buffer"
            )
        return _SCOPE_BUF[buffer.scope]

    def _first_tile(self, buffer) -> int:
        """The buffer's first tile in its scope (allocated on first use)."""
        key = (id(buffer), self.vthread)
        if key not in self.base:
            b = self._buf(buffer)
            tiles = -(-buffer.size // self.tile_elems[b])
            if self.used[b] + tiles > self.depth[b]:
                raise AccelCodegenError(
                    f"{self.prim.name}: {buffer.name} needs {tiles} tiles of {buffer.scope}, "
                    f"{self.depth[b] - self.used[b]} of {self.depth[b]} are left"
                )
            self.base[key] = self.used[b]
            self.used[b] += tiles
        return self.base[key]

    def _tiles(self, load: BufferLoad, grid: dict, shape) -> np.ndarray:
        """Tile indices of the accel-buffer element ``load`` over a nest (index / tile
        elements, which must land on tile starts)."""
        b = self._buf(load.buffer)
        idx = _full(_eval(load.index, grid), shape)
        n = self.tile_elems[b]
        if np.any(idx % n):
            raise AccelCodegenError(
                f"{self.prim.name}: {load.buffer.name} is not addressed in whole tiles"
            )
        return self._first_tile(load.buffer) + idx // n

    # --- statements ---

    def emit(self, s) -> None:
        if isinstance(s, Allocate):
            self.emit(s.body)
        elif isinstance(s, Seq):
            for x in s.stmts:
                self.emit(x)
        elif isinstance(s, For) and s.kind == "virtual_thread":
            self._vthreads(s)
        elif isinstance(s, For):
            loops, leaf = self._perfect(s)
            if leaf is None:
                self._unroll(s)
            else:
                self._nest(loops, leaf)
        else:
            self._nest([], s)

    def _unroll(self, s: For) -> None:
        for i in range(_eval(s.min, self.env), _eval(s.min, self.env) + _eval(s.extent, self.env)):
            self.env[s.var] = i
            self.emit(s.body)
        del self.env[s.var]

    def _vthreads(self, s: For) -> None:
        """Copies of the body, each with its own buffers, interleaved: statement by
        statement and, inside the loops the stream unrolls, iteration by iteration, so
        the load module has the next copy's loads while the compute module works."""
        outer = self.vthread
        self._interleave(s.body, s.var, _eval(s.extent, self.env), outer)
        self.vthread = outer
        del self.env[s.var]

    def _interleave(self, s, var, n: int, outer: tuple) -> None:
        if isinstance(s, Allocate):
            return self._interleave(s.body, var, n, outer)
        if isinstance(s, Seq):
            # consecutive statements of the same module run per thread together, so
            # each module sees one thread's work, then the other's
            for _, run in itertools.groupby(s.stmts, key=self._module_of_stmt):
                run = list(run)
                if len(run) == 1:
                    self._interleave(run[0], var, n, outer)
                    continue
                for t in range(n):
                    self.env[var] = t
                    self.vthread = (*outer, t)
                    for x in run:
                        self.emit(x)
            return None
        if isinstance(s, For) and s.kind != "virtual_thread" and self._perfect(s)[1] is None:
            lo = _eval(s.min, self.env)
            for i in range(lo, lo + _eval(s.extent, self.env)):
                self.env[s.var] = i
                self._interleave(s.body, var, n, outer)
            del self.env[s.var]
            return None
        for t in range(n):
            self.env[var] = t
            self.vthread = (*outer, t)
            self.emit(s)
        return None

    def _module_of_stmt(self, s) -> object:
        """ "load" / "store" for a copy nest run by that module, else a key of its own."""
        loops, leaf = self._perfect(s) if isinstance(s, For) else ([], s)
        if isinstance(leaf, Store) and leaf.buffer.scope in ("accel.inp", "accel.wgt"):
            return "load"
        if isinstance(leaf, Store) and leaf.buffer.scope == "global":
            return "store"
        return id(s)

    def _perfect(self, s):
        loops = []
        while isinstance(s, For) and s.kind != "virtual_thread":
            loops.append((s.var, _eval(s.extent, self.env)))
            s = s.body
        return (loops, s) if isinstance(s, (Store, Intrinsic)) else (loops, None)

    def _nest(self, loops: list, leaf) -> None:
        if isinstance(leaf, Intrinsic):
            return self._gemm(loops, leaf)
        if not isinstance(leaf, Store):
            raise AccelCodegenError(f"{self.prim.name}: no accelerator instruction for {leaf}")
        if leaf.buffer.scope == "global":
            return self._dma(loops, leaf, isa.STORE)
        if isinstance(leaf.value, E.Const):
            return self._reset(loops, leaf)
        value = leaf.value.t if isinstance(leaf.value, E.Select) else leaf.value
        if isinstance(value, BufferLoad) and value.buffer.scope == "global":
            return self._dma(loops, leaf, isa.LOAD)
        return self._alu(loops, leaf)

    # --- DMA ---

    def _lanes(self, loops: list, buf: int) -> int:
        """How many innermost loops run over the elements of one tile."""
        n, k = 1, len(loops)
        while n < self.tile_elems[buf] and k > 0:
            k -= 1
            n *= loops[k][1]
        if n != self.tile_elems[buf]:
            raise AccelCodegenError(
                f"{self.prim.name}: a copy's innermost loops do not cover whole tiles"
            )
        return len(loops) - k

    def _dma(self, loops: list, st: Store, opcode: int) -> None:
        if opcode == isa.LOAD:
            sram, dram = st.buffer, st.value
            sram_index = st.index
            pad_value = 0
            cond = None
            if isinstance(dram, E.Select):
                cond, pad_value, dram = dram.cond, _eval(dram.f, {}), dram.t
            dram_index = dram.index
        else:
            sram, dram, cond, pad_value = st.value.buffer, st, None, 0
            sram_index, dram_index = st.value.index, st.index
        buf = self._buf(sram)
        arg = self.args.get(id(dram.buffer))
        if arg is None:
            raise AccelCodegenError(f"{self.prim.name}: {dram.buffer.name} is not an argument")
        lanes = self._lanes(loops, buf)
        outer = loops[: len(loops) - lanes]
        grid = _tile_grid(loops, self.env)
        shape = tuple(e for _, e in loops)
        elems = self.tile_elems[buf]
        s_idx = _full(_eval(sram_index, grid), shape)
        d_idx = _full(_eval(dram_index, grid), shape)
        ok = _full(_eval(cond, grid) if cond is not None else True, shape).astype(bool)
        # pad tiles read nothing: their DRAM side is taken as in order
        valid = np.broadcast_to(
            ok[(Ellipsis,) + (0,) * lanes][(Ellipsis,) + (None,) * lanes], shape
        )
        for side in (s_idx, np.where(valid, d_idx, s_idx)):
            if not _in_lane_order(side, lanes):
                raise AccelCodegenError(
                    f"{self.prim.name}: the copy of {sram.name} reorders a tile's elements"
                )
        lane0 = (Ellipsis,) + (0,) * lanes
        s_idx, d_idx, ok = s_idx[lane0], d_idx[lane0], ok[lane0]
        if np.any(s_idx % elems):
            raise AccelCodegenError(f"{self.prim.name}: {sram.name} is not copied in whole tiles")
        s_tiles = self._first_tile(sram) + s_idx // elems
        itemsize = np.dtype(dram.buffer.dtype).itemsize
        dram_tile_elems = elems  # a DRAM tile holds the same elements, narrowed for STORE
        dims = [e for _, e in outer]
        if cond is None:  # fewer, longer transfers: each costs the DMA's latency
            dims = _merged_dims(dims, s_tiles, d_idx // elems)
            if dims and not _steps_by_one(d_idx.reshape(dims) // elems):
                dims.append(1)  # strided tiles: one per row
        n_rows = 1 if len(dims) < 2 else dims[-2]
        n_cols = 1 if not dims else dims[-1]
        s_tiles = s_tiles.reshape(-1, n_rows, n_cols)
        d_idx = d_idx.reshape(-1, n_rows, n_cols)
        ok = ok.reshape(-1, n_rows, n_cols)
        for k in range(s_tiles.shape[0]):
            self._dma_2d(
                opcode,
                buf,
                arg,
                s_tiles[k],
                d_idx[k],
                ok[k],
                pad_value,
                itemsize,
                dram_tile_elems,
                sram.name,
            )

    def _dma_2d(self, opcode, buf, arg, s_tiles, d_idx, ok, pad_value, itemsize, elems, name):
        """One LOAD / STORE of a rows x cols block of tiles, rows of valid tiles between
        pad rows and columns."""
        rows = np.flatnonzero(ok.any(axis=1))
        cols = np.flatnonzero(ok.any(axis=0))
        if rows.size == 0:
            raise AccelCodegenError(f"{self.prim.name}: a copy into {name} is all padding")
        y0, y1, x0, x1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
        n_rows, n_cols = ok.shape
        inside = np.zeros_like(ok)
        inside[y0:y1, x0:x1] = True
        if not np.array_equal(ok, inside):
            raise AccelCodegenError(f"{self.prim.name}: the padding of {name} is not a border")
        pads = (y0, n_rows - y1, x0, n_cols - x1)
        if max(pads) > 15:
            raise AccelCodegenError(f"{self.prim.name}: padding {pads} of {name} exceeds 15")
        dense = s_tiles[0, 0] + np.arange(n_rows * n_cols).reshape(n_rows, n_cols)
        if not np.array_equal(s_tiles, dense):
            raise AccelCodegenError(f"{self.prim.name}: {name} is not copied as a dense block")
        d = d_idx[y0:y1, x0:x1]
        aff = _affine(d)
        if aff is None or (d.shape[1] > 1 and aff[1][1] != elems) or aff[1][0] % elems:
            raise AccelCodegenError(
                f"{self.prim.name}: the copy of {name} is not rows of consecutive tiles"
            )
        base, (row_step, _) = aff
        self._insn(
            {
                "opcode": opcode,
                "buffer": buf,
                "sram_base": int(s_tiles[0, 0]),
                "dram_base": int(base) * itemsize,
                "y_size": int(y1 - y0),
                "x_size": int(x1 - x0),
                "x_stride": int(row_step // elems) if y1 - y0 > 1 else int(x1 - x0),
                "y_pad_0": int(pads[0]),
                "y_pad_1": int(pads[1]),
                "x_pad_0": int(pads[2]),
                "x_pad_1": int(pads[3]),
                "pad_value": int(pad_value) if buf == isa.INP else 0,
            },
            arg,
        )

    # --- GEMM and ALU ---

    def _gemm(self, loops: list, intr: Intrinsic) -> None:
        grid = _tile_grid(loops, self.env)
        shape = tuple(e for _, e in loops)
        inp, wgt = intr.ins
        idx = [self._tiles(x, grid, shape) for x in (intr.out, inp, wgt)]
        self._loop_insns({"opcode": isa.GEMM, "reset": 0}, idx, ("dst", "src", "wgt"))

    def _reset(self, loops: list, st: Store) -> None:
        if st.value.value != 0 or self._buf(st.buffer) != isa.ACC:
            raise AccelCodegenError(f"{self.prim.name}: {st.buffer.name} is set to a constant")
        lanes = self._lanes(loops, isa.ACC)
        tiles = self._lane_tiles(loops, lanes, BufferLoad(st.buffer, st.index))
        zero = np.zeros_like(tiles)
        self._loop_insns(
            {"opcode": isa.GEMM, "reset": 1}, [tiles, zero, zero], ("dst", "src", "wgt")
        )

    def _lane_tiles(self, loops: list, lanes: int, load: BufferLoad) -> np.ndarray:
        """Tile indices of ``load`` over the nest's loops outside its ``lanes`` innermost
        ones, which must run over one tile's elements in order (an ALU lane reads its
        own lane of the operand)."""
        shape = tuple(e for _, e in loops)
        idx = _full(_eval(load.index, _tile_grid(loops, self.env)), shape)
        lane0 = idx[(Ellipsis,) + (0,) * lanes]
        if not _in_lane_order(idx, lanes):
            raise AccelCodegenError(
                f"{self.prim.name}: {load.buffer.name} is not read lane by lane"
            )
        n = self.tile_elems[self._buf(load.buffer)]
        if np.any(lane0 % n):
            raise AccelCodegenError(f"{self.prim.name}: {load.buffer.name} is not in whole tiles")
        return self._first_tile(load.buffer) + lane0 // n

    def _alu(self, loops: list, st: Store) -> None:
        """The epilogue: each operation of the expression, innermost first, as ALU
        instructions in place on the accumulator tiles the expression starts from."""
        lanes = self._lanes(loops, isa.ACC)
        acc, ops = _alu_chain(st.value, self.prim.name)
        if acc.buffer.scope != "accel.acc":
            raise AccelCodegenError(f"{self.prim.name}: the epilogue reads {acc.buffer.name}")
        dst = self._lane_tiles(loops, lanes, acc)
        # the result stays where the accumulators are: the store reads it there
        key, at = (id(st.buffer), self.vthread), self._first_tile(acc.buffer)
        if self.base.setdefault(key, at) != at:
            raise AccelCodegenError(f"{self.prim.name}: {st.buffer.name} has its own tiles")
        if not np.array_equal(self._lane_tiles(loops, lanes, BufferLoad(st.buffer, st.index)), dst):
            raise AccelCodegenError(f"{self.prim.name}: the epilogue moves its tiles")
        for op, operand in ops:
            head = {"opcode": isa.ALU, "reset": 0, "alu_op": op}
            if isinstance(operand, E.Const):
                head.update(use_imm=1, imm=int(operand.value))
                src = np.zeros_like(dst)
            else:
                src = self._lane_tiles(loops, lanes, operand)
            self._loop_insns(head, [dst, src], ("dst", "src"))

    def _loop_insns(self, head: dict, idx: list, names: tuple) -> None:
        """GEMM / ALU instructions running tile indices ``idx`` (one array per micro-op
        field, one axis per loop): the innermost loop's iterations are the micro-ops, the
        two longest other loops (with factors that fit) iter_out and iter_in, and any
        other loop is unrolled."""
        shape = idx[0].shape
        if not shape:
            idx, shape = [a.reshape(1) for a in idx], (1,)
        strides = []
        for a in idx:
            aff = _affine(a)
            strides.append(aff[1] if aff else None)
        m = len(shape)
        foldable = [
            k
            for k in range(m - 1)
            if shape[k] > 1
            and shape[k] < _ITER_LIMIT
            and all(
                s is not None and 0 <= s[k] < _FACTOR_LIMIT[n]
                for s, n in zip(strides, names, strict=True)
            )
        ]
        folds = sorted(sorted(foldable, key=lambda k: -shape[k])[:2])
        fo, fi = ([None] + folds)[-2:] if folds else (None, None)
        unrolled = [k for k in range(m - 1) if k not in folds]
        for at in itertools.product(*(range(shape[k]) for k in unrolled)):
            sel = [0] * m
            for k, v in zip(unrolled, at, strict=True):
                sel[k] = v
            uops = []
            for u in range(shape[m - 1]):
                sel[m - 1] = u
                t = tuple(int(a[tuple(sel)]) for a in idx)
                uops.append(t + (0,) * (3 - len(t)))
            insn = dict(head)
            insn["uop_bgn"], insn["uop_end"] = self._uops(uops)
            insn["iter_out"] = shape[fo] if fo is not None else 1
            insn["iter_in"] = shape[fi] if fi is not None else 1
            for s, n in zip(strides, names, strict=True):
                insn[f"{n}_factor_out"] = s[fo] if fo is not None else 0
                insn[f"{n}_factor_in"] = s[fi] if fi is not None else 0
            self._insn(insn, None)

    def _uops(self, uops: list) -> tuple[int, int]:
        """The range of the program's micro-ops holding ``uops`` (deduplicated)."""
        key = tuple(uops)
        at = self.uop_at.get(key)
        if at is None:
            have = self.prog.uops
            starts = self.uop_starts.get(key[0], [])
            at = next((k for k in starts if tuple(have[k : k + len(key)]) == key), None)
        if at is None:
            at = len(self.prog.uops)
            for k, u in enumerate(uops):
                self.uop_starts.setdefault(u, []).append(at + k)
            self.prog.uops.extend(uops)
        self.uop_at[key] = at
        return at, at + len(uops)

    def _insn(self, insn: dict, arg: int | None) -> None:
        self.prog.insns.append(insn)
        self.arg_of.append(arg)

    # --- the program ---

    def run(self) -> Program:
        self.emit(self.prim.body)
        prog = self.prog
        n_uops = len(prog.uops)
        if n_uops > self.target.uop_depth:
            raise AccelCodegenError(
                f"{prog.name}: {n_uops} micro-ops, the accelerator holds {self.target.uop_depth}"
            )
        load_uops = {
            "opcode": isa.LOAD,
            "buffer": isa.UOP,
            "sram_base": 0,
            "dram_base": 0,
            "y_size": 1,
            "x_size": n_uops,
            "x_stride": n_uops,
        }
        insns = ([load_uops] if n_uops else []) + prog.insns + [{"opcode": isa.FINISH}]
        args = ([UOPS] if n_uops else []) + self.arg_of + [None]
        depths = {isa.UOP: self.target.uop_depth, **self.depth}
        # every field present and in range, as the runtime will check
        insns = [isa.decode(isa.encode(i)) for i in insns]
        prog.insns = insert_tokens(insns, prog.uops, depths)
        prog.relocs = [(k, a) for k, a in enumerate(args) if a is not None]
        return prog


def _alu_chain(e, name: str):
    """(the accumulator load the expression starts from, [(alu_op, operand)] innermost
    first) for an epilogue made of +, >>, min, max, mulhi and casts."""
    ops = []
    while True:
        if isinstance(e, E.Cast) and _mulhi(e) is None:
            e = e.a
            continue
        hi = _mulhi(e)
        if hi is not None:
            e, b = hi
            ops.append((isa.MULHI, b))
            continue
        if isinstance(e, BufferLoad):
            return e, ops[::-1]
        op = {"+": isa.ADD, ">>": isa.SHR, "min": isa.MIN, "max": isa.MAX}.get(
            getattr(e, "op", None)
        )
        if op is None or not isinstance(e, E.Binary):
            raise AccelCodegenError(f"{name}: the ALU has no operation for {type(e).__name__}")
        a, b = e.a, e.b
        if op != isa.SHR and _is_operand(a) and not _is_operand(b):
            a, b = b, a
        if not _is_operand(b):
            raise AccelCodegenError(f"{name}: an ALU operand is neither a tile nor a constant")
        ops.append((op, b))
        e = a


def _is_operand(e) -> bool:
    return isinstance(e, E.Const) or (isinstance(e, BufferLoad) and e.buffer.scope == "accel.acc")


def _mulhi(e):
    """(a, b) when ``e`` is int32((int64(a) * int64(b)) >> 32), else None."""
    if not (isinstance(e, E.Cast) and isinstance(e.a, E.Binary) and e.a.op == ">>"):
        return None
    prod, sh = e.a.a, e.a.b
    if not (isinstance(sh, E.Const) and sh.value == 32 and isinstance(prod, E.Binary)):
        return None
    if prod.op != "*" or not all(isinstance(x, E.Cast) for x in (prod.a, prod.b)):
        return None
    return prod.a.a, prod.b.a


def codegen_accel(prim: PrimFunc, target: AccelTarget, n_args: int) -> Program:
    """The Program of a lowered accel kernel (named as the PrimFunc)."""
    return _Codegen(prim, target, n_args).run()
