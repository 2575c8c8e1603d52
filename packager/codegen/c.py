"""C: the table the shared printer (codegen/cstyle.py) renders C99 with, and what only C has.

The kernel is ``int32_t NAME(void* const* args)``: it returns 0, or 1 when a scratch
buffer cannot be allocated. Vector code uses GCC/Clang vector extensions (a
``vector_size`` typedef per shape) with unaligned ``__builtin_memcpy`` loads and stores.
What C adds to the shared printer:

* parallel loops are outlined into ``static void NAME_parK(void* ctx, int64_t i)`` with a
  context struct of the captured buffers and variables, run through the runtime's
  ``pk_parallel_for``;
* local buffers over ``STACK_LIMIT_BYTES`` come from ``pk_scratch_alloc`` (thread stacks
  may be small) and are freed on every way out;
* no barriers and no thread indices: a kernel that has them is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packager.te.expr import INDEX
from packager.te.ir import Allocate, For, PrimFunc

from .cstyle import SIZE, Lang, Renderer, captures, read_only, render, stored_buffers

STACK_LIMIT_BYTES = 8192  # larger buffers go to the heap (thread stacks may be small)

_TYPES = {
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
C_KEYWORDS = """auto break case char const continue default do double else enum extern float
for goto if inline int long register restrict return short signed sizeof static struct
switch typedef union unsigned void volatile while"""
_KERNEL_NAMES = ("args", "c")  # the kernel's argument array, a closure's context


@dataclass(frozen=True)
class CLang(Lang):
    """C99 with GCC/Clang vector extensions, for the runtime's kernel ABI."""

    name: str = "C"
    prelude: str = '#include "pk_kernel.h"'
    # GCC applies an optimize pragma to every function after it (each kernel is a file
    # of its own); other compilers skip it
    hint_pragmas: dict = field(
        default_factory=lambda: {
            "no_predictive_commoning": "#if defined(__GNUC__) && !defined(__clang__)\n"
            '#pragma GCC optimize("no-predictive-commoning")\n#endif'
        }
    )
    types: dict = field(default_factory=lambda: dict(_TYPES))
    reserved: frozenset = frozenset(C_KEYWORDS.split()) | frozenset(_KERNEL_NAMES)
    restrict: str = "restrict"
    literal_suffix: dict = field(default_factory=lambda: {"float32": "f", "float64": ""})
    int64_literal: str = "INT64_C({v})"
    uint64_literal: str = "UINT64_C({v})"
    int64_min: str = "INT64_MIN"
    math_suffix: dict = field(default_factory=lambda: {"float32": "f", "float64": ""})
    unroll_pragma: str | None = "#pragma GCC unroll {n}"
    ivdep_pragma: str | None = "#pragma GCC ivdep"
    vector_lanes: tuple = (2, 4, 8, 16)
    max_vector_bytes: int = 64
    vector_type: str = "pk_{short}x{lanes}"
    vector_decl: str | None = "typedef {scalar} {name} __attribute__((vector_size({bytes})));"
    vector_load: str = "__builtin_memcpy(&{dst}, &{buf}[{index}], sizeof {dst});"
    vector_store: str = "__builtin_memcpy(&{buf}[{index}], &{src}, sizeof {src});"
    vector_broadcast: str = "{{{elems}}}"
    vector_literal: str | None = "{{{elems}}}"
    vector_concat: str = "__builtin_shufflevector({a}, {b}, {idx})"
    vector_convert: str | None = "__builtin_convertvector({x}, {type})"
    vector_lane_calls: bool = True
    # a read prefetch into the L2, not the L1 (locality 2: x86 prefetcht1, aarch64
    # pldl2keep), where the lines wait without evicting the tile's own; a hint only,
    # which does not fault
    prefetch: str | None = (
        "__builtin_prefetch("
        "(const void*)((uintptr_t){buf} + (uintptr_t)({index}) * {size}u), 0, 2);"
    )
    kernel_return: str | None = "return 0;"
    kernel_fail: str = "return 1;"
    intrinsics: bool = True

    def kernel_head(self, r: Renderer, func: PrimFunc) -> str:
        """``int32_t NAME(void* const* args)``; each argument is unpacked to a typed
        pointer, ``const`` where the kernel never stores to it."""
        written = stored_buffers(func.body)
        for k, buf in enumerate(func.params):
            ct = self.types[buf.dtype]
            const = "" if buf in written else "const "
            r.emit(f"{const}{ct}*{r.mod.restrict(buf)} {r.name(buf)} = ({const}{ct}*)args[{k}];")
        q = f"{self.kernel_qualifier} " if self.kernel_qualifier else ""
        return f"{q}int32_t {func.name}(void* const* args) {{"

    def allocate(self, r: Renderer, s: Allocate) -> None:
        buf = s.buffer
        if buf.size * SIZE[buf.dtype] <= STACK_LIMIT_BYTES:
            return super().allocate(r, s)
        name, ct = r.name(buf), r.ctype(buf.dtype)
        r.emit(
            f"{ct}* {self.restrict} {name} = ({ct}*)pk_scratch_alloc("
            f"(size_t){buf.size} * sizeof({ct}));"
        )
        r.heap.append(name)
        r.emit(f"if (!{name}) {{")
        r.depth += 1
        for h in reversed(r.heap[:-1]):
            r.emit(f"pk_scratch_free({h});")
        r.emit(r.fail)
        r.depth -= 1
        r.emit("}")
        r.failed = True
        r.visit(s.body)
        r.heap.pop()
        r.emit(f"pk_scratch_free({name});")
        return None

    def parallel(self, r: Renderer, s: For) -> None:
        """The body becomes a function over one iteration with the captured buffers and
        variables in a context struct; ``pk_parallel_for`` runs it over the extent. A
        failed allocation inside sets the caller's error flag."""
        k = r.mod.n_par
        r.mod.n_par += 1
        fname = f"{r.kernel}_par{k}"
        free_vars, bufs = captures(s)
        err = f"pk_err{k}"
        inner_names = {b: r.name(b) for b in bufs}
        inner_names.update({v: r.name(v) for v in free_vars})
        inner = Renderer(r.mod, r.kernel, dict(inner_names), "*c->pk_err = 1; return;", r.simp)
        ivar = inner.name(s.var)
        body_start = len(inner.lines)
        inner.visit(s.body)
        fields, unpack, init = _context(r, s, inner_names, bufs, free_vars)
        if inner.failed:
            fields.append("int32_t* pk_err;")
            init.append(f"&{err}")
        lo = r.expr_cse([s.min])[0]
        header = [
            f"typedef struct {{ {' '.join(fields) or 'char pk_unused;'} }} {fname}_ctx;",
            f"static void {fname}(void* pk_ctx, int64_t pk_i) {{",
            f"    const {fname}_ctx* c = (const {fname}_ctx*)pk_ctx;",
        ]
        header += ["    " + u for u in unpack]
        start = f"pk_i + {lo}" if lo != "0" else "pk_i"
        header.append(f"    const {r.ctype(INDEX)} {ivar} = {start};")
        if not fields:
            header.append("    (void)c;")
        r.mod.functions.append("\n".join(header + inner.lines[body_start:] + ["}"]))
        ext = r.expr_cse([s.extent])[0]
        if inner.failed:
            r.emit(f"int32_t {err} = 0;")
        r.emit(f"{{ {fname}_ctx pk_c{k} = {{{', '.join(init) or '0'}}};")
        r.emit(f"  pk_parallel_for({fname}, &pk_c{k}, {ext}); }}")
        if inner.failed:
            r.emit(f"if ({err}) {{")
            r.depth += 1
            for h in reversed(r.heap):
                r.emit(f"pk_scratch_free({h});")
            r.emit(r.fail)
            r.depth -= 1
            r.emit("}")
            r.failed = True


def _context(r: Renderer, s: For, names: dict, bufs: list, free_vars: list):
    """The context struct's fields, the outlined function's unpacking of them and the
    struct's initializer: buffers (``const`` where the loop only reads them), then
    variables."""
    ro = read_only(s)
    fields, unpack, init = [], [], []
    for b in bufs:
        n = names[b]
        decl = f"{'const ' if b in ro else ''}{r.ctype(b.dtype)}*{r.mod.restrict(b)} {n}"
        fields.append(f"{decl};")
        unpack.append(f"{decl} = c->{n};")
        init.append(n)
    for v in free_vars:
        n, ct = names[v], r.ctype(v.dtype)
        fields.append(f"{ct} {n};")
        unpack.append(f"const {ct} {n} = c->{n};")
        init.append(n)
    return fields, unpack, init


C = CLang()


def codegen_c(func: PrimFunc, lang: Lang = C) -> str:
    """A self-contained C translation unit defining ``int32_t NAME(void* const* args)``."""
    return render(func, lang)
