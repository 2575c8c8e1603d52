"""The one printer from the loop IR to C-like source; a language is a table of data.

``render(func, lang)`` walks a PrimFunc's statements (a ``StmtVisitor``) and prints its
expressions; everything that differs between C-like languages is a field of ``lang`` (a
``Lang``), or, where a language needs a construct the others lack (C's parallel loops
through the runtime's thread pool), one of its few methods. The fields:

* ``name``: the language, in error messages ("C").
* ``prelude``: the text the unit starts with (includes, pragmas).
* ``hint_pragmas``: a schedule's compiler hint (``PrimFunc.hints``) -> the text put
  after the prelude of a unit with a kernel that asks for it; hints not named are
  dropped (a language without such a switch).
* ``types``: dtype -> scalar type name (``"float32": "float"``); the loop index type is
  ``types["int64"]``.
* ``reserved``: words a variable must not be named (keywords, names the kernel uses).
* ``kernel_qualifier``: written before the kernel's signature (``__kernel``).
* ``arg_qualifier``: written before a pointer argument's type (``__global``), by a
  ``kernel_head`` whose kernel takes typed pointers (C's takes ``void* const* args``).
* ``restrict``: the no-alias pointer qualifier (``restrict``).
* ``helper_qualifier``: how small helper functions are declared (``static inline``).
* ``scope_prefix``: buffer scope -> declaration prefix of an ``Allocate`` of that scope
  (``"shared": "__local "``); scopes not named get none.
* ``literal_suffix``: float dtype -> literal suffix (``"float32": "f"``); ``nan``,
  ``infinity``: their spellings; ``int64_literal``, ``uint64_literal``, ``int64_min``:
  how an integer that does not fit 32 bits is written (``{v}`` is its value).
* ``math_suffix``: float dtype -> suffix of the math functions (``expf`` vs ``exp``).
* ``unroll_pragma`` (``{n}``: the count), ``ivdep_pragma``: loop pragmas, None for none.
* ``vector_lanes``, ``max_vector_bytes``: the vector shapes a vectorized loop may use.
* ``vector_type``: the name of a vector of ``{lanes}`` elements of ``{scalar}`` (dtype
  ``{short}``, e.g. ``f32``): ``pk_{short}x{lanes}`` or a built-in ``{scalar}{lanes}``;
  ``vector_decl``: the declaration that introduces it (``{name}``, ``{scalar}``,
  ``{bytes}``), None for a built-in type.
* ``vector_load``: the statement that fills vector ``{dst}`` (of type ``{type}``) from
  ``{buf}[{index}]`` and on (``{lanes}`` elements, maybe unaligned); ``vector_store``: the
  one that writes vector ``{src}`` (of type ``{type}``) there.
* ``aligned_vector_load`` / ``aligned_vector_store``: the same for a buffer the language
  declared aligned (``Renderer.aligned``, e.g. a private array) at an index that is a
  multiple of the lanes (a whole-vector access the compiler can keep in registers); None:
  ``vector_load`` / ``vector_store`` everywhere.
* ``speculate_guarded_loads``: ``cond ? buf[i] : constant`` (a padding guard) loads
  ``buf[cond ? i : 0]`` unconditionally, then selects: no branch per padded load (GPUs
  and PoCL's work-item loops run straight-line code faster).
* ``vector_broadcast``: a vector of type ``{type}`` with ``{x}`` in every lane (``{elems}``
  is ``x, x, ...``); ``bitcast``: ``{x}`` reinterpreted as type ``{type}`` (the
  compare-mask blends of selects and min/max).
* ``vector_literal``: a vector of type ``{type}`` from its lanes ``{elems}`` (a strided
  load, one element a lane, in 16-byte pieces), None where strided loads keep a loop
  scalar; ``vector_concat``: vectors ``{a}`` and ``{b}`` of one type side by side
  (``{idx}``: the lane numbers 0, 1, ... of the result).
* ``vector_convert``: ``{x}`` converted lane by lane to vector type ``{type}`` as a scalar
  cast would (float to integer truncates, narrowing integers wrap), None where casts keep
  a loop scalar; ``vector_lane_calls``: a float math function of ``VECTOR_CALLS`` on a
  vector is a loop over its lanes (a compiler's vectorizer makes one instruction of it).
* ``thread_index``: thread tag (``blockIdx.x``) -> the expression that reads it; a
  ``thread_binding`` loop whose tag is missing is refused.
* ``barrier``: the workgroup barrier statement, None where the language has none (a
  ``Barrier`` is then refused, naming the kernel).
* ``prefetch``: the statement that fetches the cache line of ``{buf}[{index}]`` ahead into
  the core's outer cache (``{size}``: the element's bytes), computing its address without
  C's pointer rules (a prefetch may point past the buffer: the next tile after the last);
  None: prefetches print nothing.
* ``kernel_return``: the kernel's last statement (None for none); ``kernel_fail``: the
  statement that ends it when a heap allocation fails.

Methods a language may override: ``kernel_head`` (the signature and argument set-up),
``parallel`` (a ``parallel`` loop; refused by default), ``allocate`` (an ``Allocate``).

What every C-like language shares (the semantics the IR asks for):

* index arithmetic is 64-bit; floordiv/floormod use helpers that round towards minus
  infinity; ``/`` on ints truncates;
* Max/Min follow ONNX and propagate NaN: ``pk_max_f32(a, b)`` returns a NaN operand if
  there is one (fmaxf would drop it);
* bool is stored as uint8; a cast to bool is ``x != 0``; float-to-int casts truncate;
* narrow integer arithmetic (8/16 bit) is cast back to its type after each op so it
  wraps like numpy; 32/64-bit signed overflow is C's undefined behaviour;
* vectorized loops whose body is a plain store of contiguous/invariant loads, + - * /
  and selects whose condition is the same for every lane (padding guards: an if/else,
  so only the taken branch loads) become vector code; a select comparing float data
  lane by lane and min/max become a compare mask and a ``bitcast`` blend; where the
  language has them, loads of a constant stride (``vector_literal``), casts between
  float32 and 8-32 bit integers (``vector_convert``; a float narrowing to 8 or 16 bits
  goes through int32 and int16, the steps vector ISAs have; no step through a vector
  under 8 bytes, which GCC emulates in general registers) and rounding, sqrt and
  fabs (``vector_lane_calls``) too, and loads at any other index and selects of them
  lane by lane under vector arithmetic (a value that is only such a select, a copy,
  stays scalar): the quantize and dequantize glue of integer models. Other bodies
  fall back to a scalar loop (with ``ivdep_pragma`` only when no stored buffer is
  read at another index);
* kernel arguments are ``restrict`` except those in ``PrimFunc.may_alias`` (an output
  written in place over an input, see graph/memory.py);
* subexpressions shared within one store (after inlining) become ``const`` locals,
  unless they are only evaluated under a select/&&/|| (guarded loads stay guarded).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from packager.errors import PackagerError
from packager.te.expr import (
    INDEX,
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    Select,
    Unary,
    Var,
    children,
    substitute,
)
from packager.te.ir import (
    Allocate,
    Barrier,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    Prefetch,
    PrimFunc,
    Seq,
    Stmt,
    Store,
)
from packager.te.simplify import Simplifier
from packager.te.tensorize import Intrinsic
from packager.te.visitor import StmtVisitor, walk_exprs, walk_stmts

SHORT = {
    "float32": "f32",
    "float64": "f64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "bool": "u8",
}
SIZE = {
    "float32": 4,
    "float64": 8,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "bool": 1,
}
FLOATS = ("float32", "float64")
_NARROW = ("int8", "int16", "uint8", "uint16")
_ARITH = {"+": "+", "-": "-", "*": "*", "/": "/", "truncdiv": "/", "truncmod": "%", ">>": ">>"}
_COMPARE = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "==", "!=": "!="}
_MATH = {
    "exp",
    "log",
    "sqrt",
    "tanh",
    "erf",
    "floor",
    "ceil",
    "fabs",
    "pow",
    "fmod",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "atan2",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
    "exp2",
    "log2",
    "log10",
    "log1p",
    "expm1",
    "trunc",
    "cbrt",
    "nearbyint",
}
_RENAME = {"round": "nearbyint", "abs": "fabs"}  # round: half to even (default mode)
# a vector's compare mask: the signed integer of its lanes' width
_MASK_INT = {"float32": "int32", "float64": "int64"}
_MASK_INT.update({f"{s}int{b}": f"int{b}" for s in ("", "u") for b in (8, 16, 32, 64)})
# Integer min/max/select lanes of 32 and 64 bits are blended only in a vector narrower
# than this: wider loops GCC vectorizes on its own with the ISA's max/min (one
# instruction, the blend is three), narrower ones it leaves scalar (an 8-lane uint8 max
# pool: 11x slower). Byte and 16-bit lanes are blended at every width: GCC left a 16-lane
# uint8 max pool of 5-column tiles scalar (SqueezeNet's first pool, 0.84 -> 0.025 ms; the
# blend compiles to vpcmpnleub and a masked move with AVX-512BW). Where GCC did vectorize
# with vpmaxub the blend costs a little: ResNet-18-style's pool 0.025 -> 0.033 ms.
_INT_BLEND_BYTES = 16


def _blends(dtype: str, lanes: int) -> bool:
    """Whether a select or min/max on ``dtype`` lanes becomes a compare mask and a blend."""
    if dtype in FLOATS:
        return dtype in _MASK_INT
    return dtype in _MASK_INT and (SIZE[dtype] <= 2 or lanes * SIZE[dtype] < _INT_BLEND_BYTES)


_VEC_OPS = ("+", "-", "*", "/")
# Round half to even of a float32 vector up to this many bytes is a loop over its lanes
# (one vroundps / frintx); of a wider one, arithmetic on its bits (_Printer._vector_rint).
# GCC compiles the 16-lane loop at AVX-512 as two 256-bit vrndscaleps halves stored to
# the stack and loaded back as one 512-bit vector, a store-forwarding stall each time:
# a DenseNet-121 int8 bundle's float glue (a batch normalization between a dequantize and
# two quantizes, 56x56x256) ran 2.12 ms, and 0.69 ms with the arithmetic
# (bench/ab_kernels.py, Xeon with AVX-512).
RINT_LANE_LOOP_BYTES = 32
# float32 functions a vector takes lane by lane (GCC makes one vroundps / frintx of it)
VECTOR_CALLS = ("nearbyint", "round", "floor", "ceil", "trunc", "sqrt", "fabs", "abs")
# lane types a vector cast converts between (no 64-bit lanes, no bool)
_CAST_TYPES = ("float32", "int32", "uint32", "int16", "uint16", "int8", "uint8")

# exp of a float32 vector (see _Printer._vector_exp): x = n ln2 + r, |r| <= ln2/2, with n
# rounded by the 1.5 * 2^23 trick (its low bits then hold n), r reduced in two parts of
# ln2 (hi exact in 9 bits), exp(r) a degree-6 polynomial fitted for this printer
# (weighted least squares, relative error), scaled by adding n to the exponent bits.
# Max relative error against float64 exp over [-87.3, 88.3]: 1.1e-7 (tests/test_softmax_exp.py
# checks the compiled kernel over the range). Below -87.34 the result is 0 (float32
# denormals flushed), above 88.376 +inf (exp overflows float32 at 88.72); NaN stays NaN.
EXP_F32 = {
    "lo": -87.33654,
    "hi": 88.37626,
    "log2e": 1.4426950408889634,
    "magic": 12582912.0,
    "ln2_hi": 0.693359375,
    "ln2_lo": -2.12194440e-4,
    "poly": (
        1.0,
        1.0,
        0.4999999403953552,
        0.16666431725025177,
        0.04166798293590546,
        0.008374141529202461,
        0.0013844759669154882,
    ),
}


@dataclass(frozen=True)
class Lang:
    """One C-like language: the fields are described in the module docstring."""

    name: str = ""
    prelude: str = ""
    hint_pragmas: dict = field(default_factory=dict)
    types: dict = field(default_factory=dict)
    reserved: frozenset = frozenset()
    kernel_qualifier: str = ""
    arg_qualifier: str = ""
    restrict: str = ""
    helper_qualifier: str = "static inline"
    scope_prefix: dict = field(default_factory=dict)
    literal_suffix: dict = field(default_factory=dict)
    nan: str = "NAN"
    infinity: str = "INFINITY"
    int64_literal: str = "{v}"
    uint64_literal: str = "{v}"
    int64_min: str = "(-{v_max} - 1)"
    math_suffix: dict = field(default_factory=dict)
    unroll_pragma: str | None = None
    ivdep_pragma: str | None = None
    vector_lanes: tuple = ()
    max_vector_bytes: int = 0
    vector_type: str = ""
    vector_decl: str | None = None
    vector_load: str = ""
    vector_store: str = ""
    aligned_vector_load: str | None = None
    aligned_vector_store: str | None = None
    speculate_guarded_loads: bool = False
    vector_broadcast: str = ""
    vector_literal: str | None = None
    vector_concat: str = ""
    vector_convert: str | None = None
    vector_lane_calls: bool = False
    bitcast: str = "(({type}){x})"
    thread_index: dict = field(default_factory=dict)
    barrier: str | None = None
    prefetch: str | None = None
    kernel_return: str | None = None
    kernel_fail: str = ""
    intrinsics: bool = False  # can call a tensorized stage's C intrinsic functions

    def math(self, func: str, dtype: str) -> str:
        """The name of math function ``func`` for float ``dtype`` (``expf``)."""
        return f"{func}{self.math_suffix[dtype]}"

    def kernel_head(self, r: Renderer, func: PrimFunc) -> str:
        """The kernel's signature line; may emit the set-up of its arguments into ``r``."""
        raise NotImplementedError(f"{self.name}: no kernel signature")

    def parallel(self, r: Renderer, s: For) -> None:
        raise PackagerError(
            f"kernel {r.kernel}: {self.name} has no parallel loops (loop {s.var.name})"
        )

    def allocate(self, r: Renderer, s: Allocate) -> None:
        buf = s.buffer
        prefix = self.scope_prefix.get(buf.scope, "")
        r.emit(f"{prefix}{r.ctype(buf.dtype)} {r.name(buf)}[{buf.size}];")
        r.visit(s.body)


def _helper_defs(lang: Lang, kind: str, dt: str) -> str:
    s, ctype, q = SHORT[dt], lang.types[dt], lang.helper_qualifier
    head = f"{q} {ctype} pk_{kind.rstrip('f')}_{s}({ctype} a, {ctype} b)"
    if kind == "floordiv":
        return (
            f"{head} {{\n    {ctype} q = a / b;\n"
            "    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n}"
        )
    if kind == "floormod":
        return (
            f"{head} {{\n    {ctype} r = a % b;\n"
            "    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}"
        )
    if kind == "floordivf":
        return f"{head} {{ return {lang.math('floor', dt)}(a / b); }}"
    if kind == "floormodf":
        return f"{head} {{ return a - {lang.math('floor', dt)}(a / b) * b; }}"
    if kind in ("max", "min"):
        cmp = ">" if kind == "max" else "<"
        nan = " || a != a" if dt in FLOATS else ""
        return f"{head} {{ return (a {cmp} b{nan}) ? a : b; }}"
    if kind == "abs":
        return f"{q} {ctype} pk_abs_{s}({ctype} a) {{ return a < 0 ? -a : a; }}"
    raise KeyError(kind)


def _sanitize(name: str) -> str:
    s = re.sub(r"\W", "_", name) or "v"
    return "v" + s if s[0].isdigit() else s


class Module:
    """What the translation unit accumulates: helpers, vector types, outlined functions."""

    def __init__(self, lang: Lang, aliased: frozenset = frozenset()):
        self.lang = lang
        self.aliased = aliased  # buffers that may share memory: never `restrict`
        self.helpers: dict[str, str] = {}
        self.vec_types: dict[str, str | None] = {}
        self.functions: list[str] = []
        self.n_par = 0
        # thread tag -> work-items launched along it (GPU languages; see thread_loop)
        self.thread_extent: dict[str, int] = {}

    def restrict(self, buf: Buffer) -> str:
        return "" if buf in self.aliased or not self.lang.restrict else f" {self.lang.restrict}"

    def helper(self, kind: str, dtype: str) -> str:
        key = f"{kind}_{dtype}"
        if key not in self.helpers:
            self.helpers[key] = _helper_defs(self.lang, kind, dtype)
        return f"pk_{kind.rstrip('f')}_{SHORT[dtype]}"

    def vec(self, dtype: str, lanes: int) -> str:
        lang = self.lang
        scalar = lang.types[dtype]
        name = lang.vector_type.format(short=SHORT[dtype], scalar=scalar, lanes=lanes)
        if name not in self.vec_types:
            # loads/stores/broadcasts are emitted inline (see Lang.vector_load): helper
            # functions taking wide vectors by value would depend on the target's vector ABI
            decl = lang.vector_decl
            self.vec_types[name] = (
                decl.format(name=name, scalar=scalar, bytes=lanes * SIZE[dtype]) if decl else None
            )
        return name

    def declarations(self) -> list[str]:
        """Helpers, then vector type declarations, each sorted by name."""
        out = [self.helpers[k] for k in sorted(self.helpers)]
        return out + [d for k in sorted(self.vec_types) if (d := self.vec_types[k]) is not None]


class Renderer(StmtVisitor):
    """Emits the statements of one function (the kernel or an outlined body)."""

    def __init__(self, mod: Module, kernel: str, names: dict, fail: str, simp: Simplifier):
        self.mod = mod
        self.lang = mod.lang
        self.kernel = kernel
        self.names = names  # Var/Buffer -> name in the source
        self.used = set(names.values())
        self.lines: list[str] = []
        self.depth = 1
        self.fail = fail  # statement that reports an allocation failure
        self.failed = False
        self.heap: list[str] = []  # live heap buffers (freed on failure)
        self.n_tmp = 0
        self.simp = simp
        self.aligned: set = set()  # buffers declared aligned to a whole vector of any width

    # --- naming ---

    def name(self, obj) -> str:
        got = self.names.get(obj)
        if got is None:
            base = _sanitize(obj.name)
            got, k = base, 1
            while got in self.used or got in self.lang.reserved or got.startswith("pk_"):
                got, k = f"{base}_{k}", k + 1
            self.used.add(got)
            self.names[obj] = got
        return got

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def ctype(self, dtype: str) -> str:
        return self.lang.types[dtype]

    # --- statements ---

    def generic_visit(self, s: Stmt) -> None:
        raise TypeError(f"kernel {self.kernel}: cannot print statement {type(s).__name__}")

    def visit_Seq(self, s: Seq) -> None:
        for x in s.stmts:
            self.visit(x)

    def visit_Store(self, s: Store) -> None:
        idx, val = self.expr_cse([s.index, s.value])
        self.emit(f"{self.name(s.buffer)}[{idx}] = {val};")

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        self.emit(f"if ({self.expr_cse([s.cond])[0]}) {{")
        self.block(s.then)
        if s.else_ is not None:
            self.emit("} else {")
            self.block(s.else_)
        self.emit("}")

    def visit_Allocate(self, s: Allocate) -> None:
        self.lang.allocate(self, s)

    def visit_Barrier(self, s: Barrier) -> None:
        if self.lang.barrier is None:
            raise PackagerError(
                f"kernel {self.kernel}: {self.lang.name} has no barrier "
                f"({s.scope} memory); barriers need a GPU language"
            )
        self.emit(self.lang.barrier)

    def visit_Intrinsic(self, s: Intrinsic) -> None:
        intrin = s.intrin
        if not self.lang.intrinsics:
            raise PackagerError(
                f"kernel {self.kernel}: {self.lang.name} cannot call the intrinsic "
                f"{intrin.name} (a tensorized schedule needs C)"
            )
        self.mod.helpers.setdefault(f"intrin_{intrin.name}", intrin.c_def)
        idx = self.expr_cse([a.index for a in [s.out, *s.ins]])
        ptrs = [f"&{self.name(a.buffer)}[{i}]" for a, i in zip([s.out, *s.ins], idx, strict=True)]
        self.emit(f"{intrin.name}({', '.join(ptrs)});")

    def visit_Prefetch(self, s: Prefetch) -> None:
        if self.lang.prefetch is None:
            return
        buf = s.target.buffer
        index = self.expr_cse([s.target.index])[0]
        size = SIZE[buf.dtype]
        self.emit(self.lang.prefetch.format(buf=self.name(buf), index=index, size=size))

    def visit_For(self, s: For) -> None:
        if s.kind == "parallel":
            self.lang.parallel(self, s)
        elif s.kind == "thread_binding":
            self.thread_loop(s)
        elif not (s.kind == "vectorized" and self.vectorized(s)):
            self.serial_loop(s)

    def block(self, s: Stmt) -> None:
        self.depth += 1
        self.visit(s)
        self.depth -= 1

    def serial_loop(self, s: For) -> None:
        v = self.name(s.var)
        lo, ext = self.expr_cse([s.min, s.extent])
        end = ext if lo == "0" else f"{lo} + {ext}"
        if s.kind == "unrolled" and self.lang.unroll_pragma:
            n = s.extent.value if isinstance(s.extent, Const) else 8
            self.emit(self.lang.unroll_pragma.format(n=n))
        if s.kind == "rolled" and self.lang.unroll_pragma:
            self.emit(self.lang.unroll_pragma.format(n=1))
        if s.kind == "vectorized" and self.lang.ivdep_pragma and _no_carried_dependence(s):
            self.emit(self.lang.ivdep_pragma)
        self.emit(f"for ({self.ctype(INDEX)} {v} = {lo}; {v} < {end}; ++{v}) {{")
        self.block(s.body)
        self.emit("}")

    def thread_loop(self, s: For) -> None:
        """A loop bound to a hardware thread index: one iteration per thread."""
        read = self.lang.thread_index.get(s.thread_tag)
        if read is None:
            raise PackagerError(
                f"kernel {self.kernel}: {self.lang.name} has no thread index "
                f"'{s.thread_tag}' (loop {s.var.name}); thread binding needs a GPU language"
            )
        lo = self.expr_cse([s.min])[0]
        start = read if lo == "0" else f"{lo} + {read}"
        self.emit("{")
        self.depth += 1
        self.emit(f"const {self.ctype(INDEX)} {self.name(s.var)} = {start};")
        launched = self.mod.thread_extent.get(s.thread_tag)
        ext = s.extent.value if isinstance(s.extent, Const) else None
        if launched is not None and ext is not None and ext < launched:
            # the launch covers a longer loop bound to the same axis: idle the extra items
            self.emit(f"if ({read} < {ext}) {{")
            self.block(s.body)
            self.emit("}")
        else:
            self.visit(s.body)
        self.depth -= 1
        self.emit("}")

    def vectorized(self, s: For) -> bool:
        plan = _vector_plan(s, self.simp, self.lang)
        if plan is None:
            return False
        lanes, stores = plan
        v = self.name(s.var)
        self.emit(f"{{ /* {v}: {lanes} lanes */")
        self.depth += 1
        for st, base in stores:
            idx, val = self.expr_cse([base, st.value], vec=(s.var, lanes), vec_root=True)
            fill = dict(buf=self.name(st.buffer), index=idx, lanes=lanes)
            vt = self.mod.vec(st.buffer.dtype, lanes)
            store = self.lang.vector_store
            if self.whole_vector(st.buffer, base, lanes):
                store = self.lang.aligned_vector_store
            self.emit(store.format(src=val, type=vt, **fill))
        self.depth -= 1
        self.emit("}")
        return True

    def whole_vector(self, buf, index: Expr, lanes: int) -> bool:
        """Whether a vector access of ``lanes`` at ``index`` of ``buf`` may use the
        language's aligned form: ``buf`` is aligned and the index a multiple of lanes."""
        if buf not in self.aligned or self.lang.aligned_vector_load is None:
            return False
        lin = self.simp.linear(self.simp(index))
        return lin.const % lanes == 0 and all(c % lanes == 0 for _, c in lin.terms.values())

    # --- expressions ---

    def expr_cse(self, roots: list[Expr], vec=None, vec_root=False) -> list[str]:
        """Render ``roots``; shared unconditional subterms become const locals. In
        vector mode the last root is the stored value, materialized as a vector."""
        shared = _shared_nodes(roots)
        names: dict[int, str] = {}
        printer = _Printer(self, names, vec)
        for n in shared:
            # A lane-varying index is only ever a load's address, which is rendered
            # from its lane-0 base (or lane by lane, gathered); as a temp it would name
            # the (undeclared) lane var, as would any part of a gathered load's index.
            if vec is not None and printer.is_vec(n):
                if n.dtype == INDEX or _mentions(n, vec[0], in_loads=False):
                    continue
            names[id(n)] = self.temp(printer.type_of(n), printer(n))
        out = [printer(r) for r in roots]
        if vec_root:
            out[-1] = printer.as_vector_temp(roots[-1])
        return out

    def temp(self, ctype: str, text: str | None) -> str:
        t = f"pk_t{self.n_tmp}"
        self.n_tmp += 1
        self.emit(f"const {ctype} {t} = {text};" if text is not None else f"{ctype} {t};")
        return t


class _Printer:
    """Expression text; in vector mode (vec=(var, lanes)) lane-varying nodes are
    vectors and invariant ones scalars, broadcast where they meet."""

    def __init__(self, r: Renderer, names: dict, vec):
        self.r = r
        self.lang = r.lang
        self.names = names
        self.vec = vec
        self.memo: dict[int, str] = {}
        self.varying: dict[int, bool] = {}

    def is_vec(self, e: Expr) -> bool:
        if self.vec is None:
            return False
        got = self.varying.get(id(e))
        if got is None:
            if isinstance(e, Var):
                got = e is self.vec[0]
            elif isinstance(e, BufferLoad):
                got = _mentions(e.index, self.vec[0])
            else:
                got = any(self.is_vec(k) for k in children(e))
            self.varying[id(e)] = got
        return got

    def type_of(self, e: Expr) -> str:
        if self.is_vec(e):
            return self.r.mod.vec(e.dtype, self.vec[1])
        return self.r.ctype(e.dtype)

    def __call__(self, e: Expr) -> str:
        if id(e) in self.names:
            return self.names[id(e)]
        got = self.memo.get(id(e))
        if got is None:
            render = getattr(self, "_" + type(e).__name__, None)
            if render is None:
                raise TypeError(f"cannot render {type(e).__name__}")
            got = self.memo[id(e)] = render(e)
        return got

    def operand(self, e: Expr, as_vec: bool) -> str:
        text = self(e)
        if as_vec and not self.is_vec(e):
            return self.broadcast(e, text)
        return text

    def broadcast(self, e: Expr, text: str) -> str:
        if not isinstance(e, (Const, Var)) and id(e) not in self.names:
            text = self.r.temp(self.r.ctype(e.dtype), text)  # evaluate once
        lanes = self.vec[1]
        vt = self.r.mod.vec(e.dtype, lanes)
        fill = self.lang.vector_broadcast.format(type=vt, x=text, elems=", ".join([text] * lanes))
        return self.r.temp(vt, fill)

    def as_vector_temp(self, e: Expr) -> str:
        """A named vector holding ``e`` (for a vector store)."""
        text = self(e)
        if not self.is_vec(e):
            return self.broadcast(e, text)
        if id(e) in self.names or _is_temp(text):
            return text
        return self.r.temp(self.type_of(e), text)

    # --- one method per expression class ---

    def _Const(self, e: Const) -> str:
        return _literal(e, self.lang)

    def _Var(self, e: Var) -> str:
        return self.r.name(e)

    def _BufferLoad(self, e: BufferLoad) -> str:
        buf = self.r.name(e.buffer)
        if not self.is_vec(e):
            return f"{buf}[{self(e.index)}]"
        start = self.r.simp(substitute(e.index, {self.vec[0]: Const(0, INDEX)}))
        base = self(start)
        step = _stride(e.index, self.vec[0], self.r.simp)
        if step is None:
            return self._gather(e)
        if step != 1:
            return self._strided_load(e, buf, base, step)
        t = self.r.temp(self.type_of(e), None)
        fill = dict(dst=t, type=self.type_of(e), buf=buf, index=base, lanes=self.vec[1])
        load = self.lang.vector_load
        if self.r.whole_vector(e.buffer, start, self.vec[1]):
            load = self.lang.aligned_vector_load
        self.r.emit(load.format(**fill))
        return t

    def _strided_load(self, e: BufferLoad, buf: str, base: str, step: int) -> str:
        """A vector of elements ``step`` apart, one a lane."""
        if not _is_temp(base) and not base.isdigit():
            base = self.r.temp(self.r.ctype(INDEX), base)
        elems = [f"{buf}[{base}]"] + [
            f"{buf}[{base} + {_literal(Const(k * step, INDEX), self.lang)}]"
            for k in range(1, self.vec[1])
        ]
        return self._lanes_literal(e.dtype, elems)

    def _gather(self, e: Expr) -> str:
        """A vector whose lanes are computed one at a time as scalars (``_gatherable``:
        a load at an index that is not a constant stride, a select of such): the rest
        of the expression stays vector code."""
        var, lanes = self.vec
        elems = []
        for k in range(lanes):
            lane = self.r.simp(substitute(e, {var: Const(k, INDEX)}))
            elems.append(self.r.temp(self.r.ctype(e.dtype), self(lane)))
        return self._lanes_literal(e.dtype, elems)

    def _lanes_literal(self, dt: str, elems: list[str]) -> str:
        """A vector of the scalars ``elems``, one a lane: 16-byte literals joined in pairs
        (a wider literal of 32-bit integers GCC assembles in general registers and
        reloads through the stack; 16-byte ones are vpinsrd / vinsertps / ins)."""
        lanes = len(elems)
        n = min(lanes, max(1, 16 // SIZE[dt]))
        parts = []
        for k in range(0, lanes, n):
            vt = self.r.mod.vec(dt, n)
            text = self.lang.vector_literal.format(type=vt, elems=", ".join(elems[k : k + n]))
            parts.append(self.r.temp(vt, text))
        while len(parts) > 1:
            n *= 2
            vt = self.r.mod.vec(dt, n)
            idx = ", ".join(str(i) for i in range(n))
            parts = [
                self.r.temp(vt, self.lang.vector_concat.format(a=a, b=b, idx=idx))
                for a, b in zip(parts[::2], parts[1::2], strict=True)
            ]
        return parts[0]

    def _Unary(self, e: Unary) -> str:
        return f"(-{self(e.a)})" if e.op == "neg" else f"(!{self(e.a)})"

    def _Cast(self, e: Cast) -> str:
        if self.is_vec(e):
            return self._vector_cast(e)
        if e.dtype == "bool":
            return f"({self(e.a)} != 0)"
        return f"(({self.r.ctype(e.dtype)}){self(e.a)})"

    def _vector_cast(self, e: Cast) -> str:
        """A lane-wise cast (truncating a float, wrapping a narrowing integer, as the
        scalar casts do) in the steps vector ISAs have: see ``_convert_steps``."""
        x = self(e.a)
        for dt in _convert_steps(e.a.dtype, e.dtype):
            x = self.lang.vector_convert.format(x=x, type=self.r.mod.vec(dt, self.vec[1]))
        return x

    def _lane_call(self, e: Call) -> str:
        """A float math function of a vector, one lane at a time, in a loop the compiler
        vectorizes (GCC: vroundps, vsqrtps; no libm call is left)."""
        vt, lanes = self.type_of(e), self.vec[1]
        x = self.r.temp(vt, self.operand(e.args[0], True))
        t = self.r.temp(vt, None)
        func = self.lang.math(_RENAME.get(e.func, e.func), e.dtype)
        lane = f"pk_l{self.r.n_tmp}"
        self.r.emit(
            f"for (int {lane} = 0; {lane} < {lanes}; ++{lane}) {t}[{lane}] = {func}({x}[{lane}]);"
        )
        return t

    def _Select(self, e: Select) -> str:
        if self.is_vec(e):
            return self._vector_select(e)
        if self.lang.speculate_guarded_loads and _guarded_load(e):
            return self._speculated_load(e)
        return f"({self(e.cond)} ? {self(e.t)} : {self(e.f)})"

    def _speculated_load(self, e: Select) -> str:
        """``cond ? buf[i] : c`` as an unconditional load of ``buf[cond ? i : 0]`` (the
        first element exists: buffers are never empty) and a select: no branch around
        every padded load, so the code around it stays straight-line."""
        cond = self.r.temp(self.r.ctype("int32"), self(e.cond))
        load = e.t
        text = f"{self.r.name(load.buffer)}[{cond} ? {self(load.index)} : 0]"
        value = self.r.temp(self.r.ctype(load.dtype), text)
        return f"({cond} ? {value} : {self(e.f)})"

    def _vector_select(self, e: Select) -> str:
        """A select whose condition is the same for every lane (a padding guard, a
        concat's part): an if/else, so the taken branch's loads are the only ones made."""
        var, lanes = self.vec
        form = _select_form(e, var, lanes, self.r.simp)
        if form != "branch":
            return self._blend(e) if form == "blend" else self._gather(e)
        if _mentions(e.cond, var):  # lane 0's decides
            cond = self(self.r.simp(substitute(e.cond, {var: Const(0, INDEX)})))
        else:
            cond = self(e.cond)
        t = self.r.temp(self.type_of(e), None)
        self.r.emit(f"if ({cond}) {{")
        self._branch(t, e.t)
        self.r.emit("} else {")
        self._branch(t, e.f)
        self.r.emit("}")
        return t

    def _blend(self, e: Select) -> str:
        """A per-lane select (see ``_lane_compare``): the compare's mask picks each lane
        from one of the two computed sides."""
        c = e.cond
        vt = self.type_of(e)
        it = self.r.mod.vec(_MASK_INT[e.dtype], self.vec[1])
        m = self.r.temp(
            it, f"({self.operand(c.a, True)} {_COMPARE[c.op]} {self.operand(c.b, True)})"
        )
        t, f = self.operand(e.t, True), self.operand(e.f, True)
        return self._mask_blend(vt, it, m, t, f)

    def _mask_blend(self, vt: str, it: str, mask: str, t: str, f: str) -> str:
        """Vector (type ``vt``) taking each lane from ``t`` where the ``mask`` (a compare
        result, integer vector type ``it``) is set, else from ``f``."""
        bits = self.lang.bitcast.format
        mixed = f"({bits(type=it, x=t)} & {mask}) | ({bits(type=it, x=f)} & ~{mask})"
        return bits(type=vt, x=f"({mixed})")

    def _branch(self, t: str, e: Expr) -> None:
        memo = dict(self.memo)  # temps made in the branch are local to its block
        self.r.depth += 1
        self.r.emit(f"{t} = {self.operand(e, True)};")
        self.r.depth -= 1
        self.memo = memo

    def _Binary(self, e: Binary) -> str:
        op, dt = e.op, e.a.dtype
        v = self.is_vec(e)
        a, b = self.operand(e.a, v), self.operand(e.b, v)
        if op in _ARITH:
            text = f"({a} {_ARITH[op]} {b})"
            return f"(({self.r.ctype(dt)}){text})" if dt in _NARROW else text
        if op in _COMPARE:
            return f"({a} {_COMPARE[op]} {b})"
        if op in ("and", "or"):
            return f"({a} {'&&' if op == 'and' else '||'} {b})"
        if op in ("floordiv", "floormod"):
            kind = op + ("f" if dt in FLOATS else "")
            return f"{self.r.mod.helper(kind, dt)}({a}, {b})"
        if op in ("min", "max"):
            if v:
                return self._vector_minmax(op, dt, a, b)
            return f"{self.r.mod.helper(op, dt)}({a}, {b})"
        raise ValueError(f"unknown binary op {op}")

    def _vector_minmax(self, op: str, dt: str, a: str, b: str) -> str:
        """Lane-wise pk_max/pk_min (a float NaN operand ``a`` wins, as in the scalar helper) as
        a compare mask and a bitwise blend, inline: no helper takes vectors by value."""
        lanes = self.vec[1]
        vt = self.r.mod.vec(dt, lanes)
        it = self.r.mod.vec(_MASK_INT[dt], lanes)
        a, b = (x if _is_temp(x) else self.r.temp(vt, x) for x in (a, b))
        cmp = ">" if op == "max" else "<"
        nan = f" | ({a} != {a})" if dt in FLOATS else ""
        m = self.r.temp(it, f"({a} {cmp} {b}){nan}")
        return self._mask_blend(vt, it, m, a, b)

    def _vector_exp(self, arg: Expr) -> str:
        """exp of a float32 vector as inline arithmetic on its bits (EXP_F32): a libm call
        would take the lanes one at a time."""
        k, dt, lanes = EXP_F32, "float32", self.vec[1]
        vt, it = self.r.mod.vec(dt, lanes), self.r.mod.vec("int32", lanes)
        bits, temp = self.lang.bitcast.format, self.r.temp

        def c(v: float) -> str:
            return self.broadcast(Const(v, dt), _literal(Const(v, dt), self.lang))

        x = temp(vt, self.operand(arg, True))
        xc = self._vector_minmax(
            "min", dt, self._vector_minmax("max", dt, x, c(k["lo"])), c(k["hi"])
        )
        xc = temp(vt, xc)
        j = temp(vt, f"(({xc} * {c(k['log2e'])}) + {c(k['magic'])})")
        n = temp(vt, f"({j} - {c(k['magic'])})")
        r = temp(vt, f"(({xc} - ({n} * {c(k['ln2_hi'])})) - ({n} * {c(k['ln2_lo'])}))")
        poly = c(k["poly"][-1])
        for coef in reversed(k["poly"][:-1]):
            poly = temp(vt, f"(({poly} * {r}) + {c(coef)})")
        scaled = f"({bits(type=it, x=poly)} + ({bits(type=it, x=j)} << 23))"
        y = temp(vt, bits(type=vt, x=scaled))
        under = temp(it, f"({x} < {c(k['lo'])})")
        over = temp(it, f"({x} > {c(k['hi'])})")
        zero, inf = c(0.0), c(math.inf)
        nan = temp(it, f"({x} != {x})")
        y = temp(vt, self._mask_blend(vt, it, under, zero, y))
        y = temp(vt, self._mask_blend(vt, it, over, inf, y))
        return temp(vt, self._mask_blend(vt, it, nan, x, y))

    def _vector_rint(self, arg: Expr) -> str:
        """Round half to even of a float32 vector wider than RINT_LANE_LOOP_BYTES, as
        arithmetic on its bits: |x| + 2^23 - 2^23 rounds |x| < 2^23 to an integer in the
        default rounding mode (the sum's unit in the last place is 1), the sign is put
        back (so -0.4 gives -0.0), and |x| >= 2^23 (already whole), inf and NaN keep x:
        nearbyint's results bit for bit."""
        dt, lanes = "float32", self.vec[1]
        vt, it = self.r.mod.vec(dt, lanes), self.r.mod.vec("int32", lanes)
        bits, temp = self.lang.bitcast.format, self.r.temp
        two23 = self.broadcast(Const(8388608.0, dt), _literal(Const(8388608.0, dt), self.lang))

        def c(v: int, text: str) -> str:
            return self.broadcast(Const(v, "int32"), text)

        xb = temp(it, bits(type=it, x=self.operand(arg, True)))
        ax = temp(vt, bits(type=vt, x=f"({xb} & {c(0x7FFFFFFF, '2147483647')})"))
        r = temp(vt, f"(({ax} + {two23}) - {two23})")
        sign = f"({xb} & {c(-(2**31), '(-2147483647 - 1)')})"
        signed = temp(vt, bits(type=vt, x=f"({bits(type=it, x=r)} | {sign})"))
        small = temp(it, f"({ax} < {two23})")
        return temp(vt, self._mask_blend(vt, it, small, signed, bits(type=vt, x=xb)))

    def _Call(self, e: Call) -> str:
        if e.func == "exp" and self.is_vec(e):
            return self._vector_exp(e.args[0])
        if (
            e.func in ("nearbyint", "round")
            and self.is_vec(e)
            and e.dtype == "float32"
            and self.lang.vector_lane_calls
            and self.vec[1] * 4 > RINT_LANE_LOOP_BYTES
        ):
            return self._vector_rint(e.args[0])
        if self.is_vec(e):
            return self._lane_call(e)
        func = _RENAME.get(e.func, e.func)
        args = ", ".join(self(a) for a in e.args)
        dt = e.args[0].dtype
        if func in ("isnan", "isinf"):
            return f"({func}({args}) != 0)"
        if func == "fabs" and dt not in FLOATS:
            return f"{self.r.mod.helper('abs', dt)}({args})"
        if func not in _MATH:
            raise ValueError(f"no {self.lang.name} function for {e.func}")
        if dt not in FLOATS:
            raise ValueError(f"{e.func} of {dt}: cast to a float type first")
        return f"{self.lang.math(func, dt)}({args})"


def _literal(e: Const, lang: Lang) -> str:
    v, dt = e.value, e.dtype
    if dt in FLOATS:
        if math.isnan(v):
            return lang.nan
        if math.isinf(v):
            return lang.infinity if v > 0 else f"(-{lang.infinity})"
        text = repr(float(np.float32(v))) if dt == "float32" else repr(float(v))
        if "." not in text and "e" not in text:
            text += ".0"
        return text + lang.literal_suffix.get(dt, "")
    if dt == "bool":
        return "1" if v else "0"
    v = int(v)
    if -(2**31) < v < 2**31:
        return str(v) if v >= 0 else f"({v})"
    if dt == "uint64":
        return lang.uint64_literal.format(v=v)
    if v == -(2**63):
        return lang.int64_min.format(v_max=lang.int64_literal.format(v=2**63 - 1))
    return lang.int64_literal.format(v=v) if v > 0 else f"(-{lang.int64_literal.format(v=-v)})"


# --- analyses ---------------------------------------------------------------


class _Uses(StmtVisitor):
    """What a statement tree defines and touches, each in first-use order: loop
    variables, allocated, stored and loaded buffers, variables read."""

    def __init__(self, s: Stmt):
        self.loop_vars: dict[int, Var] = {}
        self.allocated: dict[int, Buffer] = {}
        self.stored: dict[int, Buffer] = {}
        self.visit(s)
        self.vars: dict[int, Var] = {}
        self.loaded: dict[int, Buffer] = {}
        for e in walk_exprs(s):
            if isinstance(e, Var):
                self.vars.setdefault(id(e), e)
            elif isinstance(e, BufferLoad):
                self.loaded.setdefault(id(e.buffer), e.buffer)

    def visit_For(self, s: For) -> None:
        self.loop_vars[id(s.var)] = s.var
        self.generic_visit(s)

    def visit_Allocate(self, s: Allocate) -> None:
        self.allocated[id(s.buffer)] = s.buffer
        self.generic_visit(s)

    def visit_Store(self, s: Store) -> None:
        self.stored.setdefault(id(s.buffer), s.buffer)

    def visit_Intrinsic(self, s: Intrinsic) -> None:
        self.stored.setdefault(id(s.out.buffer), s.out.buffer)


def stored_buffers(s: Stmt) -> set:
    return set(_Uses(s).stored.values())


def captures(s: For) -> tuple[list[Var], list[Buffer]]:
    """Variables and buffers a loop body uses from outside, sorted by name (ties in
    first-use order): deterministic."""
    body = _Uses(s.body)
    free = [v for k, v in body.vars.items() if k not in body.loop_vars and v is not s.var]
    bufs = {k: b for k, b in body.stored.items() if k not in body.allocated}
    for k, b in body.loaded.items():
        if k not in body.allocated:
            bufs.setdefault(k, b)
    by_name = lambda x: x.name  # noqa: E731
    return sorted(free, key=by_name), sorted(bufs.values(), key=by_name)


def read_only(s: Stmt) -> set:
    uses = _Uses(s)
    return {b for k, b in uses.loaded.items() if k not in uses.stored}


def _mentions(e: Expr, var: Var, in_loads: bool = True) -> bool:
    """Whether ``e`` uses ``var``; with ``in_loads`` False, not counting the indices of
    its loads."""
    stack, seen = [e], set()
    while stack:
        n = stack.pop()
        if n is var:
            return True
        if id(n) not in seen and (in_loads or not isinstance(n, BufferLoad)):
            seen.add(id(n))
            stack.extend(children(n))
    return False


def _shared_nodes(roots: list[Expr]) -> list[Expr]:
    """Non-leaf nodes referenced twice or more and evaluated unconditionally, in
    dependency order (children first)."""
    refs: dict[int, int] = {}
    nodes: dict[int, Expr] = {}
    order: list[Expr] = []
    stack = [(r, False) for r in reversed(roots)]
    while stack:
        n, ready = stack.pop()
        if ready:
            order.append(n)
            continue
        refs[id(n)] = refs.get(id(n), 0) + 1
        if id(n) in nodes:
            continue
        nodes[id(n)] = n
        stack.append((n, True))
        stack.extend((k, False) for k in reversed(children(n)))
    uncond = _unconditional(roots)
    return [
        n
        for n in order
        if refs[id(n)] > 1 and id(n) in uncond and children(n) and not isinstance(n, (Const, Var))
    ]


def _unconditional(roots: list[Expr]) -> set[int]:
    out: set[int] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if id(n) in out:
            continue
        out.add(id(n))
        if isinstance(n, Select):
            stack.append(n.cond)
        elif isinstance(n, Binary) and n.op in ("and", "or"):
            stack.append(n.a)
        else:
            stack.extend(children(n))
    return out


def _no_carried_dependence(s: For) -> bool:
    """True when every stored buffer is read only at an index it is stored at in
    this iteration, and each store index moves with the loop variable."""
    stores = [n for n in walk_stmts(s.body) if isinstance(n, Store)]
    if not stores or any(not _mentions(st.index, s.var) for st in stores):
        return False
    stored_at: dict[int, set[int]] = {}
    for st in stores:
        stored_at.setdefault(id(st.buffer), set()).add(id(st.index))
    return all(
        id(n.index) in stored_at[id(n.buffer)]
        for n in walk_exprs(s.body)
        if isinstance(n, BufferLoad) and id(n.buffer) in stored_at
    )


def _is_temp(text: str) -> bool:
    return text.startswith("pk_t") and text[4:].isdigit()


def _guarded_load(e: Select) -> bool:
    """A scalar load guarded by a condition, a constant otherwise (a padded input)."""
    return isinstance(e.t, BufferLoad) and isinstance(e.f, Const)


def _lane_compare(e: Select) -> bool:
    """A select each lane decides for itself by comparing data of the select's own type
    (float or integer): both sides are computed and blended by the mask, so the condition
    must not guard a load (index comparisons, the padding guards, are never of this
    kind)."""
    c = e.cond
    return (
        isinstance(c, Binary)
        and c.op in _COMPARE
        and c.a.dtype == c.b.dtype == e.dtype
        and e.dtype in _MASK_INT
    )


def _vector_plan(s: For, simp: Simplifier, lang: Lang):
    """(lanes, [(store, base index)]) when the loop can use vector types, else None."""
    if not isinstance(s.extent, Const) or not isinstance(s.min, Const) or s.min.value != 0:
        return None
    lanes = int(s.extent.value)
    body = s.body.stmts if isinstance(s.body, Seq) else [s.body]
    if lanes not in lang.vector_lanes or not all(isinstance(x, Store) for x in body):
        return None
    if not _no_carried_dependence(s):
        return None
    plan = []
    for st in body:
        if lanes * SIZE[st.buffer.dtype] > lang.max_vector_bytes or st.buffer.dtype == "bool":
            return None
        if not _stride_one(st.index, s.var, simp) or not _vector_expr(st.value, s, simp, lang):
            return None
        if _copy_of_selects(st.value, s.var, lanes, simp):
            return None
        plan.append((st, simp(substitute(st.index, {s.var: Const(0, INDEX)}))))
    return lanes, plan


def _copy_of_selects(e: Expr, var: Var, lanes: int, simp: Simplifier) -> bool:
    """A stored value that is (a cast of) a select gathered lane by lane: nothing is left
    for vector code to do, and each lane's own branches cost more than the scalar loop
    (a padded copy of an NCHW input into blocks ran 1.74x slower gathered)."""
    while isinstance(e, Cast):
        e = e.a
    return isinstance(e, Select) and _select_form(e, var, lanes, simp) == "gather"


def _select_form(e: Select, var: Var, lanes: int, simp: Simplifier) -> str:
    """How a lane-varying select becomes vector code: "branch" (its condition is the
    same for every lane: an if/else), "blend" (each lane compares data of the select's
    own type: a compare mask), else "gather" (each lane on its own, see _gatherable)."""
    if _same_for_lanes(e.cond, var, lanes, simp):
        return "branch"
    return "blend" if _lane_compare(e) and _blends(e.dtype, lanes) else "gather"


def _gatherable(e: Expr, var: Var) -> bool:
    """A select of loads and lane-invariant values (any condition): the value of each
    lane is cheap to compute on its own (a concat part read at a clamped channel)."""
    if not _mentions(e, var) or isinstance(e, BufferLoad):
        return True
    return isinstance(e, Select) and _gatherable(e.t, var) and _gatherable(e.f, var)


def _same_for_lanes(cond: Expr, var: Var, lanes: int, simp: Simplifier) -> bool:
    """Whether ``cond`` has one value for all ``lanes`` values of ``var`` (from 0) whatever
    the other variables are: it does not mention ``var``, or it compares indices and
    the lanes never straddle the bound (a channel concat at a multiple of the block:
    ``16 * b + var < 224``), or it is an and/or of such."""
    if not _mentions(cond, var):
        return True
    if not isinstance(cond, Binary):
        return False
    if cond.op in ("and", "or"):
        return all(_same_for_lanes(x, var, lanes, simp) for x in (cond.a, cond.b))
    if cond.op not in ("<", "<=", ">", ">=") or cond.a.dtype != INDEX:
        return False
    # as d < 0 over the integers: a < b, a <= b (a - b - 1 < 0), b < a, b <= a
    lo, hi = (cond.a, cond.b) if cond.op in ("<", "<=") else (cond.b, cond.a)
    d = simp.linear(Binary("-", lo, hi, INDEX))
    c = d.const - (1 if cond.op in ("<=", ">=") else 0)
    step = next((k for atom, k in d.terms.values() if atom is var), 0)
    others = [k for atom, k in d.terms.values() if atom is not var]
    if step == 0 or any(_mentions(atom, var) for atom, _ in d.terms.values() if atom is not var):
        return False
    if step < 0:  # d < 0 iff -d - 1 >= 0: the same lanes agree
        c = -c - 1
    span = abs(step) * lanes  # the lanes' d lie in [R, R + span): R a multiple of span
    return c % span == 0 and all(k % span == 0 for k in others)


def _convert_steps(src: str, dst: str) -> list[str]:
    """The lane types a vector cast from ``src`` to ``dst`` goes through, ``dst`` last:
    float and integers meet at 32 bits, and integers narrow by halves (int32 -> int16 ->
    uint8 is a pack or two, int32 -> uint8 at once lane-by-lane moves: GCC 12, AVX2 and
    aarch64). The values are those of the one scalar cast."""
    steps = []
    if src in FLOATS or dst in FLOATS:
        if SIZE[src] < 4:  # a narrow integer to float: widened first
            steps.append("int32")
        if dst in FLOATS or SIZE[dst] == 4:
            return [*steps, dst]
        steps.append("int32")  # float to a narrow integer: truncated at 32 bits
        src = "int32"
    sign = "u" if dst.startswith("u") else ""
    bits = SIZE[src] * 8 // 2
    while bits > SIZE[dst] * 8:
        steps.append(f"{sign}int{bits}")
        bits //= 2
    return [*steps, dst]


def _stride_one(index: Expr, var: Var, simp: Simplifier) -> bool:
    return _stride(index, var, simp) == 1


def _stride(index: Expr, var: Var, simp: Simplifier) -> int | None:
    """How far ``index`` moves when ``var`` does, when that is a constant."""
    nxt = substitute(index, {var: Binary("+", var, Const(1, INDEX), INDEX)})
    d = simp(Binary("-", nxt, index, INDEX))
    return int(d.value) if isinstance(d, Const) else None


def _vector_expr(e: Expr, s: For, simp: Simplifier, lang: Lang) -> bool:
    """Lane-varying nodes must be + - * / (ints: + - *), stride-1 loads, or what the
    language vectorizes besides (see the module docstring)."""
    lanes = int(s.extent.value)
    stack, seen = [e], set()
    while stack:
        n = stack.pop()
        if id(n) in seen or not _mentions(n, s.var):
            continue
        seen.add(id(n))
        if lanes * SIZE.get(n.dtype, 8) > lang.max_vector_bytes:
            return False
        if isinstance(n, BufferLoad):
            if _stride(n.index, s.var, simp) != 1 and lang.vector_literal is None:
                return False
            continue  # contiguous, strided, or gathered lane by lane (see _gather)
        if isinstance(n, Unary) and n.op == "neg":
            stack.append(n.a)
            continue
        if isinstance(n, Cast):
            if lang.vector_convert is None or n.dtype not in _CAST_TYPES:
                return False
            if n.a.dtype not in _CAST_TYPES or lanes * SIZE[n.a.dtype] > lang.max_vector_bytes:
                return False
            # a vector under 8 bytes is an emulated one (GCC: general registers); an
            # image's 4-channel quad quantized so ran 1.47x slower than the scalar loop
            steps = [n.a.dtype, *_convert_steps(n.a.dtype, n.dtype)]
            if lanes * min(SIZE[dt] for dt in steps) < 8:
                return False
            stack.append(n.a)
            continue
        if isinstance(n, Call) and n.dtype == "float32":
            if n.func == "exp":
                stack.extend(n.args)  # inline arithmetic (see _Printer._vector_exp)
                continue
            if n.func in VECTOR_CALLS and lang.vector_lane_calls:
                stack.extend(n.args)  # a loop over the lanes (see _Printer._lane_call)
                continue
            return False
        if isinstance(n, Select):
            form = _select_form(n, s.var, lanes, simp)
            if form == "branch":  # one branch for all lanes (see _vector_select)
                stack.extend((n.t, n.f))
            elif form == "blend":  # a compare mask (see _blend)
                stack.extend((n.cond.a, n.cond.b, n.t, n.f))
            elif lang.vector_literal is None or not _gatherable(n, s.var):
                return False  # else each lane picks and loads on its own (see _gather)
            continue
        if isinstance(n, Binary) and n.op in ("min", "max") and _blends(n.dtype, lanes):
            stack.extend((n.a, n.b))
            continue
        if not isinstance(n, Binary) or n.op not in _VEC_OPS:
            return False
        if n.op == "/" and n.dtype not in FLOATS:
            return False
        if n.dtype in _NARROW:
            return False
        stack.extend((n.a, n.b))
    return True


# --- the translation unit ---------------------------------------------------


def render(func: PrimFunc, lang: Lang) -> str:
    """One translation unit in ``lang`` holding the kernel ``func`` (and what it needs)."""
    return render_functions([func], lang)


def render_functions(funcs: list[PrimFunc], lang: Lang, thread_extents=None) -> str:
    """One translation unit in ``lang`` holding every kernel of ``funcs``, in order, with
    the helpers and vector types they use declared once. ``thread_extents(func)``: each
    thread tag's launch extent (GPU languages), so shorter bound loops are guarded."""
    mod = Module(lang)
    kernels = []
    for func in funcs:
        mod.aliased = frozenset(func.params[k] for k in func.may_alias)
        mod.thread_extent = thread_extents(func) if thread_extents else {}
        r = Renderer(mod, func.name, {}, lang.kernel_fail, Simplifier())
        head = lang.kernel_head(r, func)
        r.visit(func.body)
        if lang.kernel_return:
            r.emit(lang.kernel_return)
        # the functions it outlined (C's parallel loops) go before it
        kernels.append((len(mod.functions), "\n".join([head, *r.lines, "}"])))
    hints = sorted({h for func in funcs for h in func.hints} & set(lang.hint_pragmas))
    parts = [lang.prelude, *(lang.hint_pragmas[h] for h in hints), ""]
    decls = mod.declarations()
    if decls:
        parts += [*decls, ""]
    done = 0
    for end, text in kernels:
        for f in mod.functions[done:end]:
            parts += [f, ""]
        done = end
        parts += [text, ""]
    return "\n".join(parts[:-1]) + "\n"
