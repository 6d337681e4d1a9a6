#!/usr/bin/env bash
# One bench binary, several variants, alternated rounds: the A/B protocol
# of docs/PERF_NOTES.md. Each round runs every variant once, each in a
# process of its own, the order rotated by one from round to round (round 1
# A B C, round 2 B C A, …), and appends the records to OUT with the commit
# field <TAG>-<variant>-r<round>; then `bench ab` prints every variant's
# rounds, median and change against the first variant's.
#
# Usage: [BENCH=.gpu/bench] [ROUNDS=3] [TAG=ab] [TIMEOUT=120] \
#          bash bench/ab_run.sh OUT.jsonl 'COMMON BENCH FLAGS' NAME=SPEC NAME=SPEC …
# NAME is letters, digits and '_'; SPEC is words: BIN=PATH runs the variant on
# that bench binary instead of BENCH (an A/B of two builds), another KEY=VALUE
# with an upper-case KEY is set in the variant's environment, any other word
# is a bench flag. The closing table is printed by the first variant's binary.
#   bash bench/ab_run.sh ab.jsonl '-device cuda -algo masked_implicit_gemm_splitk -memsample=false \
#     -dtypes tf32 -cfgs 8,1024,16;32,1024,4 -modes train' P='-backward params-first' I=
#   bash bench/ab_run.sh ab.jsonl '-device cuda -dtypes fp16 -cfgs 512,128,2' B=FLEXGEMM_TALL_MANY=0 T=
#   bash bench/ab_run.sh ab.jsonl '-device cuda -dtypes tf32 -cfgs 512,128,2' A=BIN=.gpu/a/bench B=BIN=.gpu/b/bench
set -uo pipefail
if (($# < 3)); then
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
out=$1
read -ra common <<< "$2"
shift 2
BENCH=${BENCH:-.gpu/bench}
ROUNDS=${ROUNDS:-3}
TAG=${TAG:-ab}
TIMEOUT=${TIMEOUT:-120}
names=()
specs=()
for v in "$@"; do
  n=${v%%=*}
  [[ $v == *=* && $n =~ ^[A-Za-z0-9_]+$ ]] || { echo "ab_run.sh: variant '$v' is not NAME=SPEC (NAME letters, digits, _)" >&2; exit 2; }
  names+=("$n")
  specs+=("${v#*=}")
done
[[ $TAG =~ ^[A-Za-z0-9_.]+$ ]] || { echo "ab_run.sh: TAG '$TAG' must be letters, digits, '_' or '.'" >&2; exit 2; }
nv=${#names[@]}
# variant_bin SPEC: the binary of a variant (its BIN= word, else BENCH).
variant_bin() {
  local w b=$BENCH
  for w in $1; do [[ $w == BIN=* ]] && b=${w#BIN=}; done
  echo "$b"
}
rc=0
for ((r = 1; r <= ROUNDS; r++)); do
  for ((i = 0; i < nv; i++)); do
    k=$(((i + r - 1) % nv))
    envs=()
    flags=()
    bin=$(variant_bin "${specs[k]}")
    read -ra words <<< "${specs[k]}"
    for w in "${words[@]}"; do
      if [[ $w == BIN=* ]]; then continue; fi
      if [[ $w =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$w"); else flags+=("$w"); fi
    done
    echo "ab_run.sh: round $r ${names[k]}: $bin ${envs[*]} ${flags[*]}" >&2
    env "${envs[@]}" timeout "$TIMEOUT" "$bin" "${common[@]}" "${flags[@]}" -o "$out" -commit "$TAG-${names[k]}-r$r" > /dev/null ||
      { echo "ab_run.sh: round $r ${names[k]} exited $?" >&2; rc=1; }
  done
done
"$(variant_bin "${specs[0]}")" ab -base "${names[0]}" "$out" || rc=1
exit $rc
