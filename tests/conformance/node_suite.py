"""The ONNX backend node suite (onnx.backend.test.BackendTest), run through PackagerBackend.

Shared by the test module and by the script that rewrites the expected-failure list.
"""

from __future__ import annotations

import traceback
import unittest
from pathlib import Path

import onnx.backend.test

from packager.backend import PackagerBackend
from packager.errors import PackagerError

EXPECTED = Path(__file__).with_name("node_expected_failures.txt")

_backend_test = onnx.backend.test.BackendTest(PackagerBackend, __name__)
_backend_test.include(r"_cpu$")
NodeCase = _backend_test.test_cases["OnnxBackendNodeModelTest"]
NAMES = sorted(n for n in dir(NodeCase) if n.startswith("test_") and n.endswith("_cpu"))


def run_case(name: str) -> tuple[str, str]:
    """('pass' | 'rejected' | 'wrong' | 'error', detail) for one node case.

    rejected: the packager refused the model with a clear error (an unsupported op,
    dtype or attribute); wrong: it ran and gave a different answer; error: anything else.
    """
    case = NodeCase(name)
    try:
        getattr(case, name)()
    except unittest.SkipTest as e:
        return "error", f"skipped: {e}"
    except PackagerError as e:
        return "rejected", str(e).splitlines()[0][:200]
    except AssertionError as e:
        return "wrong", str(e).strip().splitlines()[0][:200] if str(e).strip() else "mismatch"
    except Exception as e:  # noqa: BLE001 - classify, keep the message
        last = traceback.format_exception_only(type(e), e)[-1].strip()
        return "error", last.splitlines()[0][:200]
    return "pass", ""


def load_expected() -> dict[str, str]:
    """name -> reason of every case expected to fail."""
    out = {}
    for line in EXPECTED.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            out[name] = reason.strip()
    return out
