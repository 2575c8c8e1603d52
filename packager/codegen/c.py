"""C code generation from the loop IR.

One renderer (``Renderer``) walks statements and expressions; what differs between
C-like languages (type names, kernel qualifiers, pointer qualifiers, math function
names) lives in a ``Lang`` table, so an OpenCL table can reuse it. C specifics:

* index arithmetic is int64_t; floordiv/floormod use static inline helpers that
  round towards minus infinity; ``/`` on ints truncates (C);
* Max/Min follow ONNX and propagate NaN: ``pk_max_f32(a, b)`` returns a NaN operand
  if there is one (fmaxf would drop it);
* bool is uint8_t; a cast to bool is ``x != 0``; float-to-int casts truncate (C;
  out-of-range values are undefined behaviour, as in C);
* narrow integer arithmetic (8/16 bit) is cast back to its type after each op so
  it wraps like numpy; 32/64-bit signed overflow is C's undefined behaviour;
* vectorized loops whose body is a plain store of contiguous/invariant loads,
  + - * / and selects whose condition is the same for every lane (padding guards:
  an if/else, so only the taken branch loads) become GCC/Clang vector-extension
  code (unaligned memcpy loads/stores);
  other bodies fall back to a scalar loop (with ``#pragma GCC ivdep`` only when
  no stored buffer is read at another index);
* parallel loops are outlined into ``static void NAME_parK(void* ctx, int64_t i)``
  with a context struct of the captured buffers and variables, run through
  ``pk_parallel_for``;
* kernel arguments are ``restrict`` except those in ``PrimFunc.may_alias`` (an
  output written in place over an input, see graph/memory.py);
* subexpressions shared within one store (after inlining) become ``const`` locals,
  unless they are only evaluated under a select/&&/|| (guarded loads stay guarded).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

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
    PrimFunc,
    Seq,
    Stmt,
    Store,
    walk_stmts,
)
from packager.te.simplify import Simplifier

STACK_LIMIT_BYTES = 8192  # larger buffers go to the heap (thread stacks may be small)
MAX_VECTOR_BYTES = 64


@dataclass(frozen=True)
class Lang:
    types: dict
    kernel_qualifier: str = ""
    restrict: str = "restrict"
    float_suffix: dict = field(default_factory=lambda: {"float32": "f", "float64": ""})


C = Lang(
    types={
        "float32": "float",
        "float64": "double",
        "int8": "int8_t",
        "int16": "int16_t",
        "int32": "int32_t",
        "int64": "int64_t",
        "uint8": "uint8_t",
        "uint16": "uint16_t",
        "uint32": "uint32_t",
        "uint64": "uint64_t",
        "bool": "uint8_t",
    }
)

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
_SIZE = {
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
_NARROW = ("int8", "int16", "uint8", "uint16")
_ARITH = {"+": "+", "-": "-", "*": "*", "/": "/", "truncdiv": "/", "truncmod": "%"}
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
_C_WORDS = {
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "args",
    "c",
}


def _helper_defs(kind: str, dt: str, ctype: str) -> str:
    s = SHORT[dt]
    if kind == "floordiv":
        return (
            f"static inline {ctype} pk_floordiv_{s}({ctype} a, {ctype} b) {{\n"
            f"    {ctype} q = a / b;\n"
            "    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n}"
        )
    if kind == "floormod":
        return (
            f"static inline {ctype} pk_floormod_{s}({ctype} a, {ctype} b) {{\n"
            f"    {ctype} r = a % b;\n"
            "    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}"
        )
    if kind == "floordivf":
        fl = "floorf" if dt == "float32" else "floor"
        return (
            f"static inline {ctype} pk_floordiv_{s}({ctype} a, {ctype} b) {{ return {fl}(a / b); }}"
        )
    if kind == "floormodf":
        fl = "floorf" if dt == "float32" else "floor"
        return (
            f"static inline {ctype} pk_floormod_{s}({ctype} a, {ctype} b) "
            f"{{ return a - {fl}(a / b) * b; }}"
        )
    if kind in ("max", "min"):
        cmp = ">" if kind == "max" else "<"
        nan = " || a != a" if dt in ("float32", "float64") else ""
        return (
            f"static inline {ctype} pk_{kind}_{s}({ctype} a, {ctype} b) "
            f"{{ return (a {cmp} b{nan}) ? a : b; }}"
        )
    if kind == "abs":
        return f"static inline {ctype} pk_abs_{s}({ctype} a) {{ return a < 0 ? -a : a; }}"
    raise KeyError(kind)


def _vec_defs(dt: str, ctype: str, lanes: int) -> str:
    # loads/stores/broadcasts are emitted inline (memcpy, initializer lists): helper
    # functions taking wide vectors by value would depend on the target's vector ABI
    return (
        f"typedef {ctype} pk_{SHORT[dt]}x{lanes} __attribute__((vector_size({lanes * _SIZE[dt]})));"
    )


def _sanitize(name: str) -> str:
    s = re.sub(r"\W", "_", name) or "v"
    return "v" + s if s[0].isdigit() else s


class _Module:
    """What the translation unit accumulates: helpers, outlined functions, names."""

    def __init__(self, lang: Lang, aliased: frozenset = frozenset()):
        self.lang = lang
        self.aliased = aliased  # buffers that may share memory: never `restrict`
        self.helpers: dict[str, str] = {}
        self.vec_types: dict[str, str] = {}
        self.functions: list[str] = []
        self.n_par = 0

    def restrict(self, buf: Buffer) -> str:
        return "" if buf in self.aliased else f" {self.lang.restrict}"

    def helper(self, kind: str, dtype: str) -> str:
        key = f"{kind}_{dtype}"
        if key not in self.helpers:
            self.helpers[key] = _helper_defs(kind, dtype, self.lang.types[dtype])
        base = kind.rstrip("f") if kind in ("floordivf", "floormodf") else kind
        return f"pk_{base}_{SHORT[dtype]}"

    def vec(self, dtype: str, lanes: int) -> str:
        name = f"pk_{SHORT[dtype]}x{lanes}"
        if name not in self.vec_types:
            self.vec_types[name] = _vec_defs(dtype, self.lang.types[dtype], lanes)
        return name


class Renderer:
    """Emits the statements of one C function (the kernel or an outlined body)."""

    def __init__(self, mod: _Module, kernel: str, names: dict, fail: str, simp: Simplifier):
        self.mod = mod
        self.kernel = kernel
        self.names = names  # Var/Buffer -> C name
        self.used = set(names.values())
        self.lines: list[str] = []
        self.depth = 1
        self.fail = fail  # statement that reports an allocation failure
        self.failed = False
        self.heap: list[str] = []  # live heap buffers (freed on failure)
        self.n_tmp = 0
        self.simp = simp

    # --- naming ---

    def name(self, obj) -> str:
        got = self.names.get(obj)
        if got is None:
            base = _sanitize(obj.name)
            got, k = base, 1
            while got in self.used or got in _C_WORDS or got.startswith("pk_"):
                got, k = f"{base}_{k}", k + 1
            self.used.add(got)
            self.names[obj] = got
        return got

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def ctype(self, dtype: str) -> str:
        return self.mod.lang.types[dtype]

    # --- statements ---

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, Store):
            self.store(s)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, IfThenElse):
            self.emit(f"if ({self.expr_cse([s.cond])[0]}) {{")
            self.block(s.then)
            if s.else_ is not None:
                self.emit("} else {")
                self.block(s.else_)
            self.emit("}")
        elif isinstance(s, Allocate):
            self.allocate(s)
        elif isinstance(s, Barrier):
            raise NotImplementedError("barriers need a GPU target")
        else:
            raise TypeError(type(s).__name__)

    def block(self, s: Stmt) -> None:
        self.depth += 1
        self.stmt(s)
        self.depth -= 1

    def store(self, s: Store) -> None:
        idx, val = self.expr_cse([s.index, s.value])
        self.emit(f"{self.name(s.buffer)}[{idx}] = {val};")

    def allocate(self, s: Allocate) -> None:
        buf = s.buffer
        name, ct = self.name(buf), self.ctype(buf.dtype)
        if buf.size * _SIZE[buf.dtype] <= STACK_LIMIT_BYTES:
            self.emit(f"{ct} {name}[{buf.size}];")
            self.stmt(s.body)
            return
        self.emit(
            f"{ct}* {self.mod.lang.restrict} {name} = ({ct}*)pk_scratch_alloc("
            f"(size_t){buf.size} * sizeof({ct}));"
        )
        self.heap.append(name)
        self.emit(f"if (!{name}) {{")
        self.depth += 1
        for h in reversed(self.heap[:-1]):
            self.emit(f"pk_scratch_free({h});")
        self.emit(self.fail)
        self.depth -= 1
        self.emit("}")
        self.failed = True
        self.stmt(s.body)
        self.heap.pop()
        self.emit(f"pk_scratch_free({name});")

    def loop(self, s: For) -> None:
        if s.kind == "parallel":
            return self.parallel(s)
        if s.kind == "thread_binding":
            raise NotImplementedError(f"thread binding ({s.thread_tag}) needs a GPU target")
        if s.kind == "vectorized" and self.vectorized(s):
            return None
        v = self.name(s.var)
        lo, ext = self.expr_cse([s.min, s.extent])
        end = ext if lo == "0" else f"{lo} + {ext}"
        if s.kind == "unrolled":
            n = s.extent.value if isinstance(s.extent, Const) else 8
            self.emit(f"#pragma GCC unroll {n}")
        if s.kind == "vectorized" and _no_carried_dependence(s):
            self.emit("#pragma GCC ivdep")
        self.emit(f"for (int64_t {v} = {lo}; {v} < {end}; ++{v}) {{")
        self.block(s.body)
        self.emit("}")
        return None

    # --- parallel loops ---

    def parallel(self, s: For) -> None:
        k = self.mod.n_par
        self.mod.n_par += 1
        fname = f"{self.kernel}_par{k}"
        free_vars, bufs = _captures(s)
        err = f"pk_err{k}"
        inner_names = {b: self.name(b) for b in bufs}
        inner_names.update({v: self.name(v) for v in free_vars})
        inner = Renderer(
            self.mod, self.kernel, dict(inner_names), "*c->pk_err = 1; return;", self.simp
        )
        ivar = inner.name(s.var)
        body_start = len(inner.lines)
        inner.stmt(s.body)
        fields, unpack, init = [], [], []
        read_only = _read_only(s)
        for b in bufs:
            ct, n, restrict = self.ctype(b.dtype), inner_names[b], self.mod.restrict(b)
            const = "const " if b in read_only else ""
            fields.append(f"{const}{ct}*{restrict} {n};")
            unpack.append(f"{const}{ct}*{restrict} {n} = c->{n};")
            init.append(n)
        for v in free_vars:
            n = inner_names[v]
            fields.append(f"{self.ctype(v.dtype)} {n};")
            unpack.append(f"const {self.ctype(v.dtype)} {n} = c->{n};")
            init.append(n)
        if inner.failed:
            fields.append("int32_t* pk_err;")
            init.append(f"&{err}")
        lo = self.expr_cse([s.min])[0]
        header = [
            f"typedef struct {{ {' '.join(fields) or 'char pk_unused;'} }} {fname}_ctx;",
            f"static void {fname}(void* pk_ctx, int64_t pk_i) {{",
            f"    const {fname}_ctx* c = (const {fname}_ctx*)pk_ctx;",
        ]
        header += ["    " + u for u in unpack]
        header.append(
            f"    const int64_t {ivar} = pk_i + {lo};"
            if lo != "0"
            else f"    const int64_t {ivar} = pk_i;"
        )
        if not fields:
            header.append("    (void)c;")
        self.mod.functions.append("\n".join(header + inner.lines[body_start:] + ["}"]))
        ext = self.expr_cse([s.extent])[0]
        if inner.failed:
            self.emit(f"int32_t {err} = 0;")
        self.emit(f"{{ {fname}_ctx pk_c{k} = {{{', '.join(init) or '0'}}};")
        self.emit(f"  pk_parallel_for({fname}, &pk_c{k}, {ext}); }}")
        if inner.failed:
            self.emit(f"if ({err}) {{")
            self.depth += 1
            for h in reversed(self.heap):
                self.emit(f"pk_scratch_free({h});")
            self.emit(self.fail)
            self.depth -= 1
            self.emit("}")
            self.failed = True

    # --- expressions ---

    def expr_cse(self, roots: list[Expr], vec=None, vec_root=False) -> list[str]:
        """Render ``roots``; shared unconditional subterms become const locals. In
        vector mode the last root is the stored value, materialized as a vector."""
        shared = _shared_nodes(roots)
        names: dict[int, str] = {}
        printer = _Printer(self, names, vec)
        for n in shared:
            # A lane-varying index is only ever a load's address, which is rendered
            # from its lane-0 base; as a temp it would name the (undeclared) lane var.
            if vec is not None and n.dtype == INDEX and printer.is_vec(n):
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

    def vectorized(self, s: For) -> bool:
        plan = _vector_plan(s, self.simp)
        if plan is None:
            return False
        lanes, stores = plan
        v = self.name(s.var)
        self.emit(f"{{ /* {v}: {lanes} lanes */")
        self.depth += 1
        for st, base in stores:
            idx, val = self.expr_cse([base, st.value], vec=(s.var, lanes), vec_root=True)
            self.emit(f"__builtin_memcpy(&{self.name(st.buffer)}[{idx}], &{val}, sizeof {val});")
        self.depth -= 1
        self.emit("}")
        return True


class _Printer:
    """Expression text; in vector mode (vec=(var, lanes)) lane-varying nodes are
    vectors and invariant ones scalars, broadcast where they meet."""

    def __init__(self, r: Renderer, names: dict, vec):
        self.r = r
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
                got = _uses(e.index, self.vec[0])
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
            got = self.memo[id(e)] = self._render(e)
        return got

    def operand(self, e: Expr, as_vec: bool) -> str:
        text = self(e)
        if as_vec and not self.is_vec(e):
            return self.broadcast(e, text)
        return text

    def broadcast(self, e: Expr, text: str) -> str:
        if not isinstance(e, (Const, Var)) and id(e) not in self.names:
            text = self.r.temp(self.r.ctype(e.dtype), text)  # evaluate once
        vt = self.r.mod.vec(e.dtype, self.vec[1])
        return self.r.temp(vt, "{" + ", ".join([text] * self.vec[1]) + "}")

    def as_vector_temp(self, e: Expr) -> str:
        """A named vector holding ``e`` (for a memcpy store)."""
        text = self(e)
        if not self.is_vec(e):
            return self.broadcast(e, text)
        if id(e) in self.names or _is_temp(text):
            return text
        return self.r.temp(self.type_of(e), text)

    def _render(self, e: Expr) -> str:
        if isinstance(e, Const):
            return _literal(e)
        if isinstance(e, Var):
            return self.r.name(e)
        if isinstance(e, BufferLoad):
            buf = self.r.name(e.buffer)
            if self.is_vec(e):
                base = self(self.r.simp(substitute(e.index, {self.vec[0]: Const(0, INDEX)})))
                t = self.r.temp(self.type_of(e), None)
                self.r.emit(f"__builtin_memcpy(&{t}, &{buf}[{base}], sizeof {t});")
                return t
            return f"{buf}[{self(e.index)}]"
        if isinstance(e, Binary):
            return self._binary(e)
        if isinstance(e, Unary):
            return f"(-{self(e.a)})" if e.op == "neg" else f"(!{self(e.a)})"
        if isinstance(e, Cast):
            if e.dtype == "bool":
                return f"({self(e.a)} != 0)"
            return f"(({self.r.ctype(e.dtype)}){self(e.a)})"
        if isinstance(e, Select):
            if self.is_vec(e):
                return self._vector_select(e)
            return f"({self(e.cond)} ? {self(e.t)} : {self(e.f)})"
        if isinstance(e, Call):
            return self._call(e)
        raise TypeError(f"cannot render {type(e).__name__}")

    def _vector_select(self, e: Select) -> str:
        """A select whose condition is the same for every lane (a padding guard): an
        if/else, so the taken branch's loads are the only ones made."""
        if self.is_vec(e.cond):
            return self._blend(e)
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
        return _mask_blend(vt, it, m, t, f)

    def _branch(self, t: str, e: Expr) -> None:
        memo = dict(self.memo)  # temps made in the branch are local to its block
        self.r.depth += 1
        self.r.emit(f"{t} = {self.operand(e, True)};")
        self.r.depth -= 1
        self.memo = memo

    def _binary(self, e: Binary) -> str:
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
            kind = op + ("f" if dt in ("float32", "float64") else "")
            return f"{self.r.mod.helper(kind, dt)}({a}, {b})"
        if op in ("min", "max"):
            if v:
                return self._vector_minmax(op, dt, a, b)
            return f"{self.r.mod.helper(op, dt)}({a}, {b})"
        raise ValueError(f"unknown binary op {op}")

    def _vector_minmax(self, op: str, dt: str, a: str, b: str) -> str:
        """Lane-wise pk_max/pk_min (a NaN operand ``a`` wins, as in the scalar helper) as
        a compare mask and a bitwise blend, inline: no helper takes vectors by value."""
        lanes = self.vec[1]
        vt = self.r.mod.vec(dt, lanes)
        it = self.r.mod.vec(_MASK_INT[dt], lanes)
        a, b = (x if _is_temp(x) else self.r.temp(vt, x) for x in (a, b))
        cmp = ">" if op == "max" else "<"
        m = self.r.temp(it, f"({a} {cmp} {b}) | ({a} != {a})")
        return _mask_blend(vt, it, m, a, b)

    def _call(self, e: Call) -> str:
        func = _RENAME.get(e.func, e.func)
        args = ", ".join(self(a) for a in e.args)
        dt = e.args[0].dtype
        if func in ("isnan", "isinf"):
            return f"({func}({args}) != 0)"
        if func == "fabs" and dt not in ("float32", "float64"):
            return f"{self.r.mod.helper('abs', dt)}({args})"
        if func not in _MATH:
            raise ValueError(f"no C function for {e.func}")
        if dt not in ("float32", "float64"):
            raise ValueError(f"{e.func} of {dt}: cast to a float type first")
        return f"{func}{self.r.mod.lang.float_suffix[dt]}({args})"


def _literal(e: Const) -> str:
    v, dt = e.value, e.dtype
    if dt in ("float32", "float64"):
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        if dt == "float32":
            text = repr(float(np.float32(v)))
            return f"{text}f" if ("." in text or "e" in text) else f"{text}.0f"
        text = repr(float(v))
        return text if ("." in text or "e" in text) else f"{text}.0"
    if dt == "bool":
        return "1" if v else "0"
    v = int(v)
    if -(2**31) < v < 2**31:
        return str(v) if v >= 0 else f"({v})"
    if dt == "uint64":
        return f"UINT64_C({v})"
    if v == -(2**63):
        return "INT64_MIN"
    return f"INT64_C({v})" if v > 0 else f"(-INT64_C({-v}))"


# --- analyses ---------------------------------------------------------------


def _uses(e: Expr, var: Var) -> bool:
    stack, seen = [e], set()
    while stack:
        n = stack.pop()
        if n is var:
            return True
        if id(n) not in seen:
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


def _expr_nodes(s: Stmt):
    """Every expression root in a statement tree."""
    for n in walk_stmts(s):
        if isinstance(n, Store):
            yield n.index
            yield n.value
        elif isinstance(n, For):
            yield n.min
            yield n.extent
        elif isinstance(n, IfThenElse):
            yield n.cond


def _all_nodes(s: Stmt):
    seen: set[int] = set()
    stack = list(_expr_nodes(s))
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        yield n
        stack.extend(children(n))


def _captures(s: For) -> tuple[list[Var], list[Buffer]]:
    """Variables and buffers a parallel loop body uses from outside, in first-use
    order (deterministic)."""
    defined = {id(n.var) for n in walk_stmts(s) if isinstance(n, For)}
    local = {id(n.buffer) for n in walk_stmts(s.body) if isinstance(n, Allocate)}
    vars_: dict[int, Var] = {}
    bufs: dict[int, Buffer] = {}
    for n in walk_stmts(s.body):
        if isinstance(n, Store) and id(n.buffer) not in local:
            bufs.setdefault(id(n.buffer), n.buffer)
    for n in _all_nodes(s.body):
        if isinstance(n, Var) and id(n) not in defined:
            vars_.setdefault(id(n), n)
        elif isinstance(n, BufferLoad) and id(n.buffer) not in local:
            bufs.setdefault(id(n.buffer), n.buffer)
    return sorted(vars_.values(), key=lambda v: v.name), sorted(bufs.values(), key=lambda b: b.name)


def _read_only(s: Stmt) -> set:
    written = {n.buffer for n in walk_stmts(s) if isinstance(n, Store)}
    return {n.buffer for n in _all_nodes(s) if isinstance(n, BufferLoad)} - written


def _no_carried_dependence(s: For) -> bool:
    """True when every stored buffer is read only at an index it is stored at in
    this iteration, and each store index moves with the loop variable."""
    stores = [n for n in walk_stmts(s.body) if isinstance(n, Store)]
    if not stores or any(not _uses(st.index, s.var) for st in stores):
        return False
    stored_at = {}
    for st in stores:
        stored_at.setdefault(id(st.buffer), set()).add(id(st.index))
    for n in _all_nodes(s.body):
        if isinstance(n, BufferLoad) and id(n.buffer) in stored_at:
            if id(n.index) not in stored_at[id(n.buffer)]:
                return False
    return True


_VEC_OPS = ("+", "-", "*", "/")


def _mask_blend(vt: str, it: str, mask: str, t: str, f: str) -> str:
    """Vector (type ``vt``) taking each lane from ``t`` where the ``mask`` (a compare
    result, integer vector type ``it``) is set, else from ``f``."""
    return f"(({vt})(((({it}){t}) & {mask}) | ((({it}){f}) & ~{mask})))"


def _is_temp(text: str) -> bool:
    return text.startswith("pk_t") and text[4:].isdigit()


def _lane_compare(e: Select) -> bool:
    """A select each lane decides for itself by comparing float data of the select's own
    type: both sides are computed and blended by the mask, so the condition must not
    guard a load (index comparisons, the padding guards, are never of this kind)."""
    c = e.cond
    return (
        isinstance(c, Binary)
        and c.op in _COMPARE
        and c.a.dtype == c.b.dtype == e.dtype
        and e.dtype in _MASK_INT
    )


_MASK_INT = {"float32": "int32", "float64": "int64"}  # a float vector's compare mask


def _vector_plan(s: For, simp: Simplifier):
    """(lanes, [(store, base index)]) when the loop can use vector types, else None."""
    if not isinstance(s.extent, Const) or not isinstance(s.min, Const) or s.min.value != 0:
        return None
    lanes = int(s.extent.value)
    body = s.body.stmts if isinstance(s.body, Seq) else [s.body]
    if lanes not in (2, 4, 8, 16) or not all(isinstance(x, Store) for x in body):
        return None
    if not _no_carried_dependence(s):
        return None
    plan = []
    for st in body:
        if lanes * _SIZE[st.buffer.dtype] > MAX_VECTOR_BYTES or st.buffer.dtype == "bool":
            return None
        if not _stride_one(st.index, s.var, simp) or not _vector_expr(st.value, s, simp):
            return None
        plan.append((st, simp(substitute(st.index, {s.var: Const(0, INDEX)}))))
    return lanes, plan


def _stride_one(index: Expr, var: Var, simp: Simplifier) -> bool:
    nxt = substitute(index, {var: Binary("+", var, Const(1, INDEX), INDEX)})
    d = simp(Binary("-", nxt, index, INDEX))
    return isinstance(d, Const) and d.value == 1


def _vector_expr(e: Expr, s: For, simp: Simplifier) -> bool:
    """Lane-varying nodes must be + - * / (ints: + - *) or stride-1 loads."""
    lanes_dt = None
    stack, seen = [e], set()
    while stack:
        n = stack.pop()
        if id(n) in seen or not _uses(n, s.var):
            continue
        seen.add(id(n))
        if lanes_dt is not None and n.dtype != lanes_dt:
            return False
        lanes_dt = n.dtype
        if isinstance(n, BufferLoad):
            if not _stride_one(n.index, s.var, simp):
                return False
            continue
        if isinstance(n, Unary) and n.op == "neg":
            stack.append(n.a)
            continue
        if isinstance(n, Select) and not _uses(n.cond, s.var):
            stack.extend((n.t, n.f))  # one branch for all lanes (see _vector_select)
            continue
        if isinstance(n, Select) and _lane_compare(n):
            stack.extend((n.cond.a, n.cond.b, n.t, n.f))  # a blend (see _blend)
            continue
        if isinstance(n, Binary) and n.op in ("min", "max") and n.dtype in _MASK_INT:
            stack.extend((n.a, n.b))
            continue
        if not isinstance(n, Binary) or n.op not in _VEC_OPS:
            return False
        if n.op == "/" and n.dtype not in ("float32", "float64"):
            return False
        if n.dtype in _NARROW:
            return False
        stack.extend((n.a, n.b))
    return True


# --- the translation unit ---------------------------------------------------


def codegen_c(func: PrimFunc, lang: Lang = C) -> str:
    """A self-contained C translation unit defining ``int32_t NAME(void* const* args)``."""
    mod = _Module(lang, frozenset(func.params[k] for k in func.may_alias))
    names: dict = {}
    r = Renderer(mod, func.name, names, "return 1;", Simplifier())
    written = {n.buffer for n in walk_stmts(func.body) if isinstance(n, Store)}
    for k, buf in enumerate(func.params):
        ct = lang.types[buf.dtype]
        const = "" if buf in written else "const "
        r.emit(f"{const}{ct}*{mod.restrict(buf)} {r.name(buf)} = ({const}{ct}*)args[{k}];")
    r.stmt(func.body)
    r.emit("return 0;")
    parts = ['#include "pk_kernel.h"', ""]
    if mod.helpers or mod.vec_types:
        parts += [mod.helpers[k] for k in sorted(mod.helpers)]
        parts += [mod.vec_types[k] for k in sorted(mod.vec_types)]
        parts.append("")
    for f in mod.functions:
        parts += [f, ""]
    q = f"{lang.kernel_qualifier} " if lang.kernel_qualifier else ""
    parts.append(f"{q}int32_t {func.name}(void* const* args) {{")
    parts += r.lines
    parts.append("}")
    return "\n".join(parts) + "\n"
