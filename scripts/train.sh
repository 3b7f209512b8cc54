#!/usr/bin/env bash
# The main job: install what it needs, build the library and its tools (no tests), then train
# the tutorial CNN on Fashion-MNIST for 10 epochs under MirroredStrategy.
# Extra arguments go to dist-train (e.g. scripts/train.sh --epochs 2).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
exec "${BUILD_DIR:-build}/tools/dist-train" "$@"
