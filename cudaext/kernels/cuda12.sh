# Sourced by build.sh, ceiling.sh, resources.sh and hopper_sass.sh: the
# CUDA 12 tools that the sm_90a images need (nvcc 11.8 has no sm_90a
# ptxas). cuda12 is their folder: FLEXGEMM_CUDA12, else the one that
# `hopper_sass.sh -fetch` fills with CUDA 12.4's ptxas, cuobjdump and
# nvdisasm.
cuda12=${FLEXGEMM_CUDA12:-$HOME/.cache/flexgemm/cuda-12.4}

# cuda12_release TOOL prints TOOL's "release X.Y, VX.Y.Z" and succeeds if
# TOOL runs and is of CUDA 12 or newer; else it prints nothing and fails.
cuda12_release() {
  local v
  v=$("$1" --version 2>/dev/null | grep -oE 'release [0-9.]+, V[0-9.]+' | head -1) || true
  grep -qE '^release (1[2-9]|[2-9][0-9])\.' <<< "$v" && echo "$v"
}
