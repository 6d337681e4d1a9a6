#!/usr/bin/env bash
# Builds the CUDA kernel images embedded by package kernels.
#
# Every kernels/*.cu file becomes one module image images/<name>.fatbin
# holding sm_80 and sm_90 cubins and compute_90 PTX (the driver JIT-compiles
# the PTX on newer GPUs), except the *_sm90a.cu files (Hopper wgmma
# kernels): nvcc 11.8 does not know sm_90a, so they become PTX only,
# images/<name>.ptx.gz (gzip -9n: PTX text shrinks about tenfold), emitted
# for compute_90 with the inline wgmma asm passed through and the header
# raised to PTX ISA 8.0 / target sm_90a; the driver JIT-compiles that PTX
# on Hopper GPUs (reference: GPU.md) only when asked to
# (FLEXGEMM_HOPPER_PTX=1): each such PTX is also compiled here to an sm_90a
# cubin, images/<name>.cubin.gz, by a ptxas of CUDA 12 or newer (PTXAS,
# else the one `hopper_sass.sh -fetch` downloads), and the runtime loads
# that, so a first Open on an H200 does not wait 80-100 s for the driver.
# manifest.txt records the nvcc and ptxas versions, the sha256 of every
# input (*.cu, *.cuh, this script) and of every image, the PTX each cubin
# was compiled from (a "cubin" line: the sha256 of its .ptx.gz), which
# module defines each kernel (read with cuobjdump), so the runtime looks a
# kernel up in its own module only, and which kernels wait for the grids
# ahead of them (pdl.cuh), so the runtime may launch those early; the
# plain Go test TestImagesUpToDate fails when a source changed after the
# last build, or a cubin was not compiled from the PTX beside it.
#
# Usage: cudaext/kernels/build.sh          (needs nvcc 11.8+ and Go on PATH)
#        NVCC=/path/to/nvcc JOBS=4 cudaext/kernels/build.sh
#        cudaext/kernels/build.sh --check  (CI: compile every .cu into a
#                                           temporary directory, change nothing)
# An image is rebuilt when its .cu changed, when any .cuh, this script or
# the nvcc version changed, or when it is missing; a cubin when its PTX or
# the ptxas version changed, or when it is missing. (nvcc 11.8 numbers a
# few PTX registers differently from build to build: a rebuild that changed
# no code may be undone with git checkout of images/, then this script run
# again to recompile the cubins and the manifest from what is there.)
set -euo pipefail
cd "$(dirname "$0")"
NVCC=${NVCC:-nvcc}
source ./cuda12.sh
PTXAS=${PTXAS:-$cuda12/ptxas}
JOBS=${JOBS:-$(nproc)}
FLAGS="-std=c++17 -O3 -Xfatbin=-compress-all -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90"
PTXFLAGS="-std=c++17 -O3 -ptx -arch=compute_90"

# compile SRC OUTDIR: one image of SRC in OUTDIR (fatbin, or patched PTX for
# *_sm90a.cu), written under a temporary name first.
compile() {
  local src=$1 dir=$2 n
  n=$(basename "$src" .cu)
  if [[ $n == *_sm90a ]]; then
    $NVCC $PTXFLAGS -o "$dir/$n.ptx.tmp" "$src"
    sed -i -e 's/^\.version 7\.[0-9]*$/.version 8.0/' -e 's/^\.target sm_90$/.target sm_90a/' "$dir/$n.ptx.tmp"
    grep -qx '.target sm_90a' "$dir/$n.ptx.tmp" || { echo "build.sh: $src: could not retarget the PTX to sm_90a" >&2; return 1; }
    gzip -9n -c "$dir/$n.ptx.tmp" > "$dir/$n.ptx.gz.tmp" && rm "$dir/$n.ptx.tmp" && mv "$dir/$n.ptx.gz.tmp" "$dir/$n.ptx.gz"
  else
    $NVCC $FLAGS -fatbin -o "$dir/$n.fatbin.tmp" "$src" && mv "$dir/$n.fatbin.tmp" "$dir/$n.fatbin"
  fi
}
# cubin NAME: images/NAME.cubin.gz, the sm_90a cubin of images/NAME.ptx.gz.
cubin() {
  local n=$1
  gzip -dc "images/$n.ptx.gz" > "images/$n.ptx.tmp"
  # ptxas reports a wgmma pipeline it had to serialize ("Potential
  # Performance Loss", C75xx: e.g. C7514, an accumulator read while its
  # group may still run) on its own, without -v; such a cubin is refused.
  "$PTXAS" -arch=sm_90a -o "images/$n.cubin.tmp" "images/$n.ptx.tmp" 2> "images/$n.ptxas.log" || { cat "images/$n.ptxas.log" >&2; return 1; }
  if grep -q 'Potential Performance Loss' "images/$n.ptxas.log"; then
    echo "build.sh: ptxas serialized wgmma in $n (pin the accumulators after their last wait: pin_acc in wgmma.cuh):" >&2
    cat "images/$n.ptxas.log" >&2
    rm -f "images/$n.cubin.tmp" "images/$n.ptxas.log"
    return 1
  fi
  cat "images/$n.ptxas.log" >&2
  rm "images/$n.ptxas.log" "images/$n.ptx.tmp" &&
    gzip -9n -c "images/$n.cubin.tmp" > "images/$n.cubin.gz.tmp" && rm "images/$n.cubin.tmp" &&
    mv "images/$n.cubin.gz.tmp" "images/$n.cubin.gz"
}
export -f compile cubin
export NVCC PTXAS FLAGS PTXFLAGS

if [[ "${1:-}" == --check ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  ls *.cu | xargs -P "$JOBS" -I{} bash -c "compile {} $tmp"
  echo "build.sh --check: every .cu compiles with $("$NVCC" --version | grep -o 'release [0-9.]*')"
  exit 0
fi

if ! ptxasver=$(cuda12_release "$PTXAS"); then
  echo "build.sh: the sm_90a cubins need a ptxas of CUDA 12 or newer, none at $PTXAS:" >&2
  echo "  run cudaext/kernels/hopper_sass.sh -fetch (CUDA 12.4's, into ~/.cache/flexgemm), or set PTXAS" >&2
  exit 2
fi

exec 9>"${TMPDIR:-/tmp}/flexgemm-kernels-build.lock"
flock 9

# Regenerate the GEMM instantiations from the Go tile table.
(cd ../.. && go run ./cudaext/kernels/gen -dir cudaext/kernels)

nvccver=$("$NVCC" --version | grep -o 'release [0-9.]*, V[0-9.]*')
mkdir -p images

# Fingerprint of everything every image depends on.
common=$( { echo "nvcc $nvccver"; echo "flags $FLAGS"; echo "ptxflags $PTXFLAGS"; sha256sum build.sh *.cuh; } | sha256sum | cut -d' ' -f1)
old_common=$(grep '^common ' manifest.txt 2>/dev/null | cut -d' ' -f2 || true)

todo=()
for cu in *.cu; do
  name=${cu%.cu}
  sum=$(sha256sum "$cu" | cut -d' ' -f1)
  img=images/$name.fatbin
  [[ $name == *_sm90a ]] && img=images/$name.ptx.gz
  if [[ "$common" != "$old_common" || ! -f $img ]] ||
     ! grep -qx "source $sum $cu" manifest.txt 2>/dev/null; then
    todo+=("$cu")
  fi
done
# Images whose source is gone.
rm -f images/*.ptx  # uncompressed PTX of earlier builds
for img in images/*.fatbin images/*.ptx.gz images/*.cubin.gz; do
  [[ -e "$img" ]] || continue
  n=$(basename "${img%%.*}")
  [[ -f "$n.cu" ]] || rm -f "$img"
done

if ((${#todo[@]})); then
  echo "build.sh: compiling ${todo[*]}"
  printf '%s\n' "${todo[@]}" | xargs -P "$JOBS" -I{} bash -c 'compile {} images'
else
  echo "build.sh: images up to date"
fi

# The sm_90a cubins: rebuilt when their PTX or the ptxas changed, or missing.
old_ptxas=$(grep '^ptxas ' manifest.txt 2>/dev/null | cut -d' ' -f2- || true)
cubins=()
for gz in images/*_sm90a.ptx.gz; do
  [[ -e "$gz" ]] || continue
  n=$(basename "$gz" .ptx.gz)
  if [[ "$ptxasver" != "$old_ptxas" || ! -f images/$n.cubin.gz ]] ||
     ! grep -qx "cubin $(sha256sum "$gz" | cut -d' ' -f1) $n" manifest.txt 2>/dev/null; then
    cubins+=("$n")
  fi
done
if ((${#cubins[@]})); then
  echo "build.sh: ptxas $ptxasver: compiling ${cubins[*]} to sm_90a cubins"
  printf '%s\n' "${cubins[@]}" | xargs -P "$JOBS" -I{} bash -c 'cubin {}'
fi

{
  echo "# FlexGEMM-Go kernel image manifest, written by build.sh. DO NOT EDIT."
  echo "nvcc $nvccver"
  echo "flags $FLAGS"
  echo "ptxas $ptxasver"
  echo "common $common"
  for f in $(ls build.sh *.cuh *.cu | LC_ALL=C sort); do
    echo "source $(sha256sum "$f" | cut -d' ' -f1) $f"
  done
  for img in $(ls images/*.fatbin images/*.ptx.gz images/*.cubin.gz | LC_ALL=C sort); do
    echo "image $(sha256sum "$img" | cut -d' ' -f1) $(basename "$img")"
  done
  # Each sm_90a cubin and the PTX it was compiled from (cubin() above
  # compiled every one whose PTX changed).
  for img in $(ls images/*.cubin.gz | LC_ALL=C sort); do
    echo "cubin $(sha256sum "${img%.cubin.gz}.ptx.gz" | cut -d' ' -f1) $(basename "$img" .cubin.gz)"
  done
  for img in $(ls images/*.fatbin | LC_ALL=C sort); do
    "${CUOBJDUMP:-cuobjdump}" --dump-elf-symbols "$img" | awk '$3 == "STO_ENTRY" {print $4}' | LC_ALL=C sort -u |
      sed "s/^/kernel $(basename "$img" .fatbin) /"
  done
  for img in $(ls images/*.ptx.gz | LC_ALL=C sort); do
    gzip -dc "$img" | sed -n 's/^\.visible \.entry \([A-Za-z0-9_]*\)(.*/\1/p' | LC_ALL=C sort -u | sed "s/^/kernel $(basename "$img" .ptx.gz) /"
  done
  # The kernels whose PTX (the compute_90 PTX of a fatbin) holds
  # griddepcontrol.wait (pdl.cuh): the engine may launch those before the
  # kernel ahead of them has finished.
  for img in $(ls images/*.fatbin images/*.ptx.gz | LC_ALL=C sort); do
    n=$(basename "${img%%.*}")
    if [[ $img == *.ptx.gz ]]; then gzip -dc "$img"; else "${CUOBJDUMP:-cuobjdump}" -ptx "$img"; fi |
      awk '/^\.visible \.entry /{ k = $3; sub(/\(.*/, "", k); w = 0 } /griddepcontrol\.wait/{ w = 1 }
           /^}/{ if (k != "" && w) print k; k = "" }' | LC_ALL=C sort -u | sed "s/^/waits $n /"
  done
} > manifest.txt.tmp
mv manifest.txt.tmp manifest.txt
