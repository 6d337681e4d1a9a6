#!/usr/bin/env bash
# gpu_run.sh — train the example UNet on a GPU and on the CPU of the same
# machine, and compare.
#
#   examples/unet/gpu_run.sh build   # here: build .gpu/unet.gz (-tags cudaext, stripped, gzip)
#   examples/unet/gpu_run.sh run     # on the GPU machine: short runs, side by side
#
# "run" trains STEPS (default 200) steps of the default model and data set
# with -device cuda in fp32 and bf16 (and fp16 if time is left), and with
# -device cpu, then prints the loss every 20 steps side by side, ms/step,
# bytes copied per step, the conv / everything-else split of profiled GPU
# steps and the held-out metrics. Logs go to $OUT (or /tmp/unet-gpu).
set -o pipefail
cd "$(dirname "$0")/../.." || exit 1

mode=${1:-run}
case $mode in
build)
	mkdir -p .gpu
	go build -tags cudaext -ldflags='-s -w' -o .gpu/unet ./examples/unet || exit 1
	gzip -9 -f .gpu/unet || exit 1 # leaves only .gpu/unet.gz
	ls -l .gpu/unet.gz
	exit 0
	;;
run) ;;
*)
	echo "usage: $0 build|run" >&2
	exit 2
	;;
esac

STEPS=${STEPS:-200}
DEV=${DEV:-cuda} # DEV=fake tries the script on a CPU
EVERY=${EVERY:-20}
O=${OUT:-/tmp/unet-gpu}
mkdir -p "$O"
# Unpacked outside .gpu (the carried folder stays small) and outside $OUT.
BIN=${TMPDIR:-/tmp}/unet-gpu.bin
gzip -dc .gpu/unet.gz > "$BIN" && chmod +x "$BIN" || { echo "no .gpu/unet.gz: run '$0 build' first" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>/dev/null
t0=$SECONDS
# EXTRA adds flags to every run (EXTRA=-quick DEV=fake tries the script here).
# shellcheck disable=SC2206
common=(-steps "$STEPS" -log-every "$EVERY" -no-progress -png "" -save "" -out "$O/out" $EXTRA)

# one NAME LIMIT ARGS...: a run with its log in $O/NAME.log.
one() {
	local name=$1 limit=$2
	shift 2
	timeout -k 5 "$limit" "$BIN" "${common[@]}" "$@" > "$O/$name.log" 2>&1
	echo "$name: rc=$? ($((SECONDS - t0))s)"
}
one gpu-fp32 40 -device "$DEV" -precision fp32 -profile-steps 5
one gpu-bf16 40 -device "$DEV" -precision bf16 -profile-steps 5
one cpu 60 -device cpu
runs=(gpu-fp32 gpu-bf16 cpu)
if [ $((SECONDS - t0)) -lt 75 ]; then
	one gpu-fp16 30 -device "$DEV" -precision fp16
	runs+=(gpu-fp16)
fi

echo
echo "loss every $EVERY steps (same data, same initial weights):"
printf "%6s" step
for r in "${runs[@]}"; do printf " %10s" "$r"; done
echo "   bf16/fp32-1  fp32/cpu-1"
awk -v runs="${runs[*]}" '
	FNR == 1 { f++ }
	/^step [0-9]+ loss / { v[$2, f] = $4; if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
	END {
		k = split(runs, name, " ")
		for (i = 1; i <= n; i++) {
			s = order[i]; printf "%6d", s
			for (j = 1; j <= k; j++) printf " %10s", ((s, j) in v) ? v[s, j] : "-"
			a = v[s, 2]; b = v[s, 1]; c = v[s, 3]
			printf "   %+10.2e", (a != "" && b > 0) ? a / b - 1 : 0
			printf "  %+10.2e\n", (b != "" && c > 0) ? b / c - 1 : 0
		}
	}' $(for r in "${runs[@]}"; do echo "$O/$r.log"; done)

echo
for r in "${runs[@]}"; do
	echo "== $r"
	grep -E "^(device|trained|copied|loss scale|held-out|profile)|^conv |^unet:|panic|Error" "$O/$r.log" | head -8
done
echo
echo "GPU fp32 profile by category (5 profiled steps, totals):"
sed -n '/^profile (/,/^conv .*total/p' "$O/gpu-fp32.log" | tail -n +2
echo "total $((SECONDS - t0))s"
