// Package kernels holds the CUDA sources of the cudaext engine and the
// compiled kernel images built from them. It has no build tag and no cgo:
// it only embeds bytes, so it compiles (and its tests run) on machines
// without CUDA.
//
// # Layout
//
//	*.cu, *.cuh     kernel sources; each X.cu is one module image
//	gemm.cuh        the GEMM kernels (fg::TileCfg, gather and pairs families)
//	wgmma.cuh       the Hopper multiply (wgmma.mma_async, swizzled stages)
//	gather_ws.cuh   the warp-specialised Hopper gather (producer warps,
//	                mbarrier stages, weight stages by TMA)
//	gemm_*.cu       generated instantiations, one per family × arithmetic;
//	                gemm_gather_<math>_sm90a.cu: the Hopper tiles
//	conv_aux.cu     conversion, transpose, im2col, split-K reduce, bias grad
//	tiles.go        THE tile tables (Tiles, HopperTiles); gen writes
//	                gemm_*.cu from them
//	build.sh        compiles every X.cu into images/X.fatbin (sm_80, sm_90,
//	                compute_90 PTX), every X_sm90a.cu into sm_90a PTX
//	                (images/X.ptx.gz) and that PTX, with a CUDA 12 ptxas,
//	                into an sm_90a cubin (images/X.cubin.gz, what the
//	                engine loads on Hopper), and writes manifest.txt
//	resources.sh    writes resources.txt: registers and local memory of
//	                every sm_90 and sm_90a kernel of the images, for
//	                review and TestKernelResources
//	hopper_sass.sh  compiles the sm_90a PTX images here with a CUDA 12
//	                ptxas (-fetch downloads one) and prints each Hopper
//	                kernel's registers, spills and consumer stage loop,
//	                to compare builds before timing them on a GPU
//	cuda12.sh       where the CUDA 12 tools for the sm_90a images are, and
//	                their version check (sourced by the scripts above and
//	                ceiling.sh)
//	ceiling.sh      builds timing-ceiling images of the Hopper gathers
//	                (gather_ws.cuh's FG_CEILING_* macros: wrong results,
//	                one part of the producers' work removed) and the
//	                timeline probe (FG_TIMELINE: clock64 stamps of one
//	                block's stage hand-overs, printed at Close) for
//	                FLEXGEMM_KERNEL_IMAGE
//	images/         the compiled images, embedded with go:embed
//
// # Rebuilding
//
// After changing a .cu/.cuh file or the tile table, run
//
//	cudaext/kernels/build.sh && cudaext/kernels/resources.sh
//
// (nvcc 11.8 or newer and Go on PATH, and CUDA 12.4's ptxas and cuobjdump
// for the sm_90a cubins and their resources: cudaext/kernels/hopper_sass.sh
// -fetch downloads them once). TestImagesUpToDate fails while the
// embedded images are stale, TestInstancesUpToDate while gemm_*.cu differ
// from what the tile table generates, and TestKernelResources while
// resources.txt was written from other images, when a kernel uses local
// memory, when a GEMM kernel's stack frame (spilled registers) is new or
// larger than the known one, or when a pairs kernel promised two blocks
// per SM does not fit them;
// TestKernelRegisterBudgets fails when a kernel measured to need a full SM
// of resident threads (the per-tap sums, the brick search's insert) takes
// more than 32 registers.
//
// # Overriding the images
//
// The environment variable FLEXGEMM_KERNEL_IMAGE may name a .fatbin (or
// .cubin/.ptx) file or a directory of them; each file replaces the embedded
// module of the same base name (conv_aux.fatbin replaces module "conv_aux"), so
// experimental builds can be tried without recompiling Go code.
// FLEXGEMM_HOPPER_PTX=1 makes the Hopper modules load from their embedded
// sm_90a PTX, compiled by the driver (and cached by it), instead of from
// the embedded cubins (EnvHopperPTX).
package kernels
