"""The profile's accel section: validation (errors name the field), AccelTarget.of, the
shipped profiles that have one, and `packager boards --show`."""

import subprocess
import sys

import pytest
import yaml

from packager import boards
from packager.boards import check_board_file, load_board
from packager.errors import PackagerError
from packager.target import AccelTarget, targets_of

BASE = """\
name: {name}
description: a test board
arch: armv7
cpu: cortex-a9
cores: 2
vector_bits: 128
toolchain:
  cc: arm-linux-gnueabihf-gcc
accel:
  driver: sim
  clock_mhz: 100
  dma_bytes_per_cycle: 8
  dma_latency_cycles: 64
"""


@pytest.fixture
def write(tmp_path):
    def write(extra: str = "", name: str = "fpga"):
        """The base profile with ``key: value;...`` set in its accel section."""
        data = yaml.safe_load(BASE.format(name=name))
        for item in filter(None, extra.split(";")):
            data["accel"].update(yaml.safe_load(item))
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    return write


def error_of(path) -> str:
    with pytest.raises(PackagerError) as info:
        check_board_file(path)
    return str(info.value)


def test_defaults_are_the_vta_core(write):
    t = AccelTarget.of(check_board_file(write()))
    assert (t.driver, t.batch, t.block_in, t.block_out) == ("sim", 1, 16, 16)
    assert (t.uop_depth, t.inp_depth, t.wgt_depth, t.acc_depth) == (8192, 2048, 1024, 2048)
    assert (t.clock_mhz, t.dma_bytes_per_cycle, t.dma_latency_cycles) == (100.0, 8.0, 64)


def test_fractional_clock_and_dma_figures(write):
    t = AccelTarget.of(check_board_file(write("clock_mhz: 142.5;dma_bytes_per_cycle: 3.5")))
    assert (t.board, t.clock_mhz, t.dma_bytes_per_cycle) == ("fpga", 142.5, 3.5)


@pytest.mark.parametrize(
    "extra, message",
    [
        ("block_in: 12", "accel.block_in: 12 is not a power of two"),
        ("block_out: 24", "accel.block_out: 24 is not a power of two"),
        ("batch: 2", "accel.batch: 2: only batch 1 is supported"),
        (
            "uop_buffer_kib: 64",
            "accel.uop_buffer_kib: 64 KiB is 16384 entries of 4 bytes, more than the 13-bit "
            "index fields of the instruction set address (8192); at most 32 KiB",
        ),
        ("inp_buffer_kib: 64", "accel.inp_buffer_kib: 64 KiB is 4096 entries of 16 bytes"),
        ("wgt_buffer_kib: 512", "10-bit index fields of the instruction set address (1024)"),
        ("acc_buffer_kib: 256", "accel.acc_buffer_kib: 256 KiB is 4096 entries of 64 bytes"),
        ("driver: pcie", "accel.driver: 'pcie' is not one of sim, uio"),
        ("uio_device: /dev/uio0", "accel.uio_device: only for driver 'uio', not 'sim'"),
        ("dma_bytes_per_cycle: 0", "accel.dma_bytes_per_cycle: 0 is less than the minimum 1"),
        ("clock_mhz: fast", "accel.clock_mhz: expected a number, got str"),
        ("wgt_kib: 4", "accel: unknown key 'wgt_kib'"),
    ],
)
def test_bad_accel_fields_are_named(write, extra, message):
    assert message in error_of(write(extra))


def test_bigger_blocks_shrink_the_depths(write):
    """A 32x32 core's wgt tiles are 1 KiB: 256 KiB is 256 of them, within the 10 bits."""
    t = AccelTarget.of(check_board_file(write("block_in: 32;block_out: 32")))
    assert (t.inp_depth, t.wgt_depth, t.acc_depth) == (1024, 256, 1024)


def test_uio_needs_its_device(write):
    assert "accel.uio_device: driver 'uio' needs the device" in error_of(write("driver: uio"))


def test_no_accel_section_no_accel_target(monkeypatch):
    board = load_board("host")
    assert [t.family for t in targets_of(board)] == ["cpu"]
    with pytest.raises(PackagerError, match="board 'host' has no accelerator"):
        AccelTarget.of(board)


@pytest.mark.parametrize("name, driver", [("accel-sim", "sim"), ("pynq-z2", "uio")])
def test_shipped_accel_boards(name, driver):
    board = load_board(name)
    assert [t.family for t in targets_of(board)] == ["cpu", "accel"]
    t = AccelTarget.of(board)
    assert t.driver == driver
    assert t.fingerprint() == {
        "family": "accel",
        "gemm": [1, 16, 16],
        "buffers": [32768, 32768, 262144, 131072],
        "clock_mhz": 100.0,
        "dma": [8.0, 64],
    }


def test_boards_show_prints_the_accel_section():
    out = subprocess.run(
        [sys.executable, "-m", "packager.cli", "boards", "--show", "pynq-z2"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    for line in ("accel.driver: uio", "accel.uio_device: /dev/uio0", "accel.block_in: 16",
                 "accel.dma_bytes_per_cycle: 8", "accel.dma_latency_cycles: 64"):  # fmt: skip
        assert line in out.splitlines()


def test_schema_lists_the_accel_keys():
    keys = boards.schema_keys()
    assert "accel.uio_device" in keys and "accel.acc_buffer_kib" in keys
