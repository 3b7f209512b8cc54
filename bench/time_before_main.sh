#!/usr/bin/env bash
# How long dist-train takes before its main, in two parts, against a program that links
# LibTorch only and does nothing (so what is ours shows as the difference):
#   loader       exec to the executable's preinit function (the dynamic loader mapping and
#                relocating some 300 libraries; a signal here still meets the default action)
#   static init  preinit to main (every library's static constructors; a signal here is held
#                for main and ends the job with exit 4)
# Read from strace's timestamps of execve, of the preinit's sigaction(SIGTERM) and of main's
# first call (sigprocmask blocking SIGINT and SIGTERM) in both programs, over N
# runs (default 9), medians; and each program's CPU seconds (user + system) to the end of
# `--help`, without strace. strace slows system calls, not the loader's page faults and
# relocations, which dominate. With DIST_ORDER_LIBRARIES (the default) dist-train loads its
# libraries in build/library_order.rsp's order and dist-train-natural-order in the linker's:
# the difference is the order's (cmake/DistLibraryOrder.cmake). The programs alternate within
# each of the N rounds, so all see the same machine load.
#   bench/time_before_main.sh [BUILD_DIR] [N]
set -euo pipefail
build=${1:-build}
runs=${2:-9}
command -v strace >/dev/null || { echo "strace is needed: apt-get install strace" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/torch_only.cc" <<'CC'
#include <csignal>
#include <torch/torch.h>
// The same two marks dist-train leaves: a signal call from the preinit array, one from main.
static void before_libraries() { signal(SIGTERM, SIG_DFL); }
__attribute__((section(".preinit_array"), used)) static void (*const kMark)() = before_libraries;
int main(int argc, char**) {
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGINT);
  sigprocmask(SIG_BLOCK, &stops, nullptr);
  return argc > 99 ? torch::ones({2}).sum().item<int>() : 0;  // keeps LibTorch linked
}
CC
g++ -O1 "$work/torch_only.cc" -o "$work/torch_only" -I/usr/include/torch/csrc/api/include \
  -ltorch -ltorch_cpu -lc10
# Prints "loader_ms static_init_ms" of one run of "$@".
one_run() {
  strace -tt -e trace=execve,rt_sigaction,rt_sigprocmask "$@" 2>&1 >/dev/null |
    awk '/execve\(/ && !t0 {t0=$1} /rt_sigaction\(SIGTERM/ && !t1 {t1=$1}
         /rt_sigprocmask\(SIG_BLOCK, \[INT TERM\]/ && !t2 {t2=$1}
         function s(x, a) { split(x, a, ":"); return a[1]*3600 + a[2]*60 + a[3] }
         END { printf "%.0f %.0f\n", (s(t1)-s(t0))*1000, (s(t2)-s(t1))*1000 }'
}
# Prints the CPU seconds (user + system) of one run of "$@".
cpu_seconds() {
  local TIMEFORMAT='%U %S' out
  out=$( { time "$@" >/dev/null 2>&1; } 2>&1)
  awk '{printf "%.3f\n", $1 + $2}' <<<"$out"
}
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
programs=("$work/torch_only")
[[ -x $build/tools/dist-train-natural-order ]] &&
  programs+=("$build/tools/dist-train-natural-order --help")
programs+=("$build/tools/dist-train --help")
for ((i = 0; i < runs; ++i)); do
  for k in "${!programs[@]}"; do
    # shellcheck disable=SC2086  # a program and its arguments
    one_run ${programs[k]} >>"$work/times.$k"
    # shellcheck disable=SC2086
    cpu_seconds ${programs[k]} >>"$work/cpu.$k"
  done
done
for k in "${!programs[@]}"; do
  printf '%-26s loader %4s ms   static init %4s ms   CPU %5s s   (medians of %d)\n' \
    "$(basename "${programs[k]%% *}")" "$(cut -d' ' -f1 "$work/times.$k" | median)" \
    "$(cut -d' ' -f2 "$work/times.$k" | median)" "$(median <"$work/cpu.$k")" "$runs"
done
