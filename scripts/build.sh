#!/usr/bin/env bash
# Installs the dependencies (if missing) and builds everything into ${BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) -eq 0 ]]; then
  scripts/install-deps.sh
else
  sudo scripts/install-deps.sh
fi
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)"
