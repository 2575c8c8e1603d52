#!/usr/bin/env bash
# Installs what is needed, then runs lint, format checks and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check packager tests bench examples
ruff format --check packager tests bench examples
workers=$(python3 -c "import os; print(max(2, os.cpu_count() or 2))")
python3 -m pytest -q -n "$workers" --durations=15 "$@"
