"""A bundle used the way an application uses it: add_subdirectory() in the application's own
CMake project, linked against pk_bundle, driven through pk_runtime.h."""

import json
import subprocess
from pathlib import Path

import numpy as np

from packager.boards import load_board
from packager.package import package
from packager.runner import cmake_bin

ROOT = Path(__file__).resolve().parent.parent

APP = r"""
#include <stdio.h>
#include <stdlib.h>
#include "pk_runtime.h"

int main(int argc, char **argv) {
    pk_graph *g;
    if (pk_graph_load_dir(argv[1], &g) != PK_OK) {
        fprintf(stderr, "%s\n", pk_last_error());
        return 2;
    }
    pk_tensor_info in, out;
    pk_graph_input_info(g, 0, &in);
    pk_graph_output_info(g, 0, &out);
    float *x = malloc(in.bytes), *y = malloc(out.bytes);
    FILE *f = fopen(argv[2], "rb");
    if (!f || fread(x, 1, in.bytes, f) != in.bytes) return 3;
    fclose(f);
    if (pk_graph_set_input(g, pk_graph_input_index(g, in.name), x, in.bytes) != PK_OK ||
        pk_graph_run(g) != PK_OK || pk_graph_get_output(g, 0, y, out.bytes) != PK_OK) {
        fprintf(stderr, "%s\n", pk_last_error());
        return 4;
    }
    for (size_t i = 0; i < out.bytes / sizeof(float); i++) printf("%.9g\n", y[i]);
    pk_graph_destroy(g);
    free(x); free(y);
    return 0;
}
"""

CMAKE = """
cmake_minimum_required(VERSION 3.13)
project(app C)
add_subdirectory(bundle)
add_executable(app main.c)
target_link_libraries(app PRIVATE pk_bundle)
"""


def test_application_links_bundle_with_add_subdirectory(tmp_path):
    app = tmp_path / "app"
    package(str(ROOT / "examples" / "tiny_cnn.onnx"), load_board("host"), str(app / "bundle"))
    (app / "main.c").write_text(APP)
    (app / "CMakeLists.txt").write_text(CMAKE)
    build = tmp_path / "build"
    configure = [cmake_bin(), "-S", app, "-B", build, "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"]
    for cmd in (configure, [cmake_bin(), "--build", build, "-j2"]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    # no -DPK_CFLAGS given: every kernel is compiled with the board profile's flags
    flags = load_board("host").toolchain.cflags
    kernels = [c for c in json.loads((build / "compile_commands.json").read_text())
               if "/kernels/" in c["file"]]  # fmt: skip
    # -O2 first, the board's flags after it so that they win
    assert kernels and all(f" -O2 {' '.join(flags)} " in c["command"] for c in kernels), kernels
    x = np.load(app / "bundle" / "selftest" / "input_0.npy")
    (tmp_path / "x.bin").write_bytes(x.tobytes())
    r = subprocess.run(
        [build / "app", app / "bundle", tmp_path / "x.bin"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    got = np.array([float(v) for v in r.stdout.split()], np.float32)
    want = np.load(app / "bundle" / "selftest" / "output_0.npy").ravel()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_flags_on_the_command_line_replace_the_profiles(tmp_path):
    bundle = tmp_path / "bundle"
    package(str(ROOT / "examples" / "tiny_cnn.onnx"), load_board("host"), str(bundle))
    assert (
        'set(PK_BOARD_CFLAGS "-O3 -fno-tree-coalesce-vars -march=native")\n'
        in (bundle / "bundle.cmake").read_text()
    )
    build = tmp_path / "build"
    r = subprocess.run(
        [cmake_bin(), "-S", bundle, "-B", build, "-DPK_CFLAGS=-O1 -mno-avx"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PK_CFLAGS:STRING=-O1 -mno-avx\n" in (build / "CMakeCache.txt").read_text()
