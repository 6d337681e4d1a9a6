// Package cudaext is the CUDA engine of FlexGEMM-Go: a sparse.Engine that
// computes sparse convolutions on an NVIDIA GPU (compute capability 8.0 or
// newer). It is compiled only with the build tag cudaext (never "cuda",
// which would switch Gorgonia itself into its own CUDA mode); without the
// tag the package is empty.
//
// # Use
//
//	e, err := cudaext.Open(0)            // registers the engine with sparse
//	xd, _ := e.ToDeviceAs(x, sparse.Float16)
//	wd, _ := e.ToDeviceAs(w, sparse.Float16)
//	y, err := sparse.Conv(m, xd, wd, sparse.Matrix{}, sparse.ConvOptions{})
//	yh, _ := e.ToHost(y)                 // []float32
//
// Device matrices hold a *Buffer (it implements sparse.Storage); Float16
// and BFloat16 exist only on the device: ToDeviceAs converts float32 host
// data on upload and ToHost converts back. Float32 convolutions use IEEE
// FMA by default, tf32 tensor cores after SetTF32(true). A tf32 product
// reads a float32's sign, exponent and first 10 mantissa bits (the value
// truncated); the engine hands the tensor cores the weight with the other
// 13 bits cleared (a copy for weights up to 16 MiB, and the input
// gradient's transposed weight), which changes no result and toggles fewer
// bits in every copy of the weight stages: 3–5 % off tf32 steps under the
// H200's power cap (FLEXGEMM_TF32_CLEAR=0: the weight as stored).
//
// # Runtime
//
// The package binds the CUDA driver API itself (driver.go): nothing runs
// at import time and Open reports a machine without a GPU as ErrNoDevice.
// A program built with the tag still needs libcuda.so.1 (the NVIDIA driver
// library, also present on the CI machine after the CUDA toolkit install)
// to start. A CUDA context is current per OS thread, so every driver call
// happens inside Device.do, which takes the Device's lock, pins the
// calling goroutine to its thread and makes the context current there (the
// caller does the work itself: no hand-off to a worker goroutine), and
// work goes to one non-blocking main stream in order — except the weight
// and bias gradients, which go to a side stream so that the input
// gradient issued after them runs beside them and fills their last
// waves' idle SMs (side.go; every other call first makes the main stream
// wait for the side stream, blocks freed meanwhile are held until it has,
// and FLEXGEMM_NO_SIDE_STREAM=1 keeps everything on the main stream;
// results are the same bit for bit). Device memory comes from a caching
// allocator (plain cuMemAlloc, never managed memory; sizes rounded to
// powers of two up to 1 MiB and to 2 MiB above; out-of-memory releases the
// cache and runs the GC before failing with ErrOutOfMemory naming the
// request). Kernel maps are uploaded once per *kmap.Map and released when
// the map is garbage collected (or by ForgetMap / ReleaseMap). Maps built
// on the GPU (SubmanifoldMap, StridedMap, …) keep their tables on the
// device: their host tables are downloaded only when host code asks
// (kmap.Map.Load), and every derived table (reverse, pair lists, Gray
// orders, tile unions) is computed on the device. A convolution on such a
// map with its derived tables prepared (DeriveTables) neither downloads
// nor waits for the device (the first weight gradient reads the pair
// lists' sizes that DeriveTables had copied, and waits only if the device
// has not got that far yet); HostWaits counts what does.
//
// Kernel images come from package kernels (embedded fatbins; see its
// documentation for the build and the FLEXGEMM_KERNEL_IMAGE override).
// Setting FLEXGEMM_CUDA_SYNC=1 waits after every launch and names the
// failing kernel. On compute capability 9.0 and up every kernel is
// launched with programmatic stream serialization: each kernel opens by
// waiting for the grids ahead of it (kernels/pdl.cuh; the manifest lists
// the kernels whose code does, and only those are launched so), so its
// blocks are scheduled while the kernel ahead drains instead of after it
// (FLEXGEMM_PDL=0: plain launches; profiles always launch plainly).
//
// # Algorithms
//
// Every algorithm of sparse.Algorithm runs in every direction and dtype:
//
//   - forward and input gradient use one "gather" GEMM kernel family
//     (out[r] = Σ_v in[tbl[r, v]] · w[:, v, :]ᵀ); the input gradient uses
//     the reverse table and reads the weight transposed inside the kernel
//     (no transposed copy; Explicit and the tf32 Hopper tiles, which read
//     their weight K-major only, materialise [Ci, V, Co]), so it is
//     output-stationary without atomics. For a submanifold map the
//     reverse table is Nbr with its taps mirrored, so the input gradient
//     gathers through Nbr in the forward Gray order and reads weight tap
//     V−1−v for table tap v (GatherParams.mirror): no reverse table, masks,
//     order or tile unions are built for it;
//   - Explicit materialises the im2col matrix and runs the same kernel with
//     the identity table; Implicit gathers inside the kernel; the masked
//     algorithms visit rows in Gray-code order (kmap.Masked: its key reads
//     the least evenly splitting taps first up to kmap.BalancedKeyMaxRows
//     rows; up to kmap.RegroupMaxRows rows the order is regrouped window by
//     window into tiles of fewer taps, kmap.RegroupWindow, by a block of
//     512 threads per window, FLEXGEMM_REGROUP_THREADS=256 or 1024 for the
//     other blocks, whose greedy passes run on the warps that hold the
//     window's mask classes) and only the union of taps of each tile (kmap.Masked.Tiles),
//     launching the tiles with the most taps first when there are from half
//     a tile up to FLEXGEMM_LONGEST_FIRST_TILES_PER_SM (default 16) per SM
//     (tf32: FLEXGEMM_LONGEST_FIRST_TILES_PER_SM_TF32, default 16),
//     and, for tables above 2^21 rows, in the order of their first rows
//     (FLEXGEMM_NO_ROWS_FIRST=1 keeps the Gray order's tile order); the
//     split-K variants split the reduction and sum float32 partials in
//     split order;
//   - the weight gradient runs one GEMM per tap over the pair lists
//     (kmap.Pairs), split-K for the split algorithms (the heuristic gives
//     each tap split slices in proportion to its pairs, or, for operands
//     larger than the L2, slices of FLEXGEMM_PAIRS_WINDOW_ROWS output rows,
//     default 8192, cut at the same rows in every tap;
//     FLEXGEMM_NO_ROW_SLICES=1 cuts equal shares of each tap's pairs; a
//     window split of at most 32 slices runs its blocks in groups of three
//     slices, each group's taps by the length of their offset (centre,
//     faces, edges, corners: about the order of their pair counts), so
//     fewer long blocks end the launch; FLEXGEMM_PAIRS_ORDER_GROUPS=g
//     forces groups of g on every split, 0 the launch order), and over
//     the im2col matrix for Explicit; a submanifold map's device lists
//     hold the taps before the centre only, read swapped for their mirror
//     taps and the centre as the identity (TablePairs);
//   - ParamGrads (sparse.ConvParamGrads) returns the weight and the bias
//     gradient together: over those half lists the 16-bit Hopper pairs
//     kernels sum the bias gradient in their centre tap, whose blocks
//     stage every row of dy once (PairsParams.bias_part;
//     FLEXGEMM_NO_FUSED_BIAS=1 runs BiasGrad's kernels after instead);
//   - every family has mma.sync tiles (sm_80 and newer) and, on compute
//     capability 9.0, Hopper tiles multiplying with wgmma.mma_async
//     (kernels.HopperTiles; the fixed heuristic prefers them where they
//     were measured faster, FLEXGEMM_NO_HOPPER=1 keeps it off them); the
//     forward and input gradient of the 128×256 (16-bit and tf32) and
//     two-blocks-per-SM 128×64 (16-bit) Hopper tiles run warp-specialised twins (Tile.Producers:
//     producer warps gather the rows, one thread brings each weight stage
//     in by a bulk tensor copy, the warpgroups only multiply;
//     FLEXGEMM_SPECIALIZED_GATHERS=0 keeps the plain tiles); gathers of
//     129–192 rows and at least 128 columns over at most 27 taps (the
//     RES 8 shell) take a 192×128 specialised tile of three warpgroups,
//     one row tile instead of two of 128 rows (FLEXGEMM_TALL_GATHERS=0:
//     the 128-row tiles; it has no plain twin, so larger kernels keep
//     them); unsplit
//     twins alone on their SM run a persistent block per SM over more
//     tiles than SMs, the next tile's start overlapping the last one's
//     stores (FLEXGEMM_PERSISTENT_GATHERS=0: a block per tile; the tiles
//     whose two tile descriptions share one index of neighbour indices,
//     FLEXGEMM_SHARED_INDEX=0: a block per tile); the split
//     algorithms' gathers of half a tile to FLEXGEMM_STREAMK_TILES_PER_SM
//     (default 1, 0: never) tiles per SM run stream-K on those twins (the
//     *_sk kernels): groups of the column tiles take equal shares of all
//     tiles' iterations, and a tile cut between groups is finished by the
//     group holding its end, which adds the others' float32 partials in
//     group order; unsplit gathers over 16-byte rows of the specialised
//     128×64 and 256×128 tiles run swapped twins, a consumer warpgroup per
//     64 output columns multiplying the transposed tile with its columns
//     of the weight's stage as wgmma's A (FLEXGEMM_SWAPPED_GATHERS=0:
//     never; the 16-bit input gradients' twins read that stage transposed,
//     FLEXGEMM_SWAPPED_WT=0 keeps them off), and the fixed heuristic gives
//     gathers of 128–255 columns over many rows the 256×128 tiles for it
//     (FLEXGEMM_SWAPPED_WIDE=0 / FLEXGEMM_SWAPPED_WIDE16=0: tf32 / 16-bit
//     keep the 128×128 and 192×128 tiles);
//   - the masked split-K forward and input gradient of small submanifold
//     maps at f16 or tf32 run per tap (pertap.go; slot buffers up to
//     FLEXGEMM_PERTAP_MAX_MB, default 32, 0: never): one GEMM over every
//     tap's own row tiles, writing each pair's product, then a per-row sum
//     in tap order; tf32 forwards of at least
//     FLEXGEMM_PERTAP_GROUP_MIN_CHANNELS (default 1024) input channels
//     whose slots exceed that run per tap in up to three groups of tiles,
//     each group's products in at most FLEXGEMM_PERTAP_GROUP_OUTS (default
//     6, 0: no groups) results, the float32 running sums carried from group
//     to group in tap order (the same bits as one group);
//   - an experiment, off by default: with FLEXGEMM_HYBRID_SHARE=s in
//     (0, 1], tf32 masked forwards and input gradients on submanifold maps
//     move the taps that fewer than s of a tile's rows hold out of the
//     masked tile and run them per tap (hybrid.go; the split built on the
//     device as kmap.Masked.Hybrid makes it on the host).
//
// Results are deterministic: fixed partitions, no float atomics (stream-K's
// partitions depend on the SM count, so its bits are those of the GPU model).
//
// # Writing kernels for this engine (package-internal API)
//
// Kernel sources go to cudaext/kernels/NAME.cu (one module each; extern "C"
// kernels whose first statement is fg_await_prior_grid(); helpers in a
// namespace; avoid file names that Windows reserves, such as aux or con,
// which go:embed rejects) and are built by
// cudaext/kernels/build.sh. From Go, inside package cudaext:
//
//	err := e.d.do(func() error {            // under the device lock, context current
//		b, err := e.d.newBuffer(sparse.Int32, n) // Buffer (GC-safe, Free)
//		tmp, err := e.d.allocTemp(bytes)     // raw block; e.d.freeTemp(tmp)
//		g, blk := e.d.elementwise(n)         // grid-stride launch shape
//		return e.d.launch("my_kernel", g, blk, smemBytes, b, tmp.ptr, int64(n))
//	})
//
// launch takes devPtr, *Buffer, int/int64/uint64 (8 bytes), int32/uint32/
// float32 (4 bytes) and structArg values (structs by value). Never call
// do from inside do, and never call kmap.Map.Load (or a kmap accessor that
// loads) inside do. Host copies: memcpyHtoD (on e.d.stream),
// uploadSlice, and d.copyToHost / download / d.sync for anything that
// makes the host wait (counted by HostWaits; never use memcpyDtoH or
// streamSync directly); kernel-map tables: e.nbrTable, e.revTable,
// e.pairTables, e.maskedTablesFor.
package cudaext
