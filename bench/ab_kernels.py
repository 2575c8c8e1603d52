"""Two builds of one model, kernel against kernel: each kernel whose C differs between
bundle A and bundle B is compiled twice into one program, which calls A's and B's in
turn on the same buffers (one thread, pinned to a core) and prints each side's lowest
and median time and their ratios.

    python bench/ab_kernels.py out/before out/after            # every kernel that differs
    python bench/ab_kernels.py out/before out/after --kernel k_44_qconv2d --calls 600

On a shared virtual machine the load of its neighbours moves in phases of seconds: whole
bundles timed one after the other (bench/ab_bundles.py) moved kernels whose code was the
same 1.26x in one run. Calls of A and B a millisecond apart see the same phase, so
their ratio holds where the absolute times do not.

The buffers are the kernel's arguments by its signature in each bundle (kernels/
registry.c; a conv whose form changed, Winograd for direct, has other weights): floats
uniform in [-1, 1) (no NaN or subnormal takes a slow path), integers in [0, 4) (an
index stays in range, a shift small); the weights are not the model's, which the
kernels' time does not depend on. Build A and B from the same model (kernel names
match) with the change between them. The board's compiler flags come from bundle A's
bundle.cmake.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from ab_bundles import changed_kernels  # noqa: E402

RUNTIME = ROOT / "c_runtime"
EXTRA_FLAGS = ("-std=gnu11", "-fno-math-errno", "-ffp-contract=fast")
CTYPES = {
    "float32": ("float", True),
    "float64": ("double", True),
    "int8": ("int8_t", False),
    "uint8": ("uint8_t", False),
    "int16": ("int16_t", False),
    "uint16": ("uint16_t", False),
    "int32": ("int32_t", False),
    "uint32": ("uint32_t", False),
    "int64": ("int64_t", False),
    "uint64": ("uint64_t", False),
    "bool": ("uint8_t", False),
}
SIGNATURE = re.compile(r'\{"(k_\w+)", \w+, "([^"]*)"\}')


def signatures(bundle: str) -> dict[str, list[tuple[str, int]]]:
    """Each kernel's arguments, (dtype, elements), from the bundle's kernels/registry.c."""
    text = Path(bundle, "kernels", "registry.c").read_text()
    out = {}
    for name, sig in SIGNATURE.findall(text):
        args = []
        for arg in sig.split():
            dtype, dims = arg.rstrip("]").split("[")
            n = 1
            for d in filter(None, dims.split(",")):
                n *= int(d)
            args.append((dtype, n))
        out[name] = args
    return out


def driver_source(args_a: list[tuple[str, int]], args_b: list[tuple[str, int]], calls: int) -> str:
    """C of a program that fills each side's arguments (a kernel whose form changed, a
    Winograd conv for a direct one, has other weights) and calls pk_ab_a and pk_ab_b in
    turn."""
    fills = []
    for side, args in (("a", args_a), ("b", args_b)):
        fills.append(f"    void* args_{side}[{max(len(args), 1)}];")
        for k, (dtype, n) in enumerate(args):
            ctype, is_float = CTYPES[dtype]
            value = "(r >> 33) % 2000 / 1000.0 - 1.0" if is_float else "(r >> 33) % 4"
            fills.append(
                # 64-byte aligned, as the runtime places every tensor: malloc's 16 bytes
                # split a 32-byte vector over two cache lines at every other address
                f"    {ctype}* {side}{k} = ({ctype}*)(((uintptr_t)malloc(sizeof({ctype}) * "
                f"{max(n, 1)} + 64) + 63) & ~(uintptr_t)63);\n"
                f"    for (long i = 0; i < {n}; i++) {{ r = r * 6364136223846793005ull + 1; "
                f"{side}{k}[i] = ({ctype})({value}); }}\n"
                f"    args_{side}[{k}] = {side}{k};"
            )
    return f"""#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int32_t pk_ab_a(void* const* args);
int32_t pk_ab_b(void* const* args);
static double now_ms(void) {{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}}
static int by_value(const void* x, const void* y) {{
    double a = *(const double*)x, b = *(const double*)y;
    return a < b ? -1 : a > b;
}}
int main(void) {{
    unsigned long long r = 12345;
{chr(10).join(fills)}
    static double ta[{calls}], tb[{calls}];
    if (pk_ab_a(args_a) || pk_ab_b(args_b)) return 1; /* warm-up; a scratch allocation failed */
    for (int i = 0; i < {calls}; i++) {{
        double t0 = now_ms();
        pk_ab_a(args_a);
        double t1 = now_ms();
        pk_ab_b(args_b);
        ta[i] = t1 - t0, tb[i] = now_ms() - t1;
    }}
    qsort(ta, {calls}, sizeof ta[0], by_value);
    qsort(tb, {calls}, sizeof tb[0], by_value);
    printf("%.6f %.6f %.6f %.6f\\n", ta[0], ta[{calls // 2}], tb[0], tb[{calls // 2}]);
    return 0;
}}
"""


def board_flags(bundle: str) -> list[str]:
    """The board's compiler flags as the bundle's bundle.cmake gives them."""
    text = Path(bundle, "bundle.cmake").read_text()
    m = re.search(r'set\(PK_BOARD_CFLAGS "([^"]*)"', text)
    return m.group(1).split() if m else ["-O3"]


def compare(a: str, b: str, kernel: str, calls: int, tmp: Path, cc: str = "cc") -> list[float]:
    """[A lowest, A median, B lowest, B median] ms of ``calls`` alternate calls."""
    flags = [*board_flags(a), *EXTRA_FLAGS, f"-I{RUNTIME / 'include'}", f"-I{RUNTIME / 'src'}"]
    objs = []
    for side, bundle in (("a", a), ("b", b)):
        obj = tmp / f"{side}.o"
        src = Path(bundle, "kernels", f"{kernel}.c")
        cmd = [cc, *flags, f"-D{kernel}=pk_ab_{side}", "-c", str(src), "-o", str(obj)]
        subprocess.run(cmd, check=True)
        objs.append(str(obj))
    driver = tmp / "driver.c"
    driver.write_text(driver_source(signatures(a)[kernel], signatures(b)[kernel], calls))
    exe = tmp / "ab"
    runtime = [str(RUNTIME / "src" / f) for f in ("pk_parallel.c", "pk_scratch.c")]
    subprocess.run([cc, *flags, str(driver), *objs, *runtime, "-lm", "-o", str(exe)], check=True)
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    env = dict(os.environ, PACKAGER_NUM_THREADS="1")
    out = subprocess.run([*pin, str(exe)], capture_output=True, text=True, env=env, check=True)
    return [float(x) for x in out.stdout.split()]


def _row(t: list[float]) -> str:
    """A's and B's lowest time and their ratio, then their medians and ratio."""
    cells = (t[0], t[2], t[2] / t[0], t[1], t[3], t[3] / t[1])
    return " ".join(f"{c:8.4f}" if k % 3 < 2 else f"{c:8.3f}" for k, c in enumerate(cells))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    ap.add_argument("--calls", type=int, default=300, help="calls of each side per kernel")
    ap.add_argument("--cc", default="cc")
    args = ap.parse_args(argv)
    both = set(signatures(args.a)) & set(signatures(args.b))
    kernels = sorted(args.kernel or changed_kernels(args.a, args.b) & both)
    if not kernels:
        print("no kernel differs between the bundles")
        return 0
    sums = [0.0] * 4
    head = ("A min", "B min", "B/A", "A med", "B med", "B/A")
    print(f"{'kernel':<44} {' '.join(f'{h:>8}' for h in head)}")
    with tempfile.TemporaryDirectory(prefix="ab_kernels_") as d:
        for k in kernels:
            t = compare(args.a, args.b, k, args.calls, Path(d), args.cc)
            sums = [s + x for s, x in zip(sums, t, strict=True)]
            print(f"{k:<44} {_row(t)}")
    print(f"{f'sum of {len(kernels)} kernels':<44} {_row(sums)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
