#!/usr/bin/env bash
# Reads the Hopper images' sm_90a SASS (images/*_sm90a.cubin.gz, which
# build.sh compiles from images/*_sm90a.ptx.gz; an IMAGE_DIR without the
# cubins, an older commit's, has its PTX compiled here with a ptxas of CUDA
# 12 or newer: nvcc 11.8, which builds the PTX, has none for sm_90a), and
# prints each kernel's registers, spill (or stack-frame) bytes and, for the kernels that
# multiply with wgmma, the instructions of the stage loop around their
# HGMMAs (the consumers' loop) with its HGMMA, S2R (special-register reads,
# tens of cycles each) and LDC (constant loads) among them. Compare two builds' tables before timing a change to a Hopper
# kernel: in session 41 (docs/PERF_NOTES.md, step 92) a branch around the
# consumers' wgmma grew their stage loop from 92-97 to 140 instructions,
# with 3 S2R and 3 LDC an iteration, and every warp-specialised gather ran
# 10-18 % slower on the H200; this table shows that in a minute, without a
# GPU.
#
# Usage: cudaext/kernels/hopper_sass.sh [-fetch] [-sass KERNEL] [IMAGE_DIR]
#   -fetch        download CUDA 12.4's ptxas, cuobjdump and nvdisasm (Debian's
#                 nvidia-cuda-toolkit 12.4.131~12.4.1-2 package, checked by its
#                 sha256) into ${FLEXGEMM_CUDA12:-~/.cache/flexgemm/cuda-12.4}
#   -sass KERNEL  also print KERNEL's SASS
#   IMAGE_DIR     images to read (default: this directory's images/; e.g. a
#                 checkout of another commit's cudaext/kernels/images)
# PTXAS and CUOBJDUMP override the tools' paths.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cuda12.sh"
tools=$cuda12
deb=nvidia-cuda-toolkit_12.4.131~12.4.1-2_amd64.deb
debsum=cd5fe85aee38d108b315f408a688641478f2402622a10c677478eb7a6c4e5319
sass="" imgdir=$here/images tmp="" work=""
trap 'rm -rf "$tmp" "$work"' EXIT
while (($#)); do
  case $1 in
  -fetch)
    mkdir -p "$tools"
    tmp=$(mktemp -d)
    curl -fsSL -o "$tmp/$deb" "http://deb.debian.org/debian/pool/non-free/n/nvidia-cuda-toolkit/$deb"
    echo "$debsum  $tmp/$deb" | sha256sum -c --quiet
    dpkg-deb -x "$tmp/$deb" "$tmp/x"
    cp "$tmp/x/usr/bin/ptxas" "$tmp/x/usr/bin/cuobjdump" "$tmp/x/usr/bin/nvdisasm" "$tools/"
    echo "hopper_sass.sh: CUDA 12.4 tools in $tools"
    shift ;;
  -sass) sass=$2; shift 2 ;;
  *) imgdir=$1; shift ;;
  esac
done
PTXAS=${PTXAS:-$tools/ptxas}
CUOBJDUMP=${CUOBJDUMP:-$tools/cuobjdump}
if ! cuda12_release "$PTXAS" > /dev/null; then
  echo "hopper_sass.sh: no ptxas of CUDA 12 or newer at $PTXAS; run with -fetch, or set PTXAS and CUOBJDUMP" >&2
  exit 2
fi
work=$(mktemp -d)
# With build.sh's cubins beside every PTX (TestImagesUpToDate holds them
# together) nothing is compiled: registers and stack-frame bytes (where
# spills go) come from the cubins' resource tables, and the column says
# "stack" instead of ptxas's "spill" (spill stores, a little less).
cubins=1
for gz in "$imgdir"/*_sm90a.ptx.gz; do [[ -f ${gz%.ptx.gz}.cubin.gz ]] || cubins=0; done
printf '%-46s %4s %5s %5s %5s %4s %4s\n' kernel regs "$( ((cubins)) && echo stack || echo spill)" loop hgmma s2r ldc
for gz in "$imgdir"/*_sm90a.ptx.gz; do
  n=$(basename "$gz" .ptx.gz)
  if ((cubins)); then
    gunzip -c "$imgdir/$n.cubin.gz" > "$work/$n.cubin"
    "$CUOBJDUMP" --dump-resource-usage "$work/$n.cubin" | awk -v q="'" '
      /Function / { fn = $2; sub(/:$/, "", fn) }
      /REG:/ {
        match($0, /REG:[0-9]+/); r = substr($0, RSTART + 4, RLENGTH - 4)
        match($0, /STACK:[0-9]+/); l = substr($0, RSTART + 6, RLENGTH - 6)
        print "ptxas info    : Compiling entry function " q fn q " for " q "sm_90a" q
        print "ptxas info    : Used " r " registers"
        print "    " l " bytes spill stores"
      }' > "$work/$n.log"
  else
    gunzip -c "$gz" > "$work/$n.ptx"
    "$PTXAS" -arch=sm_90a -v -o "$work/$n.cubin" "$work/$n.ptx" 2> "$work/$n.log"
  fi
  "$CUOBJDUMP" -sass "$work/$n.cubin" > "$work/$n.sass"
  # Registers and spills from ptxas's report; from the SASS, the consumers'
  # stage loop (from the target of the first backward branch after the last
  # HGMMA that jumps to or before the first, to that branch): its
  # instructions, HGMMAs, S2Rs and LDCs. One line per kernel, in name order.
  awk '
    function flush() {
      if (fn == "" || nh == 0) { fn = ""; return }
      lo = -1
      for (i = lastH + 1; i <= n && lo < 0; i++)
        if (txt[i] ~ /BRA/ && match(txt[i], /0x[0-9a-f]+/)) {
          t = hex(substr(txt[i], RSTART + 2, RLENGTH - 2))
          if (t <= adr[firstH]) for (j = 1; j <= firstH; j++) if (adr[j] == t) { lo = j; hi = i }
        }
      if (lo > 0) {
        L = hi - lo + 1; H = 0; S = 0; C = 0
        for (j = lo; j <= hi; j++) { H += txt[j] ~ /HGMMA/; S += txt[j] ~ / S2R /; C += txt[j] ~ / LDC[ .]/ }
        loop[fn] = L; lh[fn] = H; ls[fn] = S; lc[fn] = C
      }
      fn = ""
    }
    function hex(h,   v, d) { v = 0; h = tolower(h); for (d = 1; d <= length(h); d++) v = v * 16 + index("0123456789abcdef", substr(h, d, 1)) - 1; return v }
    FNR == 1 { file++ }
    file == 1 && /Compiling entry function/ { k = $0; sub(/.*function ./, "", k); sub(/. for .*/, "", k) }
    file == 1 && /spill stores/ { match($0, /[0-9]+ bytes spill stores/); spill[k] = substr($0, RSTART, RLENGTH) + 0 }
    file == 1 && /Used [0-9]+ registers/ { match($0, /Used [0-9]+/); regs[k] = substr($0, RSTART + 5, RLENGTH - 5) }
    file == 2 && /Function : / { flush(); fn = $3; n = 0; nh = 0 }
    file == 2 && fn != "" && match($0, /\/\*[0-9a-f]+\*\//) {
      n++; adr[n] = hex(substr($0, RSTART + 2, RLENGTH - 4)); txt[n] = $0
      if ($0 ~ /HGMMA/) { nh++; if (nh == 1) firstH = n; lastH = n }
    }
    END {
      flush()
      for (k in regs) printf "%-46s %4d %5d %5s %5s %4s %4s\n", k, regs[k], spill[k],
        (k in loop) ? loop[k] : "-", (k in loop) ? lh[k] : "-", (k in loop) ? ls[k] : "-", (k in loop) ? lc[k] : "-"
    }
  ' "$work/$n.log" "$work/$n.sass" | LC_ALL=C sort
  if [[ -n $sass ]] && grep -q "Function : $sass\$" "$work/$n.sass"; then
    "$CUOBJDUMP" -sass -fun "$sass" "$work/$n.cubin"
  fi
done
