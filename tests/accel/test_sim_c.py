"""The accelerator's board driver (c_runtime/accel/pk_accel_uio.c): it builds for the host
and for armv7 with warnings as errors, and refuses a missing device with a message that
names it. (The simulator's C test runs in tests/test_c_runtime.py's ctest suite.)"""

import shutil
import subprocess
from pathlib import Path

import pytest

ACCEL = Path(__file__).resolve().parents[2] / "c_runtime" / "accel"
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-O2"]

MAIN = r"""
#include <stdio.h>
#include <string.h>
#include "pk_accel.h"
int main(int argc, char** argv) {
    pk_accel_config cfg = {1, 16, 16, 8192, 2048, 1024, 2048, 64, 100.0, 8.0};
    pk_accel* dev = (pk_accel*)&cfg;
    int rc = pk_accel_open(&cfg, argc > 1 ? argv[1] : NULL, &dev);
    printf("%d %s|%s\n", rc, dev == NULL ? "null" : "set", pk_accel_last_error(NULL));
    return 0;
}
"""


@pytest.mark.parametrize("cc", ["cc", "arm-linux-gnueabihf-gcc"])
def test_board_driver_builds_with_warnings_as_errors(cc, tmp_path):
    if not shutil.which(cc):
        pytest.skip(f"{cc} not installed")
    for src in ("pk_accel_uio.c", "pk_accel_sim.c"):
        r = subprocess.run(
            [cc, *STRICT, f"-I{ACCEL}", "-c", str(ACCEL / src), "-o", str(tmp_path / "x.o")],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr


def test_missing_uio_device_is_a_device_error_naming_it(tmp_path):
    (tmp_path / "main.c").write_text(MAIN)
    exe = tmp_path / "main"
    subprocess.run(
        ["cc", *STRICT, f"-I{ACCEL}", str(tmp_path / "main.c"), str(ACCEL / "pk_accel_uio.c"),
         "-o", str(exe)],
        check=True,
    )  # fmt: skip
    missing = tmp_path / "uio7"
    out = subprocess.run([exe, str(missing)], capture_output=True, text=True, check=True).stdout
    assert out == (
        f"-7 null|cannot open the accelerator's UIO device {missing}: No such file or directory\n"
    )
    # the registers open, the memory device does not
    (tmp_path / "regs").write_bytes(bytes(4096))
    env = {"PK_ACCEL_UDMABUF": str(tmp_path / "udmabuf9"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [exe, str(tmp_path / "regs")], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert out == (
        f"-7 null|cannot open the u-dma-buf device {tmp_path / 'udmabuf9'}: No such file or "
        "directory\n"
    )
