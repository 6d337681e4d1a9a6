#!/usr/bin/env bash
# One H200 run for the performance work on the convolution path: the GPU
# test suite (must stay green), then our fp16 grid with the per-phase
# breakdown, then a short table.
#
# Here (dev machine, Go + nvcc):   bash cudaext/perf_run.sh build
#   builds .gpu/cudaext.test and .gpu/bench (-tags cudaext, -ldflags='-s -w')
#   and packs both into .gpu/bins.tgz (the only thing to carry; .gpu/ is
#   ignored via .git/info/exclude).
# There (GPU machine, repository root, .gpu/bins.tgz carried):
#   bash cudaext/perf_run.sh
#   a. the full cudaext GPU test suite with FLEXGEMM_CUDA_SYNC=1 (every
#      algorithm × direction × arithmetic × tile against the CPU engine in
#      float64, determinism, maps, profiler);
#   b. our bench, FlexGEMM's fp16 grid, train + infer, masked split-K
#      (the algorithm of bench/results/h200-2026-11-29.jsonl), with -phases;
#   c. the table: before (our rows of 2026-11-29), now, FlexGEMM's rows of
#      2026-11-29 (another run: the ratios are indicative only), and the
#      phase breakdown.
# Files in $OUT (or /tmp/flexgemm-perf), 7: env.txt, test.log, variants.txt,
# ours.jsonl, bench.log, flexgemm-2026-11-29.jsonl, summary.md.
# Knobs: TEST_TIMEOUT (150), BENCH_TIMEOUT (90), GRID, TESTS=0 skips (a).
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
if [[ "${1:-}" == build ]]; then
  bash bench/gpu_run.sh build > /dev/null || exit 1 # .gpu/bench, stamped with the commit
  go test -c -tags cudaext -ldflags='-s -w' -o .gpu/cudaext.test ./cudaext || exit 1
  tar -C .gpu -czf .gpu/bins.tgz cudaext.test bench || exit 1
  echo "built .gpu/bins.tgz ($(du -h .gpu/bins.tgz | cut -f1)); carry .gpu/bins.tgz, run: bash cudaext/perf_run.sh"
  exit 0
fi

OUT=${OUT:-/tmp/flexgemm-perf}; mkdir -p "$OUT"
GRID=${GRID:-"8,1024,16;16,1024,8;32,1024,4;64,1024,2;128,512,2;256,256,2;512,128,2;1024,64,2"}
REF=bench/results/h200-2026-11-29.jsonl
if [[ -f .gpu/bins.tgz ]]; then tar -C .gpu -xzf .gpu/bins.tgz || exit 1; fi
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  git rev-parse HEAD 2>/dev/null || true
  git status --short 2>/dev/null | head -20
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# a. Tests.
test_rc=skipped
if [[ "${TESTS:-1}" == 1 ]]; then
  t0=$SECONDS
  (cd cudaext && FLEXGEMM_TEST_OUT=$OUT FLEXGEMM_REQUIRE_GPU=1 FLEXGEMM_CUDA_SYNC=1 \
    timeout -k 10 "${TEST_TIMEOUT:-150}" ../.gpu/cudaext.test -test.v -test.timeout "$((${TEST_TIMEOUT:-150} - 5))s" > "$OUT/test.log" 2>&1)
  test_rc=$?
  echo "== tests rc=$test_rc ($((SECONDS - t0))s)"
  grep -E "^(--- FAIL|FAIL|ok|PASS|panic)|Error Trace|Error:" "$OUT/test.log" | head -30
fi

# b. Bench with the phase breakdown.
: > "$OUT/ours.jsonl"
t0=$SECONDS
timeout -k 10 "${BENCH_TIMEOUT:-90}" .gpu/bench -device cuda -cfgs "$GRID" -dtypes fp16 -modes train,infer \
  -algo masked_implicit_gemm_splitk -phases -phasesteps 3 -o "$OUT/ours.jsonl" > "$OUT/bench.log" 2>&1
bench_rc=$?
echo "== bench rc=$bench_rc ($((SECONDS - t0))s)"
grep -E "^bench: (failed|profiling)|panic" "$OUT/bench.log" | head -10

# c. The table last.
grep '"impl":"flexgemm"' "$REF" > "$OUT/flexgemm-2026-11-29.jsonl"
{
  echo "# perf run $(date -u +%FT%TZ): tests rc=$test_rc, bench rc=$bench_rc"
  echo
  echo "FlexGEMM and 'before' are the rows of $REF (another run, same day, same H200 kind):"
  echo "ratios against them are indicative only (small configs vary by up to 40 % between runs)."
  echo
  if command -v python3 > /dev/null; then
    python3 - "$REF" "$OUT/ours.jsonl" << 'EOF'
import json, sys
def load(path, impl):
    out = {}
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r.get("impl") != impl or r.get("dtype") != "fp16" or r.get("error"):
            continue
        out[(r["mode"], r["RES"], r["C"], r["L"])] = r
    return out
flex, before, now = load(sys.argv[1], "flexgemm"), load(sys.argv[1], "flexgemm-go"), load(sys.argv[2], "flexgemm-go")
print("| mode | RES,C,L | before ms | now ms | now/before | FlexGEMM ms | FlexGEMM/now | prof. span | kernels | gap | fwd | wgrad | dgrad | map+derive |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for k in sorted(now, key=lambda k: (k[0], k[1])):
    n, b, f = now[k], before.get(k), flex.get(k)
    ph = n.get("phases") or {}
    grp = lambda p: sum(x["span_ms"] for x in ph.get("phases", []) if x["phase"] == p or x["phase"].startswith(p + " "))
    bms = "%.3f" % b["ms"] if b else "-"
    fms = "%.3f" % f["ms"] if f else "-"
    print("| %s | %d,%d,%d | %s | %.3f | %s | %s | %s | %s | %s | %s | %.3f | %.3f | %.3f | %.3f |" % (
        k[0], k[1], k[2], k[3], bms, n["ms"], "%.2f" % (n["ms"] / b["ms"]) if b else "-", fms,
        "%.2f" % (f["ms"] / n["ms"]) if f else "-",
        ph.get("step_ms", "-"), ph.get("kernel_ms", "-"), ph.get("gap_ms", "-"),
        grp("fwd"), grp("wgrad"), grp("dgrad"), grp("map") + grp("derive")))
EOF
  fi
  sed -n '/^phase breakdown/,$p' "$OUT/bench.log"
} > "$OUT/summary.md" 2>&1
cat "$OUT/summary.md"
[[ "$test_rc" == 0 || "$test_rc" == skipped ]] && [[ "$bench_rc" == 0 ]]
