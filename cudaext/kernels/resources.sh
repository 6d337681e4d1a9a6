#!/usr/bin/env bash
# Writes resources.txt: the registers, local-memory bytes and stack-frame
# bytes (where ptxas puts spilled registers) of
# every kernel's sm_90 cubin in the embedded images (images/*.fatbin) and
# of the Hopper kernels' sm_90a cubins (images/*_sm90a.cubin.gz, read with a
# cuobjdump of CUDA 12 or newer: CUOBJDUMP12, else the one
# `hopper_sass.sh -fetch` downloads; CUDA 11.8's does not know sm_90a), as
# cuobjdump reports them, with the sha256 of each image read. A kernel's
# registers decide how many of its blocks share an SM; a change shows in
# this file's diff, and TestKernelResources fails when an image changed
# since the file was written, when a kernel uses local memory, when a GEMM
# kernel's stack frame (a spill) is new or larger than its known one
# (knownGEMMStackFrames in kernels_test.go), or when a pairs
# kernel of 8 warps that its launch bounds hold to two blocks per SM does
# not fit two (session 26: a code change took the tf32 128×128 pairs
# kernel to one block per SM, seen only in an H200 run);
# TestKernelRegisterBudgets fails when a kernel measured to need a full SM
# of resident threads takes more than 32 registers (session 48: the per-tap
# sum at 44 cost fp16 (16, 1024, 8) 4 %; session 49: the map kernels at
# half residency cost the RES 1024 map 45 %).
#
# Usage: cudaext/kernels/resources.sh   (after build.sh; needs cuobjdump)
set -euo pipefail
cd "$(dirname "$0")"
source ./cuda12.sh
CUOBJDUMP12=${CUOBJDUMP12:-$cuda12/cuobjdump}
if ! cuda12_release "$CUOBJDUMP12" > /dev/null; then
  echo "resources.sh: the sm_90a cubins need a cuobjdump of CUDA 12 or newer, none at $CUOBJDUMP12:" >&2
  echo "  run cudaext/kernels/hopper_sass.sh -fetch (CUDA 12.4's, into ~/.cache/flexgemm), or set CUOBJDUMP12" >&2
  exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# usage CUOBJDUMP FILE: a "registers" line per kernel of FILE's sm_90 code
# (a fatbin's other architectures left out; a cubin has one, and no
# "arch =" line).
usage() {
  "$1" --dump-resource-usage "$2" | awk '
    /arch = / { arch = $3 }
    /Function / { fn = $2; sub(/:$/, "", fn) }
    /REG:/ && (arch == "" || arch == "sm_90") {
      match($0, /REG:[0-9]+/); r = substr($0, RSTART + 4, RLENGTH - 4)
      match($0, /LOCAL:[0-9]+/); l = substr($0, RSTART + 6, RLENGTH - 6)
      match($0, /STACK:[0-9]+/); k = substr($0, RSTART + 6, RLENGTH - 6)
      print "registers " fn " " r " " l " " k
    }' | LC_ALL=C sort -u
}
{
  echo "# FlexGEMM-Go kernel resources (sm_90 and sm_90a cubins), written by resources.sh. DO NOT EDIT."
  for img in $(ls images/*.fatbin | LC_ALL=C sort); do
    echo "image $(sha256sum "$img" | cut -d' ' -f1) $(basename "$img")"
    usage "${CUOBJDUMP:-cuobjdump}" "$img"
  done
  for img in $(ls images/*_sm90a.cubin.gz | LC_ALL=C sort); do
    echo "image $(sha256sum "$img" | cut -d' ' -f1) $(basename "$img")"
    gzip -dc "$img" > "$tmp/x.cubin"
    usage "$CUOBJDUMP12" "$tmp/x.cubin"
  done
} > resources.txt.tmp
mv resources.txt.tmp resources.txt
