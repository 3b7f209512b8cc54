#!/usr/bin/env bash
# The main job: install, build, then train the tutorial CNN on Fashion-MNIST for 10 epochs.
# Extra arguments go to dist-train (e.g. scripts/train.sh --epochs 2).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
exec "${BUILD_DIR:-build}/tools/dist-train" "$@"
