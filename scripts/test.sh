#!/usr/bin/env bash
# Installs what is needed, then runs the whole test suite (lint and format checks included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
workers=$(python3 -c "import os; print(max(2, os.cpu_count() or 2))")
python3 -m pytest -q -n "$workers" --durations=15 "$@"
