#!/usr/bin/env bash
# GPU check of the cudaext engine.
#
# Here (dev machine, Go + CUDA 11.8 headers):   bash cudaext/gpu_run.sh build
#   builds .gpu/cudaext.test (the folder .gpu/ is ignored via
#   .git/info/exclude) and copies this script to .gpu/run.sh.
# There (GPU machine, repository root, .gpu carried): bash .gpu/run.sh
#   1. compute-sanitizer memcheck on the short sweep (+ routing, determinism)
#      and on the kernel-map tests (MAPCHECK=0 skips them)
#   2. compute-sanitizer racecheck on one scene, one arithmetic, one tile
#   3. the full test: every algorithm × direction × arithmetic × tile on
#      sphere-shell and random scenes against the CPU engine in float64,
#      64-bit offsets, determinism, out-of-memory; summary table
#   4. benchmarks (BENCH=0 skips them)
# Logs go to $OUT (or /tmp/flexgemm-gpu): memcheck.log, mapcheck.log, racecheck.log,
# test.log, variants.txt (one line per tile-level variant), bench.log.
set -o pipefail
if [[ "${1:-}" == build ]]; then
  cd "$(dirname "$0")/.." || exit 1
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
  mkdir -p .gpu
  go test -c -tags cudaext -o .gpu/cudaext.test ./cudaext || exit 1
  cp cudaext/gpu_run.sh .gpu/run.sh
  echo "built .gpu/cudaext.test; on the GPU machine run: bash .gpu/run.sh"
  exit 0
fi
OUT=${OUT:-/tmp/flexgemm-gpu}; mkdir -p "$OUT"
cd "$(dirname "$0")/../cudaext" || exit 1
export FLEXGEMM_TEST_OUT=$OUT FLEXGEMM_REQUIRE_GPU=1
T=../.gpu/cudaext.test
nvidia-smi --query-gpu=name,driver_version,memory.used,clocks.sm --format=csv,noheader
echo "== compute-sanitizer memcheck, short sweep"
FLEXGEMM_CUDA_SYNC=1 timeout ${MEMCHECK_TIMEOUT:-120} compute-sanitizer --tool memcheck --error-exitcode 7 \
  $T -test.short -test.run 'TestConvSweep|TestEngineRoutes|TestDeterministic' > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|^(FAIL|ok|PASS)" "$OUT/memcheck.log" | tail -3
if [[ "${MAPCHECK:-1}" == 1 ]]; then
  # Without FLEXGEMM_CUDA_SYNC: about a minute on the H200 (session 35).
  echo "== compute-sanitizer memcheck, kernel-map tests"
  timeout ${MAPCHECK_TIMEOUT:-120} compute-sanitizer --tool memcheck --error-exitcode 7 \
    $T -test.run 'TestGPUSubmanifoldMap|TestGPUStridedMap|TestGPUBrickPoolGuess|TestGPUBrickSearchErrors' > "$OUT/mapcheck.log" 2>&1
  echo "mapcheck rc=$?"; grep -E "ERROR SUMMARY|^(FAIL|ok|PASS)" "$OUT/mapcheck.log" | tail -3
fi
if [[ "${RACECHECK:-1}" == 1 ]]; then
  echo "== compute-sanitizer racecheck, one scene (f16, m128n64k32w2x2s4)"
  FLEXGEMM_TEST_MATHS=f16 FLEXGEMM_TEST_TILES=m128n64k32w2x2s4 FLEXGEMM_CUDA_SYNC=1 \
    timeout ${RACECHECK_TIMEOUT:-120} compute-sanitizer --tool racecheck --error-exitcode 7 \
    $T -test.short -test.run 'TestConvSweep/shell8b2-subm3/ci13-co96' > "$OUT/racecheck.log" 2>&1
  echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|^(FAIL|ok|PASS)" "$OUT/racecheck.log" | tail -3
fi
echo "== full GPU test"
TEST_TIMEOUT=${TEST_TIMEOUT:-150}
FLEXGEMM_CUDA_SYNC=1 timeout $TEST_TIMEOUT $T -test.v -test.timeout $((TEST_TIMEOUT - 5))s > "$OUT/test.log" 2>&1
echo "test rc=$?"
grep -E "^(--- FAIL|FAIL|ok|PASS|panic)|Error Trace|Error:" "$OUT/test.log" | head -30
if [[ "${BENCH:-1}" == 1 ]]; then
  echo "== benchmarks (device time per call, CUDA events; useful TFLOP/s = 2·pairs·C²/time)"
  timeout ${BENCH_TIMEOUT:-100} $T -test.run '^$' -test.bench 'BenchmarkConv' -test.benchtime 20x > "$OUT/bench.log" 2>&1
  echo "bench rc=$?"
  grep -E "^Benchmark" "$OUT/bench.log" | awk '{printf "%-58s %9s ms %8s TFLOP/s\n", $1, $7, $5}'
fi
# The variant table last.
sed -n '/== cudaext convolution variants/,/== [0-9]* variant groups/p' "$OUT/test.log"
