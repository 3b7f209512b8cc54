# Sourced by the bench/compare_*.sh scripts that time two builds alternately (A B A B ...) so
# both see the same machine load. The sourcing script defines `measure DIR NAME`, which prints
# one number, then calls `compare_alternating BEFORE AFTER ROUNDS NAME...`: for each NAME it
# prints every run, the medians and after / before.

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

compare_alternating() {
  local before=$1 after=$2 rounds=$3
  shift 3
  echo "CPU: $(lscpu | sed -nE 's/^Model name: +//p'); flags: $(lscpu | sed -nE 's/^Flags: +//p' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|fma)$' | tr '\n' ' ')"
  local name i ma mb
  for name in "$@"; do
    local a=() b=()
    for ((i = 0; i < rounds; i++)); do
      a+=("$(measure "$before" "$name")")
      b+=("$(measure "$after" "$name")")
    done
    ma=$(median "${a[@]}") mb=$(median "${b[@]}")
    echo "$name: before ${a[*]} | after ${b[*]} | medians $ma -> $mb, after/before $(echo "$mb / $ma" | bc -l | cut -c1-5)"
  done
}
