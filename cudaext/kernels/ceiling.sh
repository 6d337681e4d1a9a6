#!/usr/bin/env bash
# Builds timing-ceiling images of the warp-specialised Hopper gathers
# (gather_ws.cuh, "Timing ceilings"): each *_sm90a.cu module named, or all
# of them, compiled as build.sh does (PTX for compute_90, retargeted to
# sm_90a) with one or more FG_CEILING_* macros defined, into OUTDIR as
# <module>.cubin where a ptxas of CUDA 12 or newer is at hand (PTXAS, else
# the one `hopper_sass.sh -fetch` downloads: the compiler of the embedded
# cubins, so the base and the ceiling differ only by the macros), else as
# uncompressed <module>.ptx for the driver to compile. Run the engine on them with
# FLEXGEMM_KERNEL_IMAGE=OUTDIR: every kernel of those modules computes wrong
# results, so only timings mean anything. FG_TIMELINE instead builds the
# timeline probe (gather_ws.cuh): right results, and clock64 stamps of two
# blocks' stage hand-overs that the engine prints to stderr at Close
# (cudaext/timeline.go: "fgtl <block> <P|C> <i> <event> <cycles>").
#
# Usage: cudaext/kernels/ceiling.sh OUTDIR MACRO[,MACRO…] [module …]
#   e.g. cudaext/kernels/ceiling.sh .gpu/ceil/noa FG_CEILING_NO_ROWS gemm_gather_tf32_sm90a
#        cudaext/kernels/ceiling.sh .gpu/ceil/noaw FG_CEILING_NO_ROWS,FG_CEILING_NO_WEIGHT
set -euo pipefail
if (($# < 2)); then
  sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
out=$(realpath -m "$1")
macros=$2
shift 2
cd "$(dirname "$0")"
NVCC=${NVCC:-nvcc}
source ./cuda12.sh
PTXAS=${PTXAS:-$cuda12/ptxas}
cubin=0
cuda12_release "$PTXAS" > /dev/null && cubin=1
defs=()
IFS=, read -ra ms <<< "$macros"
for m in "${ms[@]}"; do
  case $m in
    FG_CEILING_NO_ROWS | FG_CEILING_ZERO_ROWS | FG_CEILING_SELF_ROWS | FG_CEILING_NO_WEIGHT | FG_TIMELINE) defs+=("-D$m") ;;
    *) echo "ceiling.sh: unknown macro $m (see gather_ws.cuh, \"Timing ceilings\")" >&2; exit 2 ;;
  esac
done
mods=("$@")
((${#mods[@]})) || mapfile -t mods < <(ls *_sm90a.cu | sed 's/\.cu$//')
mkdir -p "$out"
for n in "${mods[@]}"; do
  n=${n%.cu}
  [[ $n == *_sm90a && -f $n.cu ]] || { echo "ceiling.sh: $n is not a *_sm90a module here" >&2; exit 2; }
  $NVCC -std=c++17 -O3 -ptx -arch=compute_90 "${defs[@]}" -o "$out/$n.ptx" "$n.cu"
  sed -i -e 's/^\.version 7\.[0-9]*$/.version 8.0/' -e 's/^\.target sm_90$/.target sm_90a/' "$out/$n.ptx"
  grep -qx '.target sm_90a' "$out/$n.ptx" || { echo "ceiling.sh: $n: could not retarget the PTX to sm_90a" >&2; exit 1; }
  if ((cubin)); then
    "$PTXAS" -arch=sm_90a -o "$out/$n.cubin" "$out/$n.ptx" && rm "$out/$n.ptx"
    echo "ceiling.sh: $out/$n.cubin (${macros})"
  else
    echo "ceiling.sh: $out/$n.ptx (${macros})"
  fi
done
