#!/usr/bin/env bash
# FlexGEMM (the anchor) and FlexGEMM-Go side by side on one GPU.
#
# Here (dev machine, Go + CUDA 11.8 headers):   bash bench/gpu_run.sh build
#   builds .gpu/bench with the CUDA engine (-tags cudaext; .gpu/ is ignored
#   via .git/info/exclude) and checks that .anchor/ (a copy of
#   /work/shared/anchor, also ignored) is present.
# There (GPU machine, repository root, .gpu and .anchor carried):
#   bash bench/gpu_run.sh
#   1. ours: one untimed run (the engine's first open), then
#      FlexGEMM's fp16 grid (train + infer), one process per config,
#      then tf32 and bf16 for 64,1024,2 and 256,256,2;
#   2. FlexGEMM: its pre-tuned autotune cache installed, then the fp16 grid
#      (configs a timed-out grid step did not reach rerun one per process),
#      bf16 and tf32 for the same two configs (flexgemm_bench.py);
#   3. with what is left of the budget, ours again on the two configs in
#      fp16 with kernel maps built on the host (impl flexgemm-go/kmap-cpu),
#      to show what the GPU map builder saves;
#   4. the ratio table (FlexGEMM ms / our ms), a bar chart, and the
#      README's table with the geometric means (compare -readme).
# Every step runs under timeout, capped by what is left of BUDGET seconds
# (default 440), so a hang or a slow first compile cannot eat the call;
# ours runs first and does not depend on FlexGEMM. Files in $OUT (or
# /tmp/flexgemm-bench), 8 in all: env.txt, ours.jsonl, ours.log,
# flexgemm.jsonl, flexgemm.log, compare.md, ratios.png, readme.md.
# Knobs (environment): BUDGET, OURS_WARM_TIMEOUT (150: the untimed first
# run, which JIT-compiles the Hopper PTX under FLEXGEMM_HOPPER_PTX=1), OURS_CFG_TIMEOUT (60), OURS_GRID_TIMEOUT
# (140), OURS_EXTRA_TIMEOUT (40), FLEX_FP16_TIMEOUT (150), FLEX_CFG_TIMEOUT
# (60: each fp16 config the grid step did not reach, rerun on its own),
# FLEX_BF16_TIMEOUT (50), FLEX_TF32_TIMEOUT (90), OURS_KMAP_CPU_TIMEOUT (30), GRID and PAIR
# (config lists; unset: the defaults below, empty: none, so GRID= PAIR=256,256,2 runs that one
# config's tf32 and bf16 rows alone), KMAP_CPU=0 skips the host-map runs, FLEX=0 skips
# FlexGEMM.
set -o pipefail
if [[ "${1:-}" == build ]]; then
  cd "$(dirname "$0")/.." || exit 1
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
  grep -qx '/.anchor/' .git/info/exclude 2>/dev/null || echo '/.anchor/' >> .git/info/exclude
  mkdir -p .gpu
  go build -tags cudaext -ldflags="-s -w -X main.buildCommit=$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo -dirty)" -o .gpu/bench ./bench || exit 1
  if [[ ! -f .anchor/flexgemm_bench.py ]]; then
    echo "note: .anchor/ is missing; copy it first: cp -r /work/shared/anchor .anchor"
  fi
  echo "built .gpu/bench ($(du -h .gpu/bench | cut -f1)); on the GPU machine (carry .gpu and .anchor): bash bench/gpu_run.sh"
  exit 0
fi

cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/flexgemm-bench}; mkdir -p "$OUT"
BUDGET=${BUDGET:-440}
GRID=${GRID-"8,1024,16 16,1024,8 32,1024,4 64,1024,2 128,512,2 256,256,2 512,128,2 1024,64,2"}
PAIR=${PAIR-"64,1024,2;256,256,2"}
BENCH=.gpu/bench
ALGO=masked_implicit_gemm_splitk # FlexGEMM's MASKED_IMPLICIT_GEMM_SPLITK

# step NAME TIMEOUT LOG CMD…: runs CMD under timeout (capped by what is
# left of BUDGET), appending its output to LOG; says how it ended.
step() {
  local name=$1 t=$2 log=$3; shift 3
  local left=$((BUDGET - SECONDS))
  if ((left < 5)); then
    echo "== $name: skipped, the budget of ${BUDGET}s is spent"
    return 99
  fi
  ((t > left)) && t=$left
  local t0=$SECONDS
  echo "== $name (timeout ${t}s)" | tee -a "$log"
  timeout -k 10 "$t" "$@" >> "$log" 2>&1
  local rc=$?
  local how=""
  ((rc == 124 || rc == 137)) && how=" TIMED OUT"
  echo "   rc=$rc$how after $((SECONDS - t0))s" | tee -a "$log"
  return $rc
}

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' 2>&1
  # The checkout's HEAD here can lag the tree it runs on (a device copy of
  # the working tree may carry an older .git, session 42): the records'
  # commit is the bench binary's, below.
  echo "checkout HEAD $(git rev-parse HEAD 2>/dev/null) (may lag the carried tree)"
  echo "bench binary $("$BENCH" version 2>&1)"  # the commit its records carry
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# 1. Ours. One untimed run first: the engine's first open. The Hopper
# modules load as embedded sm_90a cubins, but with FLEXGEMM_HOPPER_PTX=1
# the driver JIT-compiles their PTX there (80-100 s on a fresh machine,
# cached for later processes), which would otherwise eat the first
# configs' timeouts (session 16, call 5: RES 8 and 16 timed out at 20 s).
if [[ -x $BENCH ]]; then
  warm=$(mktemp)
  step "ours warm-up (first open, not recorded)" "${OURS_WARM_TIMEOUT:-150}" "$OUT/ours.log" \
    $BENCH -device cuda -cfgs 8,1024,16 -dtypes fp16 -modes infer -algo $ALGO -warmup 0 -repeats 1 -iters 1 -memsample=false -o "$warm"
  rm -f "$warm"
  phase_end=$((SECONDS + ${OURS_GRID_TIMEOUT:-140}))
  for cfg in $GRID; do
    t=$((phase_end - SECONDS)); ((t > ${OURS_CFG_TIMEOUT:-60})) && t=${OURS_CFG_TIMEOUT:-60}
    if ((t < 5)); then echo "== ours fp16 $cfg: skipped, the phase's time is spent"; continue; fi
    step "ours fp16 $cfg" "$t" "$OUT/ours.log" \
      $BENCH -device cuda -cfgs "$cfg" -dtypes fp16 -algo $ALGO -o "$OUT/ours.jsonl"
  done
  [[ -n $PAIR ]] && step "ours tf32,bf16 $PAIR" "${OURS_EXTRA_TIMEOUT:-40}" "$OUT/ours.log" \
    $BENCH -device cuda -cfgs "$PAIR" -dtypes tf32,bf16 -algo $ALGO -o "$OUT/ours.jsonl"
  grep -E "^bench: failed|panic" "$OUT/ours.log" | head -20
else
  echo "== ours: $BENCH is missing (build it on the dev machine: bash bench/gpu_run.sh build, and carry .gpu)"
fi

# flex_missing DTYPE CFG…: the configs RES,C,L without a FlexGEMM record of
# DTYPE (either mode) in $OUT/flexgemm.jsonl.
flex_missing() {
  python3 - "$OUT/flexgemm.jsonl" "$@" <<'PY'
import json, sys
path, dtype, cfgs = sys.argv[1], sys.argv[2], sys.argv[3:]
have = set()
try:
    for line in open(path):
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("dtype") == dtype:
                have.add("%d,%d,%d" % (r["RES"], r["C"], r["L"]))
except OSError:
    pass
print(" ".join(c for c in cfgs if c not in have))
PY
}

# 2. FlexGEMM.
if [[ "${FLEX:-1}" == 1 && -f .anchor/flexgemm_bench.py ]]; then
  mkdir -p ~/.flex_gemm && cp .anchor/flexgemm_autotune_h200.json ~/.flex_gemm/autotune_cache.json
  export PYTHONUNBUFFERED=1
  [[ -n $GRID ]] && step "flexgemm fp16 grid" "${FLEX_FP16_TIMEOUT:-150}" "$OUT/flexgemm.log" \
    env CFGS="${GRID// /;}" python3 .anchor/flexgemm_bench.py "$OUT/flexgemm.jsonl" fp16
  # A grid cut short (cold Triton compiles can take minutes) is finished
  # one config per process, each under FLEX_CFG_TIMEOUT, budget permitting.
  for cfg in $(flex_missing fp16 $GRID); do
    step "flexgemm fp16 $cfg (missing from the grid)" "${FLEX_CFG_TIMEOUT:-60}" "$OUT/flexgemm.log" \
      env CFGS="$cfg" python3 .anchor/flexgemm_bench.py "$OUT/flexgemm.jsonl" fp16
  done
  if [[ -n $PAIR ]]; then
    step "flexgemm bf16 $PAIR" "${FLEX_BF16_TIMEOUT:-50}" "$OUT/flexgemm.log" \
      env CFGS="$PAIR" python3 .anchor/flexgemm_bench.py "$OUT/flexgemm.jsonl" bf16
    step "flexgemm tf32 $PAIR (not pre-tuned: autotunes)" "${FLEX_TF32_TIMEOUT:-90}" "$OUT/flexgemm.log" \
      env CFGS="$PAIR" python3 .anchor/flexgemm_bench.py "$OUT/flexgemm.jsonl" tf32
  fi
  grep -E "Error|Traceback|error:" "$OUT/flexgemm.log" | head -10
else
  echo "== flexgemm: skipped (FLEX=0 or .anchor/ not carried)"
fi

# 3. Ours with kernel maps built on the host, with what is left of the
# budget: how much the GPU map builder saves.
if [[ -x $BENCH && "${KMAP_CPU:-1}" == 1 && -n $PAIR ]]; then
  step "ours fp16 $PAIR, kernel maps built on the host" "${OURS_KMAP_CPU_TIMEOUT:-30}" "$OUT/ours.log" \
    $BENCH -device cuda -kmap cpu -impl flexgemm-go/kmap-cpu -cfgs "$PAIR" -dtypes fp16 -algo $ALGO -o "$OUT/ours.jsonl"
fi

# 4. The ratio table last.
count() { local n; n=$(grep -c '^{' "$1" 2>/dev/null); echo "${n:-0}"; }
echo "== ours: $(count "$OUT/ours.jsonl") records, flexgemm: $(count "$OUT/flexgemm.jsonl") records; total ${SECONDS}s"
grep -m1 "kernel maps:" "$OUT/ours.log" 2>/dev/null
if [[ -x $BENCH && -s "$OUT/ours.jsonl" && -s "$OUT/flexgemm.jsonl" ]]; then
  $BENCH compare -png "$OUT/ratios.png" -target 1.5 "$OUT/ours.jsonl" "$OUT/flexgemm.jsonl" 2>&1 | tee "$OUT/compare.md"
  $BENCH compare -readme "$OUT/ours.jsonl" "$OUT/flexgemm.jsonl" > "$OUT/readme.md" 2>&1
else
  echo "nothing to compare"
fi
