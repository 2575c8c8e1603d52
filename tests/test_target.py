"""The Target a board profile makes: its families and the facts each carries, and the errors a
bad opencl section gives (naming the file and the field)."""

import json

import pytest

from packager import boards
from packager.boards import load_board
from packager.errors import PackagerError
from packager.lowering import schedule_for
from packager.ops.registry import ScheduleContext
from packager.target import AccelTarget, CpuTarget, OpenCLTarget, Target, targets_of

from .test_boards import VALID, error_of, profiles, write  # noqa: F401 (profiles: a fixture)

OPENCL = """\
opencl:
  device: Test-GPU
  compute_units: 8
  max_work_group_size: 512
  max_work_item_sizes: [512, 512, 64]
  local_memory_kib: 64
  version: "2.0"
"""


@pytest.fixture(autouse=True)
def shipped(monkeypatch):
    monkeypatch.delenv(boards.BOARDS_DIR_ENV, raising=False)


def test_host_is_a_cpu_target_only():
    board = load_board("host")  # detect: true (tests/test_host_detect.py checks the facts)
    (cpu,) = targets_of(board)
    assert cpu == CpuTarget(
        board="host",
        arch=board.arch,
        model="native",
        cpu_name=board.cpu_name,
        cpu_id=board.cpu_id,
        features=board.features,
        isa_flags=("-march=native",),
        vector_bits=board.vector_bits,
        cores=board.cores,
        l1d_bytes=board.cache.l1d_kib * 1024,
        l2_bytes=board.cache.l2_kib * 1024,
        l3_bytes=board.cache.l3_kib * 1024,
    )
    assert cpu.family == "cpu" and cpu.lanes == board.vector_bits // 32


def test_rpi4_cpu_target_has_its_caches():
    (cpu,) = targets_of(load_board("rpi4"))
    assert (cpu.arch, cpu.model, cpu.isa_flags) == ("aarch64", "cortex-a72", ("-mcpu=cortex-a72",))
    assert (cpu.vector_bits, cpu.lanes, cpu.cores, cpu.big_cores) == (128, 4, 4, ())
    assert (cpu.l1d_bytes, cpu.l2_bytes) == (32 * 1024, 1024 * 1024)


def test_rk3399_has_its_mali_gpu():
    board = load_board("rk3399")
    cpu, gpu = targets_of(board)
    assert cpu == Target.cpu(board) and gpu == Target.opencl(board)
    assert (cpu.cores, cpu.big_cores) == (2, (4, 5))
    assert gpu == OpenCLTarget(
        board="rk3399",
        device="Mali-T860",
        compute_units=4,
        max_work_group_size=256,
        max_work_item_sizes=(256, 256, 256),
        local_memory_bytes=32 * 1024,
        preferred_vector_width=4,
        fp16=True,
        version="1.2",
    )
    assert gpu.family == "opencl"


def test_every_shipped_profile_makes_its_targets():
    for board in boards.list_boards():
        families = [t.family for t in targets_of(board)]
        expected = ["cpu"] + ["opencl"] * bool(board.opencl) + ["accel"] * bool(board.accel)
        assert families == expected, board.name
        assert Target.for_family(board, "cpu") == CpuTarget.of(board)


def test_a_board_without_opencl_refuses_an_opencl_target():
    with pytest.raises(PackagerError, match="board 'rpi4' has no opencl section in its profile"):
        Target.opencl(load_board("rpi4"))


def test_accel_family_is_refused_clearly():
    board = load_board("rk3399")
    with pytest.raises(
        PackagerError, match="board 'rk3399' has no accelerator .no 'accel' section"
    ):
        Target.for_family(board, "accel")
    assert AccelTarget.family == "accel"
    with pytest.raises(PackagerError, match="unknown target family 'gpu' .known: cpu, opencl"):
        Target.for_family(board, "gpu")


def test_opencl_section_defaults(profiles):  # noqa: F811
    board = boards.check_board_file(write(profiles, "gpu", VALID.format(name="gpu") + OPENCL))
    gpu = Target.opencl(board)
    assert (gpu.preferred_vector_width, gpu.fp16) == (1, False)
    assert (gpu.local_memory_bytes, gpu.max_work_item_sizes) == (65536, (512, 512, 64))


@pytest.mark.parametrize(
    "old, new, field, problem",
    [
        ("compute_units: 8", "compute_units: 0", "compute_units", "0 is less than the minimum 1"),
        (
            "compute_units: 8",
            "compute_units: eight",
            "compute_units",
            "expected an integer, got str",
        ),
        ("  local_memory_kib: 64\n", "", "", "missing required key 'local_memory_kib'"),
        ('version: "2.0"', 'version: "1.3"', "version", "'1.3' is not one of 1.1, 1.2, 2.0"),
        ('version: "2.0"', "version: 2.0", "version", "expected a string, got float"),
        ("  device:", "  fp32: true\n  device:", "", "unknown key 'fp32'"),
        ("[512, 512, 64]", "[512, 512, 1024]", "max_work_item_sizes[2]", "1024 is more than"),
        ("[512, 512, 64]", "[8, 8, 8, 8]", "max_work_item_sizes", "4 dimensions, OpenCL has at"),
    ],
    ids=["min", "type", "missing", "version", "unquoted", "unknown", "item", "dims"],
)
def test_bad_opencl_section_names_file_and_field(profiles, old, new, field, problem):  # noqa: F811
    text = VALID.format(name="gpu") + OPENCL.replace(old, new)
    message = error_of(write(profiles, "gpu", text))
    where = ".".join(["opencl", field] if field else ["opencl"])
    assert message.startswith(f"board_profiles/gpu.yaml: {where}: "), message
    assert problem in message, message


def test_schedule_context_reads_the_target():
    target = Target.cpu(load_board("rpi4"))
    ctx = ScheduleContext([], None, {}, None, target)
    assert ctx.target is target and ctx.lanes == 4


def test_templates_are_chosen_by_the_target_family():
    from packager import te

    x = te.placeholder((64, 64), "float32", "x")
    y = te.compute((64, 64), lambda i, j: x[i, j] + 1.0, "y")
    sch = schedule_for([y], (None, {}, y), Target.cpu(load_board("rpi4")))
    assert [iv.extent for iv in sch[y].leaf_iter_vars][-1] == 4  # 128-bit vectors: 4 floats
    sch = schedule_for([y], (None, {}, y), CpuTarget(vector_bits=512))
    assert [iv.extent for iv in sch[y].leaf_iter_vars][-1] == 16


def test_fingerprints_name_what_decides_the_fastest_schedule():
    rk = load_board("rk3399")
    cpu = Target.cpu(rk).fingerprint()
    assert cpu == {
        "family": "cpu",
        "arch": "aarch64",
        "model": rk.cpu,
        "cpu_name": None,  # the shipped profile does not say: `packager boards --probe`
        "features": [],
        "isa_flags": [f for f in rk.toolchain.cflags if f.startswith("-m")],
        "vector_bits": rk.vector_bits,
        "cores": rk.cores,
    }
    gpu = Target.opencl(rk).fingerprint()
    assert gpu == {
        "family": "opencl",
        "device": rk.opencl.device,
        "compute_units": 4,
        "version": "1.2",
    }
    assert json.loads(json.dumps(cpu)) == cpu  # records store them as JSON
