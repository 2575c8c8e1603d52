"""The timing driver checks every candidate first, then times the ones that passed in
rounds, one sample of each per round from a new first one, so a slow phase of a shared
or throttling board falls on every candidate's samples alike."""

from __future__ import annotations

import subprocess

from packager.boards import load_board
from packager.bundle import C_RUNTIME
from packager.codegen.build import INCLUDE
from packager.codegen.c import codegen_c
from packager.tune.driver import driver_source, parse_output
from packager.tune.tasks import default_func, lower_config

from .test_tune_host import direct_task

# A candidate that writes nothing: its output keeps the driver's NaN fill, a wrong answer.
SILENT = "#include <stdint.h>\nint32_t pk_silent(void* const* args) { (void)args; return 0; }\n"


def test_candidates_are_checked_then_timed_in_rotating_rounds(conv_onnx, tmp_path):
    task = direct_task(conv_onnx, load_board("host"))
    ref = default_func(task)
    ref.name = "pk_ref"
    sources = {"pk_ref": codegen_c(ref), "pk_silent": SILENT}
    for name in ("pk_c0", "pk_c1", "pk_c2"):
        sources[name] = codegen_c(lower_config(task, None, name))
    ids = {10: "pk_c0", 11: "pk_silent", 12: "pk_c1", 13: "pk_c2"}
    sources["driver"] = driver_source(ref, len(task.node.inputs), ids)
    files = []
    for name, text in sources.items():
        (tmp_path / f"{name}.c").write_text(text)
        files.append(str(tmp_path / f"{name}.c"))
    files += [str(C_RUNTIME / "src" / f) for f in ("pk_parallel.c", "pk_scratch.c")]
    exe = tmp_path / "driver"
    cmd = ["cc", "-O1", "-std=c99", f"-I{INCLUDE}", *files, "-lm", "-o", str(exe)]
    subprocess.run(cmd, check=True)
    out = subprocess.run(
        [str(exe), "0.001", "3", "0", "1", "2", "3"], capture_output=True, text=True, check=True
    ).stdout
    starts = [int(x.split()[1]) for x in out.splitlines() if x.startswith("S ")]
    # each checked once in the order given, then rounds over the three that passed
    assert starts == [10, 11, 12, 13, 10, 12, 13, 12, 13, 10, 13, 10, 12]
    results, last = parse_output(out)
    assert results[11] == ("wrong_answer", [])
    assert all(results[i][0] is None and len(results[i][1]) == 3 for i in (10, 12, 13))
    assert all(t > 0 for i in (10, 12, 13) for t in results[i][1]) and last == 12
