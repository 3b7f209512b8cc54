#!/usr/bin/env bash
# Times one of the README's two commands on a fresh Debian 12 system: a minimal bookworm made
# with debootstrap (no build tools, no packages of the project), this repository cloned into it,
# then the command run inside it with chroot, every output line stamped with the seconds since
# the start. Prints the phases: install (apt), build, run (train.sh: until the first epoch's
# line and until the end).
#
#   bench/fresh_machine.sh train|test [WORK_DIR]   (as root; WORK_DIR default /tmp/fresh-debian)
#
# Needs debootstrap and network access to the Debian archive (the only download, as on a real
# fresh machine). The chroot shares the host's kernel, /proc, /sys, /dev and /dev/shm.
set -euo pipefail
command=${1:-}
fail() {
  echo "$0: $*" >&2
  exit 2
}
[[ $command == train || $command == test ]] || fail "usage: $0 train|test [WORK_DIR]"
[[ $(id -u) -eq 0 ]] || fail "run as root (debootstrap and chroot)"
command -v debootstrap >/dev/null || fail "needs debootstrap (apt-get install debootstrap)"
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${2:-/tmp/fresh-debian}
mounts=(proc sys dev dev/pts dev/shm)

cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    mountpoint -q "$root/${mounts[i]}" && umount -l "$root/${mounts[i]}"
  done
  return 0
}
trap cleanup EXIT

if [[ -e $root ]]; then
  echo "$0: $root exists; remove it first (rm -rf $root) so that the system is fresh" >&2
  exit 2
fi
echo "fresh_machine: debootstrap bookworm into $root"
if ! debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian \
  >"$root.debootstrap.log" 2>&1; then
  tail -20 "$root.debootstrap.log" >&2
  exit 1
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
cat >"$root/etc/apt/sources.list" <<'SOURCES'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES
for m in "${mounts[@]}"; do
  mkdir -p "$root/$m"
  mount --bind "/$m" "$root/$m"
done
git clone -q "$repo" "$root/root/distribute"

script=scripts/train.sh
[[ $command == test ]] && script=scripts/test.sh
log=$root.$command.log
echo "fresh_machine: running bash $script in the chroot (log: $log)"
start_ms=$(date +%s%3N)
set +e
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin CI=true \
  bash -c "cd /root/distribute && bash $script" </dev/null 2>&1 |
  while IFS= read -r line; do
    elapsed=$(($(date +%s%3N) - start_ms))
    printf '%5d.%d %s\n' $((elapsed / 1000)) $((elapsed % 1000 / 100)) "$line"
  done >"$log"
status=${PIPESTATUS[0]}
set -e
# Phases by the lines that start them: CMake's configure ends the install, the first epoch's
# line (or the first test line) comes after the build.
stamp() { grep -m1 -E "^ *[0-9.]+ $1" "$log" | awk '{print $1}'; }
installed=$(stamp '-- The CXX compiler identification')
built=$(stamp '(Strategy: |== tests that run)')
first_epoch=$(stamp 'Epoch 1: ')
end=$(tail -n 1 "$log" | awk '{print $1}')
echo "fresh_machine: $command exit $status; seconds from the start: install done ${installed:-?}," \
  "build done ${built:-?}, first epoch's line ${first_epoch:-?}, end ${end:-?}"
exit "$status"
