//go:build cudaext

package cudaext

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// Options extends sparse.ConvOptions with choices only the CUDA engine
// has.
type Options struct {
	sparse.ConvOptions
	// Tile names the GEMM tile configuration (kernels.Tile.Name, e.g.
	// "m128n64k32w2x2s4"); "" lets the engine choose (TileRows, if set,
	// restricts the choice to tiles of that many rows). A tile that
	// cannot serve the problem is an ErrShape naming it: one the
	// arithmetic has no kernel for, or a warp-specialised tile without a
	// plain twin (kernels.Tile.ServesTaps) on a kernel of more than 27
	// taps.
	Tile string
}

// ConvForward implements sparse.ConvEngine.
func (e *Engine) ConvForward(m *kmap.Map, x, w, bias sparse.Matrix, opt sparse.ConvOptions) (sparse.Matrix, error) {
	return e.Forward(m, x, w, bias, Options{ConvOptions: opt})
}

// ConvInputGrad implements sparse.ConvEngine.
func (e *Engine) ConvInputGrad(m *kmap.Map, dy, w sparse.Matrix, opt sparse.ConvOptions) (sparse.Matrix, error) {
	return e.InputGrad(m, dy, w, Options{ConvOptions: opt})
}

// ConvWeightGrad implements sparse.ConvEngine.
func (e *Engine) ConvWeightGrad(m *kmap.Map, x, dy sparse.Matrix, opt sparse.ConvOptions) (sparse.Matrix, error) {
	return e.WeightGrad(m, x, dy, Options{ConvOptions: opt})
}

// ConvParamGrads implements sparse.ParamGradEngine.
func (e *Engine) ConvParamGrads(m *kmap.Map, x, dy sparse.Matrix, opt sparse.ConvOptions) (dw, db sparse.Matrix, err error) {
	return e.ParamGrads(m, x, dy, Options{ConvOptions: opt})
}

// mathFor returns the GEMM arithmetic of a dtype.
func (e *Engine) mathFor(dt sparse.DType) (kernels.Math, error) {
	switch dt {
	case sparse.Float32:
		if e.tf32.Load() {
			return kernels.TF32, nil
		}
		return kernels.F32, nil
	case sparse.Float16:
		return kernels.F16, nil
	case sparse.BFloat16:
		return kernels.BF16, nil
	}
	return 0, fmt.Errorf("%w: convolution on %v data", sparse.ErrDType, dt)
}

func checkOptions(op string, o Options) error {
	if err := o.Algorithm.Valid(); err != nil {
		return err
	}
	if o.SplitK < 0 || o.SplitK > 4096 {
		return fmt.Errorf("%w: %s: SplitK %d (want 0..4096)", sparse.ErrShape, op, o.SplitK)
	}
	if o.TileRows < 0 {
		return fmt.Errorf("%w: %s: TileRows %d", sparse.ErrShape, op, o.TileRows)
	}
	return nil
}

// tileUse says which GEMM a tile is chosen for: chooseTile's default
// differs between them because the 16-bit tiles were measured per use
// (docs/PERF_NOTES.md, step 5).
type tileUse int

const (
	// useGather: forward or input gradient (gather family, implicit,
	// masked or explicit): rows are voxels, cols output channels, kc the
	// reduction length per tap (V·C for the explicit im2col GEMM).
	useGather tileUse = iota
	// usePairs: the per-tap weight gradient (pairs family): rows are Co,
	// cols Ci, and the reduction runs over each tap's pair list.
	usePairs
	// useIm2colWGrad: the explicit weight gradient (pairs family over the
	// im2col matrix, one tap): rows are Co, cols V·Ci.
	useIm2colWGrad
	// useGatherWT: a gather that reads the weight transposed (the 16-bit
	// input gradients of the implicit and masked algorithms; tf32 ones and
	// the explicit algorithm's multiply a transposed copy and are
	// useGather): as useGather, but only the swapped twins of EnvSwappedWT
	// can run it, so the tiles that are there for their swapped twins are
	// its default only where that switch is on.
	useGatherWT
)

// gathers reports whether u is a gather GEMM (useGather, useGatherWT).
func (u tileUse) gathers() bool { return u == useGather || u == useGatherWT }

// gatherUse returns the tileUse of a gather of esz-byte elements of
// algorithm alg, an input gradient when inputGrad: useGatherWT for a
// 16-bit input gradient that reads the weight transposed (the implicit
// and masked algorithms'; the explicit one multiplies a materialised
// transpose), else useGather. InputGrad and the autotuner's shapeOf both
// ask it.
func gatherUse(esz int, inputGrad bool, alg sparse.Algorithm) tileUse {
	if inputGrad && alg != sparse.Explicit && esz == 2 {
		return useGatherWT
	}
	return useGather
}

// Default tiles of the 16-bit arithmetics at large C, measured on the
// H200 (BenchmarkConvTiles, docs/PERF_NOTES.md step 5):
//
//   - gatherDeepTile replaces m128n128k32w2x4s3 wherever that is the
//     default and each tap reduces at least 64 channels: half the
//     barriers per tap for the same 2 blocks per SM, 13–19 % less time
//     than that tile in all six measured cases (fwd/dgrad at C 64, 256,
//     1024; at C 64 the default is m128n64 anyway).
//   - pairsWideTile is the per-tap weight gradient's tile when Co and Ci
//     are both at least pairsWideMin: a 128×128 tile gathers each pair's
//     rows for 4× the outputs of m64n64 (1.78 against 2.58 ms at RES 64 C
//     1024, 2.19 against 3.29 ms at RES 256 C 256, 2.20 against 3.77 ms
//     at RES 512 C 128 (session 3); m64n64 stays best at C 64).
//
// Both are Narrow (no float32/TF32 instance); F32 and TF32 keep the old
// tiles.
const (
	// hopperNarrowRows is the fewest rows for which the heuristic takes
	// the two-blocks-per-SM 128×64 Hopper tile for a 64-column gather GEMM
	// (hopperDefault).
	hopperNarrowRows = 1 << 20
	// tallManyRows is the fewest rows for which the heuristic takes the
	// 192×128 Hopper tile for a 16-bit gather of 128–255 columns under
	// EnvTallMany (hopperDefault).
	tallManyRows   = 1 << 18
	gatherDeepTile = "m128n128k64w2x4s3"
	pairsWideTile  = "m128n128k32w2x4s4"
	pairsWideMin   = 128
)

// hopperDefault returns the Hopper tile (kernels.HopperTiles) the fixed
// heuristic prefers for a GEMM of use with an output of rows × cols and a
// reduction of kc per tap in arithmetic mth, or "" where none applies.
// Measured on the H200 (BenchmarkConvTiles, docs/PERF_NOTES.md step 6):
//   - gather GEMMs (forward, input gradient) with ≥ 256 columns: the
//     128×256 tile, 25–45 % faster than every mma.sync tile at C = 256,
//     512 and 1024 at every row count of the benchmark;
//   - gather GEMMs with 128–255 columns: the 256×128 tile (four
//     warpgroups), 15 % faster than m128n128k64w2x4s3 at C = 128 (the
//     plain 128×128 Hopper tile is not: half the work per barrier); its
//     warp-specialised 128×128 twin is faster still (step 61), and is
//     taken where the specialised gathers are on;
//   - the weight gradient (16-bit only) with Co and Ci ≥ 256: the 128×256
//     tile, 14–31 % faster than m128n128k32w2x4s4;
//   - the weight gradient with Co and Ci of 128–255: the 128×128 tile, 6
//     stages (session 6, after the lean pairs copies): 1.88 ms at RES 512
//     C 128 against 2.31 for pairsWideTile and 2.14 for m128n128k32w2x4s3;
//   - the weight gradient with Co and Ci of 64–127: the 64×64 tile with
//     4 stages (one warpgroup, three blocks per SM; session 6): 2.76 ms at
//     RES 1024 C 64 against 4.08 for m64n64k32w2x2s4 (3.76 before the
//     lean pairs copies) and 4.02 for the same tile with 6 stages;
//   - gather GEMMs with 64–127 columns and at least hopperNarrowRows
//     rows: the 128×64 tile with 4 stages, two blocks per SM (step 13):
//     2.51 / 2.42 ms forward / input gradient at RES 1024 C 64 against
//     2.98 / 2.94 for the 256×64 tile of one block per SM and 3.46 / 3.79
//     for the best mma.sync tile (m128n64k32w2x2s4, session 4); smaller
//     row counts keep mma.sync (not measured). Where the warp-specialised
//     gathers are on, its three-stage twin of two tile descriptions serves
//     16-bit gathers instead, two persistent blocks per SM
//     (EnvNarrowPersistent, step 74: the forward gathers 1–2 % faster,
//     (1024, 64, 2) inference up to 5 %); tf32 gathers keep the
//     four-stage specialised tile (step 119);
//   - gather GEMMs of 129–192 rows and at least 128 columns over at most
//     kernels.MaxSpecializedTaps taps (the RES 8 sphere shell: 192 rows at
//     C 1024): the 192×128 warp-specialised tile where EnvTallGathers is
//     on, one row tile instead of two of 128 rows, so no product of a row
//     past M and one read of the weight per column tile (docs/PERF_NOTES.md
//     step 110; BenchmarkConvTiles RES 8 C 1024, device ms: forward 0.0591
//     → 0.0569, input gradient 0.0575 → 0.0487; at RES 16, 848 rows, it
//     ties the forward and loses the input gradient, 0.0976 against 0.0873
//     for the 128×256 tile, so more rows keep the 128-row tiles). It has no
//     plain twin, so larger kernels keep the 128-row tiles
//     (kernels.Tile.ServesTaps). Where EnvTallDeep is on (the default) it
//     is the tile's five-stage version (step 116: batched forward 0.0334 →
//     0.0313 ms, input gradient 0.0343 → 0.0320);
//   - 16-bit forward gather GEMMs (useGather) of 128–255 columns and at
//     least tallManyRows rows over at most kernels.MaxSpecializedTaps
//     taps, K a multiple of 8 (16-byte rows): the 16-bit 256×128
//     warp-specialised tile, whose swapped twin runs them, where
//     EnvSwappedWide16 is on (step 138: the RES 512 C 128 forward
//     0.965 against 1.058 device-ms for the 192×128 tile, f16; fp16
//     (512, 128, 2) inference −8.6 %, training −2.6 %). The 16-bit input
//     gradients (useGatherWT) take it only where EnvSwappedWT is on too
//     (their swapped twins, step 139), else keep the 192×128 tile;
//   - 16-bit gather GEMMs of 128–255 columns and at least tallManyRows
//     rows over at most kernels.MaxSpecializedTaps taps: the four-stage
//     192×128 warp-specialised tile where EnvTallMany is on (step 118;
//     BenchmarkConvTiles RES 512 C 128 f16, device ms, two runs: forward
//     1.129 → 1.125 and 1.118 → 1.090, input gradient 1.247 → 1.124 and
//     1.340 → 1.238 against the 128×128 six-stage tile; the five-stage
//     192-row tile 1.270 / 1.367; fp16 (512, 128, 2) training −1.8 %, bf16
//     −1.7 %, inference within the rounds' spread). At RES 128 and 256
//     (64 k and 252 k rows) the 192-row tile is 3–15 % slower, hence the
//     threshold. The tf32 192×128 tile did not gain at RES 512 (step 118b,
//     not kept);
//   - tf32 gather GEMMs of 128–255 columns and at least tallManyRows rows
//     over at most kernels.MaxSpecializedTaps taps, K a multiple of 4
//     (16-byte rows): the 256×128 warp-specialised tile, whose swapped twin
//     runs them, where EnvSwappedWide is on (docs/PERF_NOTES.md step 127);
//   - every gather tile needs one full 128-byte K stage per tap (kc ≥ BK).
//
// taps is the taps the reduction runs over (V of a masked or implicit
// gather, 1 for the explicit one and the weight gradient).
func hopperDefault(mth kernels.Math, use tileUse, rows, cols, kc, taps int64) string {
	// pick returns the first Hopper tile of bm × bn (and stages, unless 0)
	// with producers producer warps that fam has in mth and that fits kc.
	pick := func(bm, bn, stages, producers int, fam kernels.Family) string {
		for _, t := range kernels.HopperTiles {
			if t.BM == bm && t.BN == bn && (stages == 0 || t.Stages == stages) && t.Producers == producers &&
				t.Has(fam, mth) && (fam == kernels.Pairs || kc >= int64(t.BK)) {
				return t.Name()
			}
		}
		return ""
	}
	// gather picks a gather tile: its warp-specialised twin with
	// specializedProducers producer warps where the table has one and
	// specializedGathers is on, else the plain tile. The 128×256 tiles
	// (16-bit and tf32) and the two-blocks-per-SM 128×64 tile have such
	// twins (tf32, session 11 calls 1–2: inference steps (64, 1024, 2)
	// 5.8 → 5.3 ms, (256, 256, 2) 4.5 → 4.1). The 256×128 tile of
	// 128–255 columns has none (H200, session 9 call 4, BenchmarkConvTiles,
	// forward / input gradient ms: RES 32 C 1024 0.403 → 0.337 / 0.417 →
	// 0.358, RES 64 C 1024 1.261 → 1.141 / 1.352 → 1.184, RES 128 C 512
	// 1.091 → 0.978 / 1.166 → 1.009, RES 256 C 256 0.977 → 0.908 / 1.042 →
	// 0.950, RES 1024 C 64 2.335 → 2.171 / 2.293 → 2.171); there the
	// specialised 128×128 tile (6 stages) serves instead, since step 61
	// (session 28, call 3: RES 512 C 128 1.092 / 1.172 ms against 1.319 /
	// 1.471 for the plain 256×128, RES 256 C 128 0.303 / 0.325 against
	// 0.386 / 0.401; in session 9 it had lost, 1.460 / 1.591 against 1.351
	// / 1.390, before its producers' copies got lean).
	gather := func(bm, bn, stages int) string {
		if specializedGathers.Load() {
			if h := pick(bm, bn, stages, specializedProducers, kernels.Gather); h != "" {
				return h
			}
		}
		return pick(bm, bn, stages, 0, kernels.Gather)
	}
	if use.gathers() && cols >= 128 && rows > 128 && rows <= 192 && taps <= kernels.MaxSpecializedTaps &&
		specializedGathers.Load() && tallGathers.Load() {
		stages := 4
		if tallDeep.Load() {
			stages = 5
		}
		if h := pick(192, 128, stages, specializedProducers, kernels.Gather); h != "" {
			return h
		}
	}
	if (use == useGather || use == useGatherWT && swappedWT.Load()) && mth.ElemSize() == 2 && cols >= 128 && cols < 256 &&
		rows >= tallManyRows && kc%8 == 0 && taps <= kernels.MaxSpecializedTaps && specializedGathers.Load() && swappedWide16.Load() {
		if h := pick(256, 128, 4, specializedProducers, kernels.Gather); h != "" {
			return h
		}
	}
	if use.gathers() && cols >= 128 && cols < 256 && rows >= tallManyRows && taps <= kernels.MaxSpecializedTaps &&
		specializedGathers.Load() && tallMany.Load() {
		if h := pick(192, 128, 4, specializedProducers, kernels.Gather); h != "" {
			return h
		}
	}
	if use.gathers() && mth == kernels.TF32 && cols < 256 && !tf32Narrow.Load() {
		return ""
	}
	if use == useGather && mth == kernels.TF32 && cols >= 128 && cols < 256 && rows >= tallManyRows && kc%4 == 0 &&
		taps <= kernels.MaxSpecializedTaps && specializedGathers.Load() && swappedWide.Load() {
		if h := pick(256, 128, 4, specializedProducers, kernels.Gather); h != "" {
			return h
		}
	}
	switch {
	case use.gathers() && cols >= 256:
		return gather(128, 256, 0)
	case use.gathers() && cols >= 128:
		if specializedGathers.Load() {
			if h := pick(128, 128, 6, specializedProducers, kernels.Gather); h != "" {
				return h
			}
		}
		return gather(256, 128, 0)
	case use.gathers() && cols >= 64 && rows >= hopperNarrowRows:
		if narrowPersistent.Load() && mth.ElemSize() == 2 {
			if h := gather(128, 64, 3); h != "" {
				return h
			}
		}
		return gather(128, 64, 4)
	case use == usePairs && rows >= 256 && cols >= 256:
		return pick(128, 256, 0, 0, kernels.Pairs)
	case use == usePairs && rows >= 128 && cols >= 128:
		return pick(128, 128, 6, 0, kernels.Pairs)
	case use == usePairs && rows >= 64 && cols >= 64 && rows < 128 && cols < 128:
		return pick(64, 64, 4, 0, kernels.Pairs)
	}
	return ""
}

// tf32ClearMaxBytes is the largest weight whose cleared copy a tf32 forward
// (or an input gradient whose tile reads the weight transposed in the
// kernel; the other tiles multiply a cleared transpose) makes: the copy lives
// beside the output for the duration of the gather, so larger weights
// (V·Ci·Co float32 over 32 MiB: C ≥ 1024 at 3×3×3, 113 MB) keep their bits
// rather than raise the step's memory peak. The gain was measured at C 256,
// a 7.1 MB weight (docs/PERF_NOTES.md, step 108), and at C 512, 28.3 MB
// (step 129).
const tf32ClearMaxBytes = 32 << 20

// specializedProducers is the producer warps of the warp-specialised
// gather tiles hopperDefault takes.
const specializedProducers = 4

// EnvNoHopper names the environment variable that, set to 1 when the
// engine opens, keeps the fixed heuristic and the autotuner off the Hopper
// tiles (Options.Tile can still force them).
const EnvNoHopper = "FLEXGEMM_NO_HOPPER"

// defaultTiles returns the tiles the fixed heuristic tries, best first,
// for a GEMM of use with an output of rows × cols and a reduction of kc
// per tap over taps taps, in arithmetic mth on sms multiprocessors; hopper says whether
// the Hopper tiles of mth are loaded (then they come first for the GEMMs
// they suit, see hopperDefault). The autotuner ranks its
// candidates and picks its heuristic with the same function
// (preferredTiles in tune.go), so both always agree.
func defaultTiles(mth kernels.Math, use tileUse, rows, cols, kc, taps, sms int64, hopper bool) []string {
	if hopper {
		if h := hopperDefault(mth, use, rows, cols, kc, taps); h != "" {
			return append([]string{h}, defaultTiles(mth, use, rows, cols, kc, taps, sms, false)...)
		}
	}
	narrow := mth.ElemSize() == 2
	if use == usePairs && narrow && rows >= pairsWideMin && cols >= pairsWideMin {
		return []string{pairsWideTile, "m64n64k32w2x2s4", "m128n64k32w2x2s4"}
	}
	if use == usePairs && mth == kernels.TF32 && rows >= 128 && cols >= 128 {
		// The tf32 weight gradient (mma.sync: tf32 wgmma reads K-major
		// operands only, and kernels that transpose each stage for it were
		// slower, PERF_NOTES step 24). H200, session 11 call 3,
		// BenchmarkConvTiles: RES 64 C 1024 3.66 ms against 5.22 for
		// m64n64k32w2x2s4, RES 256 C 256 3.71 against 5.61 (3.32 and 3.35
		// since the tf32 operands are no longer rounded, step 25).
		return []string{"m128n128k32w2x4s3", "m128n64k32w2x2s4", "m64n64k32w2x2s4"}
	}
	switch {
	case cols <= 32:
		return []string{"m64n32k32w2x1s4", "m64n64k32w2x2s4"}
	case cols <= 64:
		if rows >= 128*2*sms {
			return []string{"m128n64k32w2x2s4", "m64n64k32w2x2s4"}
		}
		return []string{"m64n64k32w2x2s4", "m128n64k32w2x2s4"}
	case rows*((cols+127)/128) >= 128*sms:
		if use.gathers() && narrow && kc >= 64 {
			return []string{gatherDeepTile, "m128n128k32w2x4s3", "m128n64k32w2x2s4", "m64n64k32w2x2s4"}
		}
		return []string{"m128n128k32w2x4s3", "m128n64k32w2x2s4", "m64n64k32w2x2s4"}
	default:
		return []string{"m64n64k32w2x2s4", "m128n64k32w2x2s4"}
	}
}

// chooseTile picks the tile configuration for a GEMM of use in arithmetic
// mth with an output of rows × cols and a reduction of kc per tap over
// taps taps (see tileUse): o.Tile if set, else the first of defaultTiles with o.TileRows
// rows (if set) that mth supports. A forced tile that mth has no kernel
// for (a Narrow tile in F32 or TF32, a Hopper tile whose BK elements of
// mth do not fill 128 bytes, or a Hopper tile on a device without them)
// is an error naming the tile, whatever the problem's size (also for
// N = 0, where nothing would be launched). A forced tf32 Hopper tile
// applies to the gather GEMMs (forward, input gradient) only: the weight
// gradient, which has no tf32 Hopper kernel, takes its default tile.
func (e *Engine) chooseTile(o Options, mth kernels.Math, use tileUse, rows, cols, kc, taps int64) (kernels.Tile, error) {
	if o.Tile != "" {
		t, err := kernels.ParseTile(o.Tile)
		if err != nil {
			return t, fmt.Errorf("%w: %v", sparse.ErrShape, err)
		}
		if !t.Supports(mth) {
			if t.Hopper {
				return t, fmt.Errorf("%w: Hopper tile %s is not instantiated for %v (its BK elements must fill 128 bytes)", sparse.ErrShape, t.Name(), mth)
			}
			return t, fmt.Errorf("%w: tile %s is not instantiated for %v (16-bit arithmetics only)", sparse.ErrShape, t.Name(), mth)
		}
		if t.Hopper && !e.d.hopperTiles(mth) {
			return t, fmt.Errorf("%w: Hopper tile %s needs a compute capability 9.0 GPU whose driver compiles sm_90a PTX (%s is sm_%d%d)",
				sparse.ErrShape, t.Name(), e.d.info.Name, e.d.info.Major, e.d.info.Minor)
		}
		if o.TileRows > 0 && t.BM != o.TileRows {
			return t, fmt.Errorf("%w: tile %s has %d rows but TileRows is %d", sparse.ErrShape, o.Tile, t.BM, o.TileRows)
		}
		if !use.gathers() && !t.Has(kernels.Pairs, mth) {
			o.Tile = ""
			return e.chooseTile(o, mth, use, rows, cols, kc, taps)
		}
		if use.gathers() && !t.ServesTaps(taps) {
			return t, errTooManyTaps(t, taps)
		}
		return t, nil
	}
	fits := func(t kernels.Tile) bool { return t.Supports(mth) && (o.TileRows == 0 || t.BM == o.TileRows) }
	for _, name := range defaultTiles(mth, use, rows, cols, kc, taps, int64(e.d.info.SMs), e.hopperDefaults(mth)) {
		if t, err := kernels.ParseTile(name); err == nil && fits(t) {
			return t, nil
		}
	}
	for _, t := range kernels.Tiles {
		if fits(t) {
			return t, nil
		}
	}
	var have []int
	for _, t := range kernels.Tiles {
		if t.Supports(mth) && !slices.Contains(have, t.BM) {
			have = append(have, t.BM)
		}
	}
	slices.Sort(have)
	return kernels.Tile{}, fmt.Errorf("%w: no %v tile configuration has %d rows (have %v)", sparse.ErrShape, mth, o.TileRows, have)
}

// chooseSplits returns the split-K factor of a gather GEMM of blocks
// output tiles of tile t, kIters K iterations each: the user's, or the
// heuristic's (heuristicSplits).
func (e *Engine) chooseSplits(user int, t kernels.Tile, blocks, kIters int64) int {
	if user > 0 {
		return user
	}
	return heuristicSplits(t, blocks, kIters, int64(e.d.info.SMs))
}

// Weight-gradient split heuristic. The pairs kernels run one deep
// reduction per (tile, tap) over that tap's pair list (tens of thousands of
// iterations on large scenes) and are bound by the latency of their row
// gathers, not by arithmetic: throughput grows with the blocks resident per
// SM. So the heuristic aims at pairsWaves blocks per SM (about two waves at
// the 3–6 blocks per SM the pairs tiles fit), keeping at least
// pairsMinIters iterations per split and the float32 partials within
// pairsPartBytes. A Hopper tile holds one block per SM and keeps its
// gathers in flight through a deep pipeline instead: it aims at
// hopperPairsWaves blocks per SM.
const (
	pairsWaves          = 8
	hopperPairsWaves    = 2
	hopperBalancedWaves = 6 // balancedPairsSplits' aim for a Hopper tile
	pairsMaxSplits      = 64
	pairsMinIters       = 8
	pairsPartBytes      = 512 << 20
)

// choosePairsSplits returns the split-K factor of a weight gradient with
// blocks (tile, tap) blocks of tile t of kIters iterations each, whose
// output has outElems elements: the user's, or the heuristic's above.
func (e *Engine) choosePairsSplits(user int, t kernels.Tile, blocks, kIters, outElems int64) int {
	if user > 0 {
		return user
	}
	return pairsSplits(t, blocks, kIters, outElems, int64(e.d.info.SMs))
}

// pairsSplits is the weight-gradient split heuristic of choosePairsSplits
// for tile t on sms multiprocessors; the autotuner ranks its candidates
// with the same function (tune.go), so both always agree.
func pairsSplits(t kernels.Tile, blocks, kIters, outElems, sms int64) int {
	if blocks <= 0 || kIters <= 1 {
		return 1
	}
	s := ceilDiv(pairsTarget(t, sms), blocks)
	s = min(s, max(kIters/pairsMinIters, 1))
	return int(max(capPairsSplits(s, outElems, pairsPartBytes), 1))
}

// capPairsSplits bounds a weight-gradient split factor s by
// pairsMaxSplits and, for an output of outElems elements (0: unknown), by
// partBytes of float32 partials (a cap of at least 1).
func capPairsSplits(s, outElems, partBytes int64) int64 {
	s = min(s, pairsMaxSplits)
	if outElems > 0 {
		s = min(s, max(partBytes/(4*outElems), 1))
	}
	return s
}

// balancedPairsSplits is the fixed heuristic's split of a per-tap weight
// gradient with tiles output tiles per tap, whose longest tap takes
// longest reduction steps of tile t and all taps together total: every
// block gets about the same number of steps (chunk) instead of every tap
// the same number of splits, so the long taps (the centre tap of a
// submanifold map has a pair per voxel, the others far fewer) no longer
// finish last. chunk spreads tiles·total steps over the blocks the
// heuristic aims at (pairsSplits' waves), at least pairsMinIters; the
// longest tap gets splits = ⌈longest/chunk⌉ slices (capped like
// pairsSplits: pairsMaxSplits and partBytes of float32 partials, then
// chunk grows to fit), a tap of n steps ⌈n/chunk⌉ of them, and the kernel
// writes zeros into a tap's unused slices (PairsParams.chunk). chunk = 0
// with splits = 1: no split. A Hopper tile (one block per SM) aims at
// hopperBalancedWaves blocks per SM instead, and is not split at all when
// its tiles·taps blocks already reach that many: H200, session 7,
// BenchmarkConvTiles, m128n256k64w8x1s4h: RES 128 C 512 (216 blocks)
// 1.097 ms at the two-wave target's 3 slices against 0.959 with 4 slices
// of every tap (864 blocks); RES 16–64 C 1024 (864 blocks) fastest
// unsplit (RES 64: 0.829 ms, 0.972 at 2 slices).
func balancedPairsSplits(t kernels.Tile, tiles, taps, longest, total, outElems, partBytes, sms int64) (splits int, chunk int64) {
	if longest <= 1 || tiles <= 0 {
		return 1, 0
	}
	target := pairsTarget(t, sms)
	if t.Hopper {
		target = hopperBalancedWaves * sms
		if tiles*taps >= target {
			return 1, 0
		}
	}
	chunk = max(ceilDiv(tiles*total, target), pairsMinIters)
	s := capPairsSplits(ceilDiv(longest, chunk), outElems, partBytes)
	if s <= 1 {
		return 1, 0
	}
	return int(s), max(chunk, ceilDiv(longest, s))
}

// windowPairsSplits is the split-K factor that gives the per-tap weight
// gradient over rows rows (output rows of the map, whose pair lists are in
// row order) DRAM locality: slice z of every tap covers the pairs of the
// output rows [z, z+1)·rows/s (in chunks of pairsChunk rows, through the
// lists' chunk offsets, PairsParams.off; with EnvNoRowSlices, or without
// offsets, an equal share of every tap's pairs, which covers about those
// rows), and blocks run z-major, so the blocks resident at any time read
// the dy and x rows of a few consecutive windows of windowRows rows,
// shared by all taps through L2, instead of the whole tensors once per
// tap. It applies when the operands (rows·(M+N) elements of esz bytes)
// reach minBytes (pairsWindowMinBytes: the L2 holds less);
// the float32 partials of outElems each are capped at half the operands'
// bytes (and pairsPartBytes). 0 where it does not apply. Measured (H200,
// BenchmarkConvTiles, forced splits): session 6, RES 1024 C 64 2.64 →
// 2.47 ms at 256 slices (DRAM reads 9.2 → 7.5 GB), RES 512 C 128 1.71 →
// 1.45 at 64, RES 256 C 256 1.29 → 1.19 at 64; tf32 RES 1024 C 64
// (mma.sync) 7.38 → 6.57 at 256. Session 7 (Hopper tiles; the bench's
// training peaks now 0.2–0.3 GiB under FlexGEMM's at RES 256–1024, so the
// cap went from an eighth to half the operands): RES 256 C 256 1.153 ms
// (the balanced split) → 1.046 at 16 slices, 1.090 at 64; RES 512 C 128
// 1.386 at 37 → 1.353 at 150; RES 1024 C 64 2.19–2.20 from 297 to 600
// (Nsight Compute: 1,200 slices read 5.8 GB from DRAM instead of 7.4, for
// 2.02 ms of kernel against 2.14, and the partials cost it back). Now 18,
// 126 and 503 slices there.
func windowPairsSplits(rows, M, N, esz, outElems, minBytes, windowRows int64) int {
	if rows*(M+N)*esz < minBytes || outElems <= 0 {
		return 0
	}
	s := min(ceilDiv(rows, windowRows), max(halfOperandsPartBytes(rows, M, N, esz)/(4*outElems), 1))
	if s < 2 {
		return 0
	}
	return int(s)
}

// halfOperandsPartBytes is the float32 partials budget of a weight
// gradient whose operands are rows·(M+N) elements of esz bytes: half the
// operands, at most pairsPartBytes (windowPairsSplits, and runPairs'
// balanced split of 4-byte operands).
func halfOperandsPartBytes(rows, M, N, esz int64) int64 {
	return min(pairsPartBytes, rows*(M+N)*esz/2)
}

// pairsWindowMinBytes is windowPairsSplits' threshold (its window,
// pairsWindowRows, is in env.go).
const pairsWindowMinBytes = 192 << 20

// pairsTarget is the number of blocks the weight-gradient split
// heuristics aim at with tile t on sms multiprocessors: pairsWaves per SM,
// hopperPairsWaves for a Hopper tile.
func pairsTarget(t kernels.Tile, sms int64) int64 {
	if t.Hopper {
		return hopperPairsWaves * sms
	}
	return pairsWaves * sms
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// gatherJob is one launch of the gather family (see kernels/gemm.cuh).
type gatherJob struct {
	math                   kernels.Math
	tile                   kernels.Tile
	in, w, bias            devPtr
	tbl                    devPtr // 0: identity
	slotTbl                bool   // tbl holds one entry per row (per-tap gathers, pertap.go)
	wt                     bool   // w is stored [Kc, V, N]: read transposed (input gradient)
	mirror                 bool   // table tap v multiplies weight tap V−1−v (submanifold input gradient over Nbr)
	order, tileSeg, tileTp devPtr // masked, or 0
	tileSched              devPtr // masked: the row tiles' launch order, or 0 (index order)
	M, N, Kc, V            int64
	splitAlg               bool // split-K algorithm (splits chosen here)
	userSplits             int
	out                    *Buffer
	tmp                    rawBuf // im2col matrix of Explicit, freed by the caller
	// perTap: the masked split-K gather runs per tap over these tables in
	// perTapGroups groups of tiles (gatherInput sets them, runGather hands
	// the job to runPerTap), or nil.
	perTap       *perTapTables
	perTapGroups int64
	// perTapAccumulate: the per-tap sums add to the float32 result
	// instead of starting at 0 (the sparse half of a hybrid gather).
	perTapAccumulate bool
	// hybrid: the masked gather multiplies the dense taps of the tile
	// tables given and the sparse pairs of these tables (of map
	// hybridMap) run per tap after it (hybrid.go; gatherInput sets them,
	// runGather hands the job to runHybrid), or nil.
	hybrid    *hybridTables
	hybridMap *kmap.Map
}

// runGather launches the gather GEMM (and the split-K reduction). Worker
// only.
func (e *Engine) runGather(j gatherJob) error {
	d := e.d
	if j.M == 0 || j.N == 0 {
		return nil
	}
	if j.perTap != nil {
		return e.runPerTap(j)
	}
	if j.hybrid != nil {
		return e.runHybrid(j)
	}
	t := j.tile
	if !t.Supports(j.math) {
		return fmt.Errorf("%w: tile %s is not instantiated for %v (16-bit arithmetics only)", sparse.ErrShape, t.Name(), j.math)
	}
	if t.Producers > 0 && j.V > kernels.MaxSpecializedTaps {
		// A warp-specialised block holds the indices of all its taps in
		// shared memory; larger kernels run the same tile without
		// producer warps (chooseTile gives none without such a twin).
		plain, ok := t.Plain()
		if !ok {
			return errTooManyTaps(t, j.V)
		}
		t = plain
	}
	tiles := ceilDiv(j.M, int64(t.BM)) * ceilDiv(j.N, int64(t.BN))
	splits, skBlocks := 1, 0
	if j.splitAlg {
		if skBlocks = d.streamK(t, j.math, tiles, ceilDiv(j.N, int64(t.BN)), j.userSplits); skBlocks == 0 {
			splits = e.chooseSplits(j.userSplits, t, tiles, j.V*ceilDiv(j.Kc, int64(t.BK)))
		}
	}
	esz := int64(j.math.ElemSize())
	p := gatherParams{
		X: uint64(d.addr(j.in)), W: uint64(d.addr(j.w)), Bias: uint64(j.bias), Y: uint64(j.out.ptr),
		Tbl: uint64(j.tbl), Order: uint64(j.order), TileSeg: uint64(j.tileSeg), TileTap: uint64(j.tileTp),
		TileSched: uint64(j.tileSched), M: j.M, N: j.N, Kc: j.Kc, V: j.V, Splits: int64(splits),
	}
	if (j.Kc*esz)%16 == 0 && (!j.wt || (j.N*esz)%16 == 0) {
		p.Vec = 1
	}
	if j.slotTbl {
		p.SlotTbl = 1
	}
	if j.wt {
		p.WT = 1
	}
	if j.mirror {
		p.Mirror = 1
	}
	fused := splits > 1 && skBlocks == 0 && d.fusesSplitReduce(t, j.math, tiles, splits)
	var part rawBuf
	if splits > 1 {
		n := int64(splits) * j.M * j.N
		if fused {
			// The tiles' slots in fragment order (gather_ws.cuh split_reduce).
			n = int64(splits) * tiles * int64(t.BM) * int64(t.BN)
			p.SplitCtr = uint64(d.splitCtr)
			d.fusedSplitLaunches++
		}
		var err error
		if part, err = d.allocPartials(n); err != nil {
			return err
		}
		defer d.freeTemp(part)
		p.Part = uint64(part.ptr)
	}
	plain := kernels.KernelName(kernels.Gather, j.math, t)
	name := plain
	if j.wt {
		name = kernels.TransposedName(j.math, t)
	}
	if skBlocks > 0 {
		name = kernels.StreamKName(j.math, t, j.wt)
	}
	if d.halfSkip && t.HasHalfSkip(j.math) && skBlocks == 0 && splits == 1 && !j.wt && j.tbl != 0 {
		// The half-skip twin (gather_ws.cuh HS): same arguments, same bits.
		name = kernels.HalfSkipName(j.math, t)
		d.halfSkipLaunches++
	}
	threads := t.Threads()
	if d.registerA && name == plain && t.HasRegisterA(j.math) && !j.wt &&
		p.Vec == 1 && j.Kc%int64(t.BK) == 0 {
		// The register-A twin (gather_ws.cuh RA): its weight permuted
		// inside 32-column chunks, its producer warpgroup lending registers to
		// the consumers.
		wp, err := e.tf32OperandRA(j.w, j.N*j.V*j.Kc)
		if err != nil {
			return err
		}
		defer d.freeTemp(wp)
		j.w, p.W = wp.ptr, uint64(wp.ptr)
		name, threads = kernels.RegisterAName(j.math, t), t.RegisterAThreads()
		d.registerALaunches++
	}
	if d.swapped && p.Vec == 1 && splits == 1 && skBlocks == 0 {
		// The swapped twin (gather_ws.cuh SW): same arguments, a consumer
		// warpgroup per 64 columns multiplying the transposed tile; for a
		// 16-bit input gradient (EnvSwappedWT, step 139) the weight's
		// MN-major stage is wgmma's A, read transposed.
		sw := ""
		switch {
		case !j.wt && name == plain && t.HasSwapped(j.math):
			sw = kernels.SwappedName(j.math, t)
		case j.wt && swappedWT.Load() && name == kernels.TransposedName(j.math, t) && t.HasSwappedTransposed(j.math):
			sw = kernels.SwappedTransposedName(j.math, t)
		}
		if sw != "" {
			name, threads = sw, t.SwappedThreads()
			d.swappedLaunches++
		}
	}
	args := []any{&p}
	grid := dim3{X: int(tiles), Y: splits}
	if t.Producers > 0 {
		// A warp-specialised tile takes its weight stages by bulk tensor
		// copies (16-byte rows only; otherwise the map stays zero and its
		// producers copy by element).
		var maps wsMaps
		if p.Vec == 1 {
			if err := weightTensorMap(&maps.W, d.addr(j.w), j, t); err != nil {
				return fmt.Errorf("%w: %s: %v", ErrLaunch, name, err)
			}
		}
		// Stream-K where streamK says so; otherwise an unsplit tile of
		// two descriptions per block (two heads sharing one index where
		// EnvSharedIndex is on) runs persistent blocks where there are
		// more tiles than resident blocks: a block per SM (two for a tile
		// of two blocks per SM) takes the next tile from a counter while
		// it stores the last (gather_ws.cuh).
		if skBlocks > 0 {
			slots, err := d.allocPartials(int64(skBlocks) * int64(t.BM) * int64(t.BN))
			if err != nil {
				return err
			}
			defer d.freeTemp(slots)
			flags, err := d.allocZeroI32(int64(skBlocks) * int64(t.WM*t.WN))
			if err != nil {
				return err
			}
			defer d.freeTemp(flags)
			args = append(args, &maps, &streamKArgs{Slots: uint64(slots.ptr), Flags: uint64(flags.ptr)})
			grid.X = skBlocks
		} else {
			next := devPtr(0)
			resident := d.info.SMs * t.BlocksPerSM(kernels.Gather, j.math)
			twoDescriptions := t.Descriptions(j.math) == 2 && (t.Indices(j.math) == 2 || sharedIndex.Load())
			if persistentGathers.Load() && splits == 1 && twoDescriptions && tiles > int64(resident) {
				ctr, err := d.allocZeroI32(1)
				if err != nil {
					return err
				}
				defer d.freeTemp(ctr)
				next = ctr.ptr
				grid.X = resident
			}
			args = append(args, &maps, next)
		}
	}
	if err := d.launch(name, grid, dim3{X: threads}, kernels.SmemBytes(kernels.Gather, j.math, t), args...); err != nil {
		return err
	}
	if splits > 1 && !fused {
		return e.reduce(part.ptr, j.out, j.bias, j.M, j.N, splits)
	}
	return nil
}

// fusesSplitReduce reports whether a split-K gather of `tiles` tiles of
// tile t, splits > 1 each, sums its partials in the kernel
// (fg::split_reduce): a warp-specialised tile, every block of the launch
// resident at once (the split blocks of a tile wait for each other), at
// most splitCounterTiles tiles, no side-stream work pending, and the
// switch on (EnvFusedSplitReduce). Beside a weight gradient on the side
// stream (an input gradient, doBeside) the other kernel's blocks hold
// SMs that the split blocks need, and a block waiting for a partner that
// is not yet resident idles its SM: there the reduction kernel sums.
// Measured (H200, session 31, docs/PERF_NOTES.md step 67): inference at
// RES 16 C 1024 2 % faster, the other small steps within ±1 %; the sums
// in the kernel cost about 4.5 µs a gather, most of the reduction
// kernel's 6.5.
func (d *Device) fusesSplitReduce(t kernels.Tile, mth kernels.Math, tiles int64, splits int) bool {
	return fusedSplitReduce.Load() && t.Producers > 0 && tiles <= splitCounterTiles &&
		tiles*int64(splits) <= int64(d.info.SMs)*int64(t.BlocksPerSM(kernels.Gather, mth)) &&
		len(d.side.ends) == 0 && !d.side.in
}

// splitCounterTiles is the most tiles of a split-K gather that sums its
// partials in the kernel: the arrival and departure counters
// Device.splitCtr holds. Such gathers run on the main stream only
// (fusesSplitReduce), one after another, so one set serves them all.
const splitCounterTiles = 1024

// streamK returns the blocks of a stream-K launch (gather_ws.cuh) of a
// split-K gather of `tiles` tiles of tile t, tilesN of them per row tile,
// or 0 where it runs a tile (or split slice) per block instead. The blocks
// are groups of tilesN, as many groups as fit the SMs (the tests may ask
// for fewer blocks). Stream-K needs a warp-specialised tile alone on its
// SM (at most a block per SM, all resident: a block waits for earlier
// groups), no split count of the user's, and from half a tile to
// streamKTilesPerSM tiles per SM (with fewer, most tiles would be cut in
// many pieces, which the split-K heuristic's reduction sums faster).
func (d *Device) streamK(t kernels.Tile, m kernels.Math, tiles, tilesN int64, userSplits int) int {
	if userSplits > 0 || !t.HasStreamK(m) || tilesN <= 0 {
		return 0
	}
	sms := int64(d.info.SMs)
	blocks := sms
	if d.streamKBlocks > 0 {
		blocks = min(int64(d.streamKBlocks), sms)
	} else if 2*tiles < sms || tiles > int64(d.streamKTilesPerSM)*sms {
		return 0
	}
	return int(blocks / tilesN * tilesN)
}

// weightTensorMap encodes the TMA descriptor of gather job j's weight at
// addr for tile t (fg::WsMaps): [N][V][Kc] in boxes of BK × 1 × BN (one
// K-major stage), or, read transposed, [Kc][V][N] in boxes of 64 × 1 × BK
// (one 64-column block of an MN-major stage).
func weightTensorMap(out *[16]uint64, addr devPtr, j gatherJob, t kernels.Tile) error {
	esz := int64(j.math.ElemSize())
	if j.wt {
		return tensorMap3D(out, addr, int(esz), [3]int64{j.N, j.V, j.Kc}, [2]int64{j.N * esz, j.V * j.N * esz}, [3]int{128 / int(esz), 1, t.BK})
	}
	return tensorMap3D(out, addr, int(esz), [3]int64{j.Kc, j.V, j.N}, [2]int64{j.Kc * esz, j.V * j.Kc * esz}, [3]int{t.BK, 1, t.BN})
}

// reduce sums split-K partials [splits, rows, cols] into out (+ bias).
func (e *Engine) reduce(part devPtr, out *Buffer, bias devPtr, rows, cols int64, splits int) error {
	name, g, b, vec, err := e.d.reduceLaunch("spconv_reduce_", part, out, rows*cols, cols)
	if err != nil {
		return err
	}
	return e.d.launch(name, g, b, 0, part, out.ptr, bias, rows, cols, int64(splits), vec)
}

// pairsJob is one launch of the pairs family. out has the operands' dtype
// or, for float16/bfloat16 operands, float32 (no rounding of the float32
// accumulators).
type pairsJob struct {
	math       kernels.Math
	tile       kernels.Tile
	a, b       devPtr // [*, M], [*, N]
	ia, ib     devPtr // 0: identity
	seg        devPtr // [V+1] int64 ([taps+1] with mirror), or 0 with K
	off        devPtr // with seg, the first pair of each chunk of pairsChunk output rows per tap (Device.pairs), or 0
	M, N, V, K int64
	mirror     bool      // seg holds the taps before the centre (see fg::PairsParams.mirror; K = rows)
	maxPairs   int64     // longest segment, for the split heuristic
	stats      pairStats // per-tap segment lengths (seg != 0), for the balanced split
	splitAlg   bool
	userSplits int
	out        *Buffer // [M, V·N]
	// bias, if set (a float32 [1, M] Buffer; mirror lists and a 16-bit
	// Hopper tile only, see fusesBias), gets the sums of a over the
	// centre tap's pairs, every row of a once: the bias gradient of the
	// layer whose output gradient a is.
	bias *Buffer
}

// pairsTapSlices mirrors fg::PairsTap::slices: the split slices a tap of
// steps reduction steps uses in a weight gradient of splits slices —
// every one, or with the balanced split's chunk > 0 about one per chunk
// steps, at least one (the kernel leaves the others unwritten and
// spconv_reduce_taps_* unread).
func pairsTapSlices(steps, chunk, splits int64) int64 {
	if chunk <= 0 {
		return splits
	}
	return min(splits, max(1, ceilDiv(steps, chunk)))
}

// fusesBias reports whether the weight gradient's pairs kernel of tile t
// in arithmetic mth sums the bias gradient itself (pairsJob.bias): over
// the half lists of a submanifold map (mirror: the centre tap is the
// identity over every output row) with a 16-bit Hopper tile, whose
// kernels add those sums in their centre tap's blocks (fg::pairs_gemm).
func fusesBias(t kernels.Tile, mth kernels.Math, mirror bool) bool {
	return mirror && t.Hopper && mth.ElemSize() == 2
}

func (e *Engine) runPairs(j pairsJob) error {
	d := e.d
	if j.M == 0 || j.N == 0 || j.V == 0 {
		return nil
	}
	t := j.tile
	if !t.Has(kernels.Pairs, j.math) {
		return fmt.Errorf("%w: tile %s has no %v weight-gradient kernel", sparse.ErrShape, t.Name(), j.math)
	}
	tiles := ceilDiv(j.M, int64(t.BM)) * ceilDiv(j.N, int64(t.BN))
	splits, chunk := 1, int64(0)
	rowSlices := false
	switch {
	case !j.splitAlg:
	case j.userSplits == 0 && j.seg != 0 && len(j.stats.iters) > 0:
		// Windows where they apply (large operands), else the balanced split.
		if w := windowPairsSplits(j.K, j.M, j.N, int64(j.math.ElemSize()), j.M*j.V*j.N, d.pairsWindowMin, d.pairsWindowRows); w > 0 {
			splits = w
			rowSlices = j.off != 0 && !d.noRowSlices
		} else {
			longest, total := j.stats.itersOf(int64(t.BK))
			partBytes := int64(pairsPartBytes)
			if j.math.ElemSize() == 4 {
				// 4-byte operands: float32 partials as large as the
				// operands lifted the training step's peak above
				// FlexGEMM's (tf32 (64, 1024, 2) with the balanced split
				// of the 128×128 tile: 0.87 against 0.77 GiB, session 11
				// call 5), so they get the window split's cap, half the
				// operands.
				partBytes = halfOperandsPartBytes(j.K, j.M, j.N, 4)
			}
			splits, chunk = balancedPairsSplits(t, tiles, j.V, longest, total, j.M*j.V*j.N, partBytes, int64(d.info.SMs))
		}
	default:
		splits = e.choosePairsSplits(j.userSplits, t, tiles*j.V, ceilDiv(j.maxPairs, int64(t.BK)), j.M*j.V*j.N)
	}
	esz := int64(j.math.ElemSize())
	p := pairsParams{
		A: uint64(d.addr(j.a)), B: uint64(d.addr(j.b)), Out: uint64(j.out.ptr),
		IA: uint64(j.ia), IB: uint64(j.ib), Seg: uint64(j.seg),
		M: j.M, N: j.N, V: j.V, K: j.K, Splits: int64(splits), Chunk: chunk,
	}
	if j.mirror {
		p.Mirror = 1
	}
	if rowSlices {
		p.Off, p.Nc, p.OffRows = uint64(j.off), ceilDiv(j.K, pairsChunk), pairsChunk
	}
	if j.mirror && j.V == 27 {
		// The blocks in groups of splits, the long taps first
		// (fg::pairs_block_of; 0: launch order).
		p.OrderGroups = pairsOrderGroupsFor(splits, rowSlices, d.pairsOrderGroups)
	}
	if (j.M*esz)%16 == 0 && (j.N*esz)%16 == 0 {
		p.Vec = 1
	}
	var part rawBuf
	ordered := d.orderedSplits(j, t, splits, chunk)
	switch {
	case ordered:
		// The splits add into a float32 sum in split order
		// (PairsParams.tickets): the float32 result itself, or a scratch
		// sum [M, V, N] whose last split rounds into the 16-bit result;
		// no partials, no reduction.
		tk, err := d.allocTemp(4 * j.V * tiles)
		if err != nil {
			return err
		}
		defer d.freeTemp(tk)
		if err := memsetD8(tk.ptr, 0, tk.size, d.stream); err != nil {
			return err
		}
		p.Part, p.Tickets = uint64(j.out.ptr), uint64(tk.ptr)
		if j.out.dtype != sparse.Float32 {
			// Split 0 writes 0 + its products: the scratch needs no
			// zeros (and poisoned partials show a read of it).
			if part, err = d.allocPartials(j.M * j.V * j.N); err != nil {
				return err
			}
			defer d.freeTemp(part)
			p.Part = uint64(part.ptr)
		}
		d.orderedSplitLaunches++
	case splits > 1:
		var err error
		if part, err = d.allocPartials(int64(splits) * j.M * j.V * j.N); err != nil {
			return err
		}
		defer d.freeTemp(part)
		p.Part = uint64(part.ptr)
	case esz == 2 && j.out.dtype == sparse.Float32:
		// Narrow operands, float32 result: the kernel writes its float32
		// accumulators through the partials path straight into out.
		p.Part = uint64(j.out.ptr)
	}
	if j.V > 65535 {
		return fmt.Errorf("%w: kernel volume %d exceeds 65535", sparse.ErrShape, j.V)
	}
	var biasSlices int64
	if j.bias != nil {
		if !j.mirror || !t.Hopper || esz != 2 {
			return fmt.Errorf("cudaext: internal error: a bias gradient in a weight gradient of tile %s (mirror %v)", t.Name(), j.mirror)
		}
		// The centre tap's slices (the identity over K rows); each
		// writes its row sums.
		biasSlices = pairsTapSlices(ceilDiv(j.K, int64(t.BK)), chunk, int64(splits))
		bp, err := d.allocPartials(biasSlices * j.M)
		if err != nil {
			return err
		}
		defer d.freeTemp(bp)
		p.BiasPart = uint64(bp.ptr)
	}
	d.lastPairs, d.lastPairsBK = p, int64(t.BK)
	name := kernels.KernelName(kernels.Pairs, j.math, t)
	if err := d.launch(name, dim3{X: int(tiles), Y: int(j.V), Z: splits}, dim3{X: t.Threads()}, kernels.SmemBytes(kernels.Pairs, j.math, t), &p); err != nil {
		return err
	}
	if j.bias != nil {
		// The slices' sums in slice order: BiasGrad's second stage.
		if err := d.biasGradSum(devPtr(p.BiasPart), j.bias, biasSlices, j.M, "f32"); err != nil {
			return err
		}
	}
	switch {
	case ordered:
		return nil
	case splits > 1 && chunk > 0:
		// The balanced split: each tap's own slices only.
		return e.reduceTaps(part.ptr, j.out, p, int64(t.BK))
	case splits > 1:
		// The reduction rounds to out's dtype: float32 or the operands'.
		return e.reduce(part.ptr, j.out, 0, j.M, j.V*j.N, splits)
	}
	return nil
}

// orderedSplits reports whether pairs job j, launched on tile t with
// splits split slices (chunk: the balanced split's, 0 otherwise), adds its
// slices into a float32 sum in split order in the kernel
// (fg::pairs_store_ordered) instead of writing partials for
// spconv_reduce: with Device.orderedPairs (EnvOrderedSplits), a 16-bit
// Hopper tile of at most 8 warps, every tap using every slice (chunk 0),
// and whole tiles whose rows the kernel stores 16 bytes at a time; the
// result float32 or in the operands' type (rounded by the last split).
func (d *Device) orderedSplits(j pairsJob, t kernels.Tile, splits int, chunk int64) bool {
	return d.orderedPairs && splits > 1 && chunk == 0 && t.Hopper && t.WM*t.WN <= 8 && j.math.ElemSize() == 2 &&
		j.M%int64(t.BM) == 0 && j.N%int64(t.BN) == 0 && j.N%4 == 0
}

// reduceTaps sums the float32 partials of a weight gradient launched with
// p's balanced split (p.Chunk > 0, reduction steps of bk pairs) into out
// [M, V·N]: for each tap only the split slices its pairs kernel wrote
// (fg::pairs_tap_slices), in split order.
func (e *Engine) reduceTaps(part devPtr, out *Buffer, p pairsParams, bk int64) error {
	name, g, b, vec, err := e.d.reduceLaunch("spconv_reduce_taps_", part, out, p.M*p.V*p.N, p.N)
	if err != nil {
		return err
	}
	return e.d.launch(name, g, b, 0, part, out.ptr, p.M, p.V, p.N, p.Splits, devPtr(p.Seg), p.Mirror, p.K, bk, p.Chunk, vec)
}

// allocPartials allocates a temporary buffer of n float32 split-K
// partials (freeTemp frees it), filled with NaN bytes under the
// poisonPartials test instrument, so that a slice read but never written
// shows in the result.
func (d *Device) allocPartials(n int64) (rawBuf, error) {
	part, err := d.allocTemp(n * 4)
	if err != nil {
		return rawBuf{}, err
	}
	if d.poisonPartials {
		if err := memsetD8(part.ptr, 0xff, part.size, d.stream); err != nil {
			d.freeTemp(part)
			return rawBuf{}, err
		}
	}
	return part, nil
}

// reduceLaunch returns the kernel (prefix and out's floatSuffix), grid and
// reduceVec argument of a split-K reduction of n float32 partials per
// slice into out whose runs of cols elements must not be split.
func (d *Device) reduceLaunch(prefix string, part devPtr, out *Buffer, n, cols int64) (name string, g, b dim3, vec int64, err error) {
	sfx, ok := floatSuffix(out.dtype)
	if !ok {
		return "", g, b, 0, fmt.Errorf("%w: cudaext: split-K reduction into %v", sparse.ErrDType, out.dtype)
	}
	vec = d.reduceVec(part, out, n, cols)
	g, b = d.elementwise(ceilDiv(n, 1+3*vec))
	return prefix + sfx, g, b, vec, nil
}

// reduceVec is 1 when a split-K reduction of n float32 partials per slice
// into out sums four consecutive elements per thread with 16-byte loads:
// from d.reduceVecMin elements on, where n and the run of elements that
// must not be split (cols: a row of the output, or one tap's columns) are
// multiples of 4, the partials 16-byte and out four-element aligned; else
// 0 (one element per thread).
func (d *Device) reduceVec(part devPtr, out *Buffer, n, cols int64) int64 {
	if n >= d.reduceVecMin && n%4 == 0 && cols%4 == 0 && part%16 == 0 && out.ptr%devPtr(4*out.dtype.Size()) == 0 {
		d.reduceVecLaunches++
		return 1
	}
	return 0
}

// reduceVecMinElems is the fewest elements per slice from which the
// split-K reductions sum four per thread on sms multiprocessors: where a
// quarter of the elements still fill the elementwise grid's cap of 32
// blocks of 256 threads per SM. Below it the threads are few and each one's
// chain of split loads is the kernel's length: four per thread cut
// spconv_reduce_taps at (128, 512, 2) — 7.1 M elements, above the 4.3 M
// of 132 SMs — from 0.064 to 0.041 ms per layer, but lifted spconv_reduce
// at RES 1024 C 64 (the weight gradient's 503 window slices of 110,592
// elements) from 0.077 to 0.100 ms (H200, session 15 call 7).
func reduceVecMinElems(sms int) int64 {
	return 4 * int64(sms) * 32 * 256
}

// im2col gathers [rows, V·C] from in [*, C] through tbl [rows, V].
func (e *Engine) im2col(in devPtr, dt sparse.DType, tbl devPtr, rows, V, C int64) (rawBuf, error) {
	d := e.d
	n := rows * V * C
	buf, err := d.allocTemp(n * int64(dt.Size()))
	if err != nil || n == 0 {
		return buf, err
	}
	name := "spconv_im2col_b32"
	if dt.Size() == 2 {
		name = "spconv_im2col_b16"
	}
	g, b := d.elementwise(n)
	if err := d.launch(name, g, b, 0, d.addr(in), tbl, buf.ptr, rows, V, C); err != nil {
		d.freeTemp(buf)
		return rawBuf{}, err
	}
	return buf, nil
}

// tf32Operand points j.w at a copy of its weight (n float32 values) with
// the 13 low mantissa bits cleared, the bits mma.sync and wgmma ignore in a
// tf32 operand: the same products, fewer toggling bits in every copy of the
// weight stages (docs/PERF_NOTES.md, step 108). It makes no copy, and j
// multiplies its weight as stored, unless j multiplies tf32 with
// tf32ClearedOperands on, has something to compute (runGather launches
// nothing for M = 0 or N = 0) and the copy fits tf32ClearMaxBytes. Worker
// only; free the returned copy (the zero rawBuf when none) with freeTemp
// after the gather.
func (e *Engine) tf32Operand(j *gatherJob, n int64) (rawBuf, error) {
	if j.math != kernels.TF32 || !tf32ClearedOperands.Load() || j.M == 0 || j.N == 0 || n <= 0 || 4*n > tf32ClearMaxBytes {
		return rawBuf{}, nil
	}
	buf, err := e.d.operandCopy("spconv_tf32_operand", j.w, n, (n+3)/4)
	if err != nil {
		return rawBuf{}, err
	}
	j.w = buf.ptr
	return buf, nil
}

// operandCopy returns a copy of the n 4-byte values at w made by kernel
// (arguments: in, out, n) on elementwise(threads), or the zero page for
// n = 0. Worker only; free it with freeTemp.
func (d *Device) operandCopy(kernel string, w devPtr, n, threads int64) (rawBuf, error) {
	buf, err := d.allocTemp(4 * n)
	if err != nil || n == 0 {
		return buf, err
	}
	g, b := d.elementwise(threads)
	if err := d.launch(kernel, g, b, 0, d.addr(w), buf.ptr, n); err != nil {
		d.freeTemp(buf)
		return rawBuf{}, err
	}
	return buf, nil
}

// tf32OperandRA returns a copy of the weight w (n float32 values, rows of
// whole 32-column chunks) as the register-A gathers read it: tf32
// operands, permuted inside every 32-column chunk (spconv_tf32_operand_ra
// in conv_aux.cu, gather_ws.cuh RA). Free it with freeTemp.
func (e *Engine) tf32OperandRA(w devPtr, n int64) (rawBuf, error) {
	if n%32 != 0 {
		return rawBuf{}, fmt.Errorf("%w: register-A weight of %d values: not whole 32-column chunks", sparse.ErrShape, n)
	}
	return e.d.operandCopy("spconv_tf32_operand_ra", w, n, n)
}

// transposeW returns the weight [Co, V, Ci] as [Ci, V, Co]; for tf32
// products (mth TF32, tf32ClearedOperands) with the bits they ignore
// cleared, which changes no product.
func (e *Engine) transposeW(w *Buffer, co, V, ci int64, mth kernels.Math) (rawBuf, error) {
	d := e.d
	n := co * V * ci
	buf, err := d.allocTemp(n * int64(w.dtype.Size()))
	if err != nil || n == 0 {
		return buf, err
	}
	name := "spconv_transpose_w_b32"
	switch {
	case w.dtype.Size() == 2:
		name = "spconv_transpose_w_b16"
	case mth == kernels.TF32 && tf32ClearedOperands.Load():
		name = "spconv_transpose_w_tf32" // the bits tf32 products ignore cleared
	}
	if V > 65535 || ceilDiv(co, 32) > 65535 {
		d.freeTemp(buf)
		return rawBuf{}, fmt.Errorf("%w: weight transpose: %d taps × %d output channels exceed the grid", sparse.ErrShape, V, co)
	}
	g := dim3{X: int(ceilDiv(ci, 32)), Y: int(ceilDiv(co, 32)), Z: int(V)}
	if err := d.launch(name, g, dim3{X: 32, Y: 8}, 0, w.ptr, buf.ptr, co, V, ci); err != nil {
		d.freeTemp(buf)
		return rawBuf{}, err
	}
	return buf, nil
}

// resolve maps Auto to the engine's default algorithm.
func resolve(a sparse.Algorithm) sparse.Algorithm {
	if a == sparse.Auto {
		return sparse.MaskedImplicitSplitK
	}
	return a
}

// errTooManyTaps is the error of a gather of taps taps on warp-specialised
// tile t, which has no plain twin to run more than MaxSpecializedTaps
// (kernels.Tile.ServesTaps).
func errTooManyTaps(t kernels.Tile, taps int64) error {
	return fmt.Errorf("%w: tile %s is warp-specialised without a plain twin and serves at most %d taps (this gather has %d)",
		sparse.ErrShape, t.Name(), kernels.MaxSpecializedTaps, taps)
}

// gatherTaps is the taps a gather GEMM of algorithm alg reduces over for a
// kernel of V taps: 1 for the explicit algorithm (one im2col K axis), V
// otherwise (as shapeOf tells the tuner).
func gatherTaps(alg sparse.Algorithm, V int64) int64 {
	if alg == sparse.Explicit {
		return 1
	}
	return V
}

func isSplit(a sparse.Algorithm) bool {
	return a == sparse.ImplicitSplitK || a == sparse.MaskedImplicitSplitK
}

func isMasked(a sparse.Algorithm) bool {
	return a == sparse.MaskedImplicit || a == sparse.MaskedImplicitSplitK
}

// Forward computes y [m.NOut, Co] = bias + Σ_v w[:, v, :] · x[Nbr[o, v]]
// (see sparse.ConvEngine.ConvForward) with the CUDA-specific options o.
func (e *Engine) Forward(m *kmap.Map, x, w, bias sparse.Matrix, o Options) (sparse.Matrix, error) {
	const op = "cudaext: Forward"
	if err := e.checkMap(op, m); err != nil {
		return sparse.Matrix{}, err
	}
	if err := checkOptions(op, o); err != nil {
		return sparse.Matrix{}, err
	}
	xb, err := e.buffer(x, "x")
	if err != nil {
		return sparse.Matrix{}, err
	}
	wb, err := e.buffer(w, "weight")
	if err != nil {
		return sparse.Matrix{}, err
	}
	V := int64(m.V())
	ci, co := int64(x.Cols), int64(w.Rows)
	if x.Rows != m.NIn {
		return sparse.Matrix{}, &sparse.ShapeError{Op: op, Arg: "x", Want: fmt.Sprintf("[%d, Ci]", m.NIn), Got: x.Shape()}
	}
	if int64(w.Cols) != V*ci {
		return sparse.Matrix{}, &sparse.ShapeError{Op: op, Arg: "weight", Want: fmt.Sprintf("[Co, %d]", V*ci), Got: w.Shape()}
	}
	if wb.dtype != xb.dtype {
		return sparse.Matrix{}, fmt.Errorf("%w: %s: weight is %v but x is %v", sparse.ErrDType, op, wb.dtype, xb.dtype)
	}
	var bb *Buffer
	if !bias.IsZero() {
		if bb, err = e.buffer(bias, "bias"); err != nil {
			return sparse.Matrix{}, err
		}
		if bias.Rows != 1 || int64(bias.Cols) != co {
			return sparse.Matrix{}, &sparse.ShapeError{Op: op, Arg: "bias", Want: fmt.Sprintf("[1, %d]", co), Got: bias.Shape()}
		}
		if bb.dtype != xb.dtype {
			return sparse.Matrix{}, fmt.Errorf("%w: %s: bias is %v but x is %v", sparse.ErrDType, op, bb.dtype, xb.dtype)
		}
	}
	math, err := e.mathFor(xb.dtype)
	if err != nil {
		return sparse.Matrix{}, err
	}
	if o, err = e.tuned(tuneFwd, m, math, ci, co, o, func(c Options) (sparse.Matrix, error) { return e.Forward(m, x, w, bias, c) }); err != nil {
		return sparse.Matrix{}, err
	}
	M := int64(m.NOut)
	alg := resolve(o.Algorithm)
	kc := ci
	if alg == sparse.Explicit {
		kc = V * ci
	}
	tile, err := e.chooseTile(o, math, useGather, M, co, kc, gatherTaps(alg, V))
	if err != nil {
		return sparse.Matrix{}, err
	}
	var out *Buffer
	err = e.d.do(func() error {
		var err error
		if out, err = e.newOutput(xb.dtype, int(M*co)); err != nil {
			return err
		}
		j := gatherJob{math: math, tile: tile, w: wb.ptr, M: M, N: co, splitAlg: isSplit(alg), userSplits: o.SplitK, out: out}
		wc, err := e.tf32Operand(&j, co*V*ci)
		if err != nil {
			return err
		}
		defer e.d.freeTemp(wc)
		if bb != nil {
			j.bias = bb.ptr
		}
		err = e.gatherInput(&j, m, false, alg, xb.ptr, xb.dtype, ci, V)
		defer e.d.freeTemp(j.tmp)
		if err != nil {
			return err
		}
		return e.runGather(j)
	})
	if err != nil {
		if out != nil {
			out.Free()
		}
		return sparse.Matrix{}, err
	}
	return sparse.Matrix{Rows: int(M), Cols: int(co), Data: out}, nil
}

// gatherInput fills the operand, table and masked (or per-tap) fields of
// j for the forward (reverse = false: table Nbr) or input-gradient (table
// Rev) direction of algorithm alg. For Explicit it materialises the im2col
// matrix in j.tmp; the caller frees it. Worker only.
//
// The input gradient of a submanifold map gathers through Nbr itself, with
// the forward masked tables, and mirrors the weight's tap (j.mirror): tap
// V−1−v is tap v's offset negated, so Rev[i, v] = Nbr[i, V−1−v] and
// dx[i] = Σ_v dy[Nbr[i, v]] · w[:, V−1−v, :]ᵀ. A training step then never
// builds the reverse table, its masks, its Gray order or its tile unions.
func (e *Engine) gatherInput(j *gatherJob, m *kmap.Map, reverse bool, alg sparse.Algorithm, in devPtr, dt sparse.DType, c, V int64) error {
	mirror := reverse && m.Kind == kmap.Submanifold && alg != sparse.Explicit
	var tbl devPtr
	var err error
	if reverse && !mirror {
		tbl, err = e.revTable(m)
	} else {
		tbl, err = e.nbrTable(m)
	}
	if err != nil {
		return err
	}
	if alg == sparse.Explicit {
		col, err := e.im2col(in, dt, tbl, j.M, V, c)
		if err != nil {
			return err
		}
		j.tmp = col
		j.in, j.tbl, j.Kc, j.V = col.ptr, 0, V*c, 1
		return nil
	}
	j.in, j.tbl, j.Kc, j.V, j.mirror = in, tbl, c, V, mirror
	// A small submanifold map's masked split-K gathers may run per tap
	// instead (pertap.go): no masks, Gray order or tile unions then.
	pt, groups, err := e.perTap(m, alg, j.math, j.tile, c, j.N, !reverse)
	if err != nil {
		return err
	}
	if groups > 0 {
		j.perTap, j.perTapGroups = pt, groups
		return nil
	}
	if isMasked(alg) {
		// A hybrid gather (hybrid.go, an experiment) reads its own tables;
		// a submanifold input gradient reads the forward's, mirrored.
		if ht, ok, err := e.hybrid(m, reverse && !mirror, alg, j); err != nil {
			return err
		} else if ok {
			g, err := e.grayTablesFor(m, false)
			if err != nil {
				return err
			}
			sched, err := e.d.tileSchedule(&ht.dense, g.order.ptr, int(j.M), int(V), j.tile.BM, j.math)
			if err != nil {
				return err
			}
			j.order, j.tileSeg, j.tileTp, j.tileSched = g.order.ptr, ht.dense.seg.ptr, ht.dense.taps.ptr, sched
			j.hybrid, j.hybridMap = ht, m
			e.d.hybridLaunches++
			return nil
		}
		mt, err := e.maskedTablesFor(m, reverse && !mirror, j.tile.BM)
		if err != nil {
			return err
		}
		e.dropMasks(m, reverse && !mirror)
		sched, err := e.d.tileSchedule(mt.tiles, mt.order, int(j.M), int(V), j.tile.BM, j.math)
		if err != nil {
			return err
		}
		j.order, j.tileSeg, j.tileTp, j.tileSched = mt.order, mt.tiles.seg.ptr, mt.tiles.taps.ptr, sched
	}
	return nil
}

// InputGrad computes dx [m.NIn, Ci] = Σ_v w[:, v, :]ᵀ · dy[Rev[i, v]] (see
// sparse.ConvEngine.ConvInputGrad): the gather GEMM over the reverse table
// (over Nbr with mirrored weight taps for a submanifold map, see
// gatherInput), reading the weight [Co, V, Ci] transposed in the kernel
// (the explicit algorithm multiplies a materialised transpose);
// output-stationary, no atomics.
func (e *Engine) InputGrad(m *kmap.Map, dy, w sparse.Matrix, o Options) (sparse.Matrix, error) {
	const op = "cudaext: InputGrad"
	if err := e.checkMap(op, m); err != nil {
		return sparse.Matrix{}, err
	}
	if err := checkOptions(op, o); err != nil {
		return sparse.Matrix{}, err
	}
	db, err := e.buffer(dy, "dy")
	if err != nil {
		return sparse.Matrix{}, err
	}
	wb, err := e.buffer(w, "weight")
	if err != nil {
		return sparse.Matrix{}, err
	}
	V := int64(m.V())
	co := int64(dy.Cols)
	if dy.Rows != m.NOut {
		return sparse.Matrix{}, &sparse.ShapeError{Op: op, Arg: "dy", Want: fmt.Sprintf("[%d, Co]", m.NOut), Got: dy.Shape()}
	}
	if int64(w.Rows) != co || int64(w.Cols)%V != 0 {
		return sparse.Matrix{}, &sparse.ShapeError{Op: op, Arg: "weight", Want: fmt.Sprintf("[%d, %d·Ci]", co, V), Got: w.Shape()}
	}
	if wb.dtype != db.dtype {
		return sparse.Matrix{}, fmt.Errorf("%w: %s: weight is %v but dy is %v", sparse.ErrDType, op, wb.dtype, db.dtype)
	}
	ci := int64(w.Cols) / V
	math, err := e.mathFor(db.dtype)
	if err != nil {
		return sparse.Matrix{}, err
	}
	if o, err = e.tuned(tuneDGrad, m, math, ci, co, o, func(c Options) (sparse.Matrix, error) { return e.InputGrad(m, dy, w, c) }); err != nil {
		return sparse.Matrix{}, err
	}
	M := int64(m.NIn)
	alg := resolve(o.Algorithm)
	kc := co
	if alg == sparse.Explicit {
		kc = V * co
	}
	tile, err := e.chooseTile(o, math, gatherUse(math.ElemSize(), true, alg), M, ci, kc, gatherTaps(alg, V))
	if err != nil {
		return sparse.Matrix{}, err
	}
	var out *Buffer
	// Beside the side stream's weight and bias gradients (Device.doBeside):
	// it reads neither.
	err = e.d.doBeside(func() error {
		var err error
		if out, err = e.newOutput(db.dtype, int(M*ci)); err != nil {
			return err
		}
		if M == 0 || ci == 0 {
			return nil
		}
		// The gather kernel reads the weight [Co, V, Ci] transposed (wt);
		// the explicit algorithm, whose im2col GEMM has one fused K axis of
		// V·Co, and the tf32 Hopper tiles multiply a materialised transpose
		// [Ci, V, Co].
		j := gatherJob{math: math, tile: tile, w: wb.ptr, wt: true, M: M, N: ci, splitAlg: isSplit(alg), userSplits: o.SplitK, out: out}
		// The tf32 Hopper tiles read their weight K-major only: they
		// multiply the transpose too (one pass over the weight, small next
		// to the GEMM).
		if alg == sparse.Explicit || !tile.HasTransposed(math) {
			wt, err := e.transposeW(wb, co, V, ci, math)
			if err != nil {
				return err
			}
			defer e.d.freeTemp(wt)
			j.w, j.wt = wt.ptr, false
		} else {
			wc, err := e.tf32Operand(&j, co*V*ci)
			if err != nil {
				return err
			}
			defer e.d.freeTemp(wc)
		}
		err = e.gatherInput(&j, m, true, alg, db.ptr, db.dtype, co, V)
		defer e.d.freeTemp(j.tmp)
		if err != nil {
			return err
		}
		return e.runGather(j)
	})
	if err != nil {
		if out != nil {
			out.Free()
		}
		return sparse.Matrix{}, err
	}
	return sparse.Matrix{Rows: int(M), Cols: int(ci), Data: out}, nil
}

// WeightGrad computes dw [Co, V·Ci] with dw[:, v, :] = Σ_{(i,o) ∈ pairs(v)}
// dy[o] ⊗ x[i] (see sparse.ConvEngine.ConvWeightGrad): one GEMM per tap
// over the pair lists (Explicit: over the im2col matrix); split-K partials
// are reduced in split order, so results are deterministic. The result of
// float16/bfloat16 inputs is float32, written from the float32
// accumulators (one split) or by the float32 reduction of the partials,
// never rounded to the narrow type; o.NarrowWeightGrad rounds it to the
// inputs' dtype instead.
func (e *Engine) WeightGrad(m *kmap.Map, x, dy sparse.Matrix, o Options) (sparse.Matrix, error) {
	dw, _, err := e.paramGrads("cudaext: WeightGrad", m, x, dy, o, false)
	return dw, err
}

// ParamGrads returns WeightGrad(m, x, dy, o) and BiasGrad(dy) together.
// Over the half pair lists of a submanifold map with a 16-bit Hopper tile
// (the masked and implicit algorithms of float16/bfloat16 data on Hopper
// GPUs) the bias gradient is summed by the weight gradient's own kernel,
// in the blocks of its centre tap, whose pairs name every row of dy once:
// dy is read once instead of twice. Elsewhere BiasGrad's kernels run after
// the weight gradient. The bias gradient is float32 either way, summed in
// a fixed order (deterministic); the two orders differ in rounding only.
// EnvNoFusedBias=1 turns the fused sums off.
func (e *Engine) ParamGrads(m *kmap.Map, x, dy sparse.Matrix, o Options) (dw, db sparse.Matrix, err error) {
	return e.paramGrads("cudaext: ParamGrads", m, x, dy, o, true)
}

// paramGrads is WeightGrad and, with bias, ParamGrads.
func (e *Engine) paramGrads(op string, m *kmap.Map, x, dy sparse.Matrix, o Options, bias bool) (sparse.Matrix, sparse.Matrix, error) {
	if err := e.checkMap(op, m); err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	if err := checkOptions(op, o); err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	xb, err := e.buffer(x, "x")
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	db, err := e.buffer(dy, "dy")
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	if x.Rows != m.NIn {
		return sparse.Matrix{}, sparse.Matrix{}, &sparse.ShapeError{Op: op, Arg: "x", Want: fmt.Sprintf("[%d, Ci]", m.NIn), Got: x.Shape()}
	}
	if dy.Rows != m.NOut {
		return sparse.Matrix{}, sparse.Matrix{}, &sparse.ShapeError{Op: op, Arg: "dy", Want: fmt.Sprintf("[%d, Co]", m.NOut), Got: dy.Shape()}
	}
	if xb.dtype != db.dtype {
		return sparse.Matrix{}, sparse.Matrix{}, fmt.Errorf("%w: %s: dy is %v but x is %v", sparse.ErrDType, op, db.dtype, xb.dtype)
	}
	math, err := e.mathFor(xb.dtype)
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	V := int64(m.V())
	ci, co := int64(x.Cols), int64(dy.Cols)
	if o, err = e.tuned(tuneWGrad, m, math, ci, co, o, func(c Options) (sparse.Matrix, error) { return e.WeightGrad(m, x, dy, c) }); err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	sfx, _ := floatSuffix(db.dtype)
	alg := resolve(o.Algorithm)
	outDT := sparse.WeightGradDType(xb.dtype, o.NarrowWeightGrad)
	// The tile is chosen before anything runs, so that a forced tile the
	// arithmetic has no kernel for is an error also for an empty problem.
	var tile kernels.Tile
	if alg == sparse.Explicit {
		tile, err = e.chooseTile(o, math, useIm2colWGrad, co, V*ci, int64(m.NOut), 1)
	} else {
		tile, err = e.chooseTile(o, math, usePairs, co, ci, int64(m.NOut), 1)
	}
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	var out, bout *Buffer
	err = e.d.do(func() error {
		e.dropPerTap(m) // before the outputs: out of the step's memory peak
		var err error
		if out, err = e.newOutput(outDT, int(co*V*ci)); err != nil {
			return err
		}
		if bias {
			if bout, err = e.newOutput(sparse.Float32, int(co)); err != nil {
				return err
			}
		}
		rows := int64(m.NOut)
		// biasAfter queues BiasGrad's kernels (bias gradient not fused).
		biasAfter := func() error {
			if !bias || co == 0 {
				return nil
			}
			return e.biasGrad(bout, db, rows, co, sfx, "f32")
		}
		if co*V*ci == 0 {
			return biasAfter()
		}
		// The map's tables are derived on the main stream (an input
		// gradient beside this one may read them); the products go to the
		// side stream (Device.onSide).
		if alg == sparse.Explicit {
			nbr, err := e.nbrTable(m)
			if err != nil {
				return err
			}
			return e.d.onSide(rows, func() error {
				col, err := e.im2col(xb.ptr, xb.dtype, nbr, rows, V, ci)
				if err != nil {
					return err
				}
				defer e.d.freeTemp(col)
				if err := e.runPairs(pairsJob{math: math, tile: tile, a: db.ptr, b: col.ptr, M: co, N: V * ci, V: 1, K: rows, maxPairs: rows, out: out}); err != nil {
					return err
				}
				return biasAfter()
			})
		}
		pl, err := e.pairTables(m)
		if err != nil {
			return err
		}
		j := pairsJob{math: math, tile: tile, a: db.ptr, b: xb.ptr, ia: pl.out, ib: pl.in, seg: pl.seg, off: pl.off,
			M: co, N: ci, V: V, K: rows, mirror: pl.half, maxPairs: pl.st.longest, stats: pl.st, splitAlg: isSplit(alg),
			userSplits: o.SplitK, out: out}
		if bias && !e.d.noFusedBias && fusesBias(tile, math, pl.half) {
			j.bias = bout
			return e.d.onSide(rows, func() error { return e.runPairs(j) })
		}
		return e.d.onSide(rows, func() error {
			if err := e.runPairs(j); err != nil {
				return err
			}
			return biasAfter()
		})
	})
	if err != nil {
		if out != nil {
			out.Free()
		}
		if bout != nil {
			bout.Free()
		}
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	dw := sparse.Matrix{Rows: int(co), Cols: int(V * ci), Data: out}
	if !bias {
		return dw, sparse.Matrix{}, nil
	}
	return dw, sparse.Matrix{Rows: 1, Cols: int(co), Data: bout}, nil
}

// BiasGrad returns db [1, Co], the column sums of dy, summed in a fixed
// order (float32 accumulation), in float32 for every float dtype of dy
// (see BiasGradAs).
func (e *Engine) BiasGrad(dy sparse.Matrix) (sparse.Matrix, error) {
	return e.BiasGradAs(dy, sparse.Float32)
}

// biasGradBlocksPerSM is how many blocks per SM the first stage of the
// bias gradient spreads dy's rows over when its rows are read with 16-byte
// loads (spconv_bias_grad1v_*), in chunks of at least biasGradMinChunk
// rows: long chunks keep every load a full row segment and leave the
// second stage few partial sums per column. H200, session 20: with
// chunks of at least 256 rows the RES 32 and 64 layers (3,840 and 15,192
// rows of 1,024 columns) ran 60 and 236 blocks whose threads each waited
// on 32 loads in turn, 15 and 21 µs for 8 and 31 MB; with chunks of at
// least 32 rows and four loads in flight, 6.4 and 13.8 µs (RES 128 C 512
// 26 → 23 µs; from RES 256 on the stage is bound by DRAM as before).
const (
	biasGradBlocksPerSM = 8
	biasGradMinChunk    = 32
)

// BiasGradAs is BiasGrad with the result in dtype dt: float32 (the
// float32 sums as they are) or dy's own dtype (rounded once, at the end).
func (e *Engine) BiasGradAs(dy sparse.Matrix, dt sparse.DType) (sparse.Matrix, error) {
	db, err := e.buffer(dy, "dy")
	if err != nil {
		return sparse.Matrix{}, err
	}
	sfx, ok := floatSuffix(db.dtype)
	if !ok {
		return sparse.Matrix{}, fmt.Errorf("%w: BiasGrad of %v data", sparse.ErrDType, db.dtype)
	}
	if dt != sparse.Float32 && dt != db.dtype {
		return sparse.Matrix{}, fmt.Errorf("%w: BiasGrad of %v data into %v (want float32 or %v)", sparse.ErrDType, db.dtype, dt, db.dtype)
	}
	rows, cols := int64(dy.Rows), int64(dy.Cols)
	outSfx, _ := floatSuffix(dt) // float32 or dy's dtype
	var out *Buffer
	err = e.d.do(func() error {
		d := e.d
		var err error
		if out, err = e.newOutput(dt, int(cols)); err != nil {
			return err
		}
		if cols == 0 {
			return nil
		}
		return d.onSide(rows, func() error { return e.biasGrad(out, db, rows, cols, sfx, outSfx) })
	})
	if err != nil {
		if out != nil {
			out.Free()
		}
		return sparse.Matrix{}, err
	}
	return sparse.Matrix{Rows: 1, Cols: int(cols), Data: out}, nil
}

// biasGrad queues BiasGradAs's kernels: the column sums of dy [rows, cols]
// (db, kernel suffix sfx) into out (suffix outSfx). Worker only.
func (e *Engine) biasGrad(out, db *Buffer, rows, cols int64, sfx, outSfx string) error {
	d := e.d
	if rows == 0 {
		return d.fill(out, 0)
	}
	vec := int64(16 / db.dtype.Size())
	var chunkRows, chunks, gpb int64
	if cols%vec == 0 && db.ptr%16 == 0 {
		// 16-byte loads: gpb column groups of vec columns per block
		// and about biasGradBlocksPerSM blocks per SM in all.
		gpb = min(int64(32), 1<<(bits.Len64(uint64(cols/vec))-1))
		tiles := ceilDiv(cols/vec, gpb)
		chunks = min(max(ceilDiv(biasGradBlocksPerSM*int64(d.info.SMs), tiles), 1), ceilDiv(rows, biasGradMinChunk), 65535)
		chunkRows = ceilDiv(rows, chunks)
		chunks = ceilDiv(rows, chunkRows)
	} else {
		chunkRows = max(int64(1024), ceilDiv(rows, 65535))
		chunks = ceilDiv(rows, chunkRows)
	}
	part, err := d.allocTemp(chunks * cols * 4)
	if err != nil {
		return err
	}
	defer d.freeTemp(part)
	if gpb > 0 {
		err = d.launch("spconv_bias_grad1v_"+sfx, dim3{X: int(ceilDiv(cols/vec, gpb)), Y: int(chunks)}, dim3{X: 256}, 0,
			db.ptr, part.ptr, rows, cols, chunkRows, gpb)
	} else {
		err = d.launch("spconv_bias_grad1_"+sfx, dim3{X: int(ceilDiv(cols, 32)), Y: int(chunks)}, dim3{X: 32, Y: 8}, 0,
			db.ptr, part.ptr, rows, cols, chunkRows)
	}
	if err != nil {
		return err
	}
	return d.biasGradSum(part.ptr, out, chunks, cols, outSfx)
}

// biasGradSum queues BiasGrad's second stage: out [cols] = the sums of the
// float32 partials part [chunks, cols] in chunk order, a warp per column
// (whatever dy's dtype; the kernel's suffix outSfx is the output's).
// Worker only.
func (d *Device) biasGradSum(part devPtr, out *Buffer, chunks, cols int64, outSfx string) error {
	g, b := d.elementwise(32 * cols)
	return d.launch("spconv_bias_grad2_"+outSfx, g, b, 0, part, out.ptr, chunks, cols)
}
