// Programmatic dependent launch: the prologue every kernel of FlexGEMM-Go
// opens with.
//
// On Hopper (compute capability 9.0 and up) the engine launches a kernel
// with the programmatic stream serialization attribute (cudaext's
// launchKernel) when the manifest says its code waits for the grids ahead
// of it: then the kernel's blocks may be scheduled while the kernel before
// it in the stream is still draining, so the launch and the blocks' start
// hide behind that kernel's last blocks instead of following them.
//
// fg_await_prior_grid is that wait, and it must be the first statement of
// every kernel: nothing of the block may touch global memory before it.
//   griddepcontrol.launch_dependents  lets the next kernel's blocks be
//       scheduled once every block of this grid has started (or exited),
//       never earlier, so a grid's blocks are all resident before any of
//       its dependent's take the free room;
//   griddepcontrol.wait  holds the block until every prerequisite grid has
//       completed and its memory operations are visible. A kernel launched
//       without the attribute passes it at once.
// Below compute capability 9.0 (the sm_80 images) it is empty, and the
// engine never sets the attribute there. build.sh lists the kernels whose
// PTX waits ("waits" lines of manifest.txt); the engine sets the attribute
// for those only.
#pragma once

__device__ __forceinline__ void fg_await_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "griddepcontrol.launch_dependents;\n\t"
      "griddepcontrol.wait;" ::
          : "memory");
#endif
}
