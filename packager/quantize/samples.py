"""Calibration inputs: read from a directory of .npy files, or random for testing.

Layout of ``--calib DIR``:
  a model with one input:  DIR/*.npy, one file per sample (or per batch, where the input's
                           batch dimension is symbolic); DIR/<input name>/*.npy also works
  several inputs:          DIR/<input name>/*.npy for each input; the files of one name
                           across the subdirectories form one sample (a.npy, b.npy, ...)
Each array must have the input's element type and rank, and its size in every fixed
dimension (a symbolic dimension takes any size).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from ..errors import PackagerError

Sample = dict[str, np.ndarray]
RANDOM = re.compile(r"random:(\d+)$")


def model_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs a caller feeds (initializers listed as inputs are not among them)."""
    inits = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in inits]


def _dims(v: onnx.ValueInfoProto) -> list[int | None]:
    """Fixed sizes, None where a dimension is symbolic or unknown."""
    return [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]


def _dtype(v: onnx.ValueInfoProto) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type))


def _show(dims: list[int | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _load(path: Path, v: onnx.ValueInfoProto) -> np.ndarray:
    try:
        a = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise PackagerError(f"--calib {path}: not a readable .npy file ({e})") from None
    want, dtype = _dims(v), _dtype(v)
    fits = a.ndim == len(want) and all(
        w is None or w == g for w, g in zip(want, a.shape, strict=False)
    )
    if not fits or a.dtype != dtype:
        raise PackagerError(
            f"--calib {path}: input '{v.name}' takes {dtype}{_show(want)}; the file holds "
            f"{a.dtype}{list(a.shape)}"
        )
    return a


def _npy_files(d: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted(d.glob("*.npy")) if p.is_file()}


def _input_files(root: Path, inputs: list[onnx.ValueInfoProto]) -> dict[str, dict[str, Path]]:
    """Per input, its files by name; errors name what is missing."""
    if len(inputs) == 1 and not (root / inputs[0].name).is_dir():
        files = {inputs[0].name: _npy_files(root)}
    else:
        missing = [v.name for v in inputs if not (root / v.name).is_dir()]
        if missing:
            raise PackagerError(
                f"--calib {root}: no subdirectory for input(s) {', '.join(missing)}; a model "
                f"with several inputs takes DIR/<input name>/*.npy per input"
            )
        files = {v.name: _npy_files(root / v.name) for v in inputs}
    for name, found in files.items():
        if not found:
            where = root / name if len(files) > 1 or (root / name).is_dir() else root
            raise PackagerError(f"--calib {where}: no .npy files for input '{name}'")
    first, *rest = files.items()
    for name, found in rest:
        if set(found) != set(first[1]):
            odd = sorted(set(found) ^ set(first[1]))[0]
            raise PackagerError(
                f"--calib {root}: inputs '{first[0]}' and '{name}' have different file names "
                f"(e.g. {odd}); a sample is the files of one name across the subdirectories"
            )
    return files


def directory_samples(root: Path, model: onnx.ModelProto) -> list[Sample]:
    """Every sample of DIR, all checked (and loaded) before any calibration run."""
    if not root.is_dir():
        raise PackagerError(f"--calib {root}: no such directory (give DIR or random:N)")
    inputs = model_inputs(model)
    files = _input_files(root, inputs)
    names = sorted(next(iter(files.values())))
    return [{v.name: _load(files[v.name][n], v) for v in inputs} for n in names]


def _random(rng: np.random.Generator, v: onnx.ValueInfoProto) -> np.ndarray:
    shape, dtype = [d or 1 for d in _dims(v)], _dtype(v)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 10, shape).astype(dtype)


def random_samples(count: int, model: onnx.ModelProto, seed: int = 0) -> list[Sample]:
    """Standard normal floats (integers in [0, 10)), symbolic dimensions set to 1."""
    rng = np.random.default_rng(seed)
    inputs = model_inputs(model)
    return [{v.name: _random(rng, v) for v in inputs} for _ in range(count)]


def parse_calib(text: str) -> int | Path:
    """random:N as N, anything else as a directory."""
    m = RANDOM.match(text)
    if m:
        if int(m.group(1)) < 1:
            raise PackagerError(f"--calib {text}: N must be at least 1")
        return int(m.group(1))
    if text.startswith("random"):
        raise PackagerError(f"--calib {text}: expected random:N with N a positive integer")
    return Path(text)
