#!/usr/bin/env bash
# Fashion-MNIST as a user's data on disk, trained under MultiWorkerMirroredStrategy: the example
# writes it as 8 TFRecord shards of PNG-encoded tf.train.Example records and as an image folder
# (examples/fashion_mnist_to_files.cc), then trains dist-train with two workers from each:
# the shards sharded by file (each worker reads 4 of the 8), the folder sharded by data (every
# worker sees one device's batches and decodes only its rows of them).
#
#   examples/train_from_files.sh [BUILD_DIR] [OUT_DIR] [EPOCHS]
#
# BUILD_DIR defaults to build (scripts/build.sh --all builds the converter and the tools).
set -euo pipefail
build=${1:-build}
out=${2:-/tmp/fashion-mnist-files}
epochs=${3:-2}
for tool in examples/fashion_mnist_to_files tools/dist-train tools/dist-launch; do
  [ -x "$build/$tool" ] || { echo "missing $build/$tool: run scripts/build.sh --all" >&2; exit 2; }
done

if [ ! -f "$out/tfrecord/train-00007-of-00008.tfrecord" ] || [ ! -d "$out/images/test" ]; then
  echo "== writing Fashion-MNIST to $out (TFRecord shards and an image folder)"
  rm -rf "$out"
  "$build/examples/fashion_mnist_to_files" "$out" --shards 8
fi

common=(--strategy multi_worker --epochs "$epochs" --global-batch 128 --no-progress)
echo "== from TFRecord shards, sharded by file"
"$build/tools/dist-launch" --workers 2 -- "$build/tools/dist-train" "${common[@]}" \
  --train-data "tfrecord:$out/tfrecord/train-*.tfrecord" \
  --test-data "tfrecord:$out/tfrecord/test-*.tfrecord" --auto-shard file
echo "== from an image folder, sharded by data"
"$build/tools/dist-launch" --workers 2 -- "$build/tools/dist-train" "${common[@]}" \
  --train-data "images:$out/images/train" --test-data "images:$out/images/test" \
  --auto-shard data
