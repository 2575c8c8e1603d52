#!/usr/bin/env bash
# The main job: package the example model for the host board, build it, run it, and
# show the bundle's self-test passing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
out=out/tiny_cnn
packager build examples/tiny_cnn.onnx --board host -o "$out"
packager run "$out" --board host --input input="$out/selftest/input_0.npy" \
  --output-dir out/tiny_cnn_results --repeat 20
"$out/build/run_bundle" "$out" --selftest
