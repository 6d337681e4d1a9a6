//go:build cudaext

package cudaext

// GPU tests of the autotuner wiring (tune.go). Like every test of this
// package they need a GPU (see conv_gpu_test.go); run them there with
//
//	.gpu/cudaext.test -test.v -test.run 'Autotune|TuneGrid'

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/autotune"
	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// The tests of this binary never touch the user's autotune cache: the
// default cache of every engine (opened by the first Auto convolution of
// any test) lives in a fresh temporary directory, and the tests below
// give the engine caches of their own in t.TempDir.
func init() {
	dir, err := os.MkdirTemp("", "flexgemm-cudaext-test-")
	if err != nil {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("flexgemm-cudaext-test-%d", os.Getpid()))
	}
	os.Setenv(autotune.EnvCache, filepath.Join(dir, "autotune.json"))
}

// maxColdTune is the wall-time bound of a first Auto call on a cold shape:
// the 2 s budget, plus the launch that may be under way when it runs out
// and the final run.
const maxColdTune = 2500 * time.Millisecond

// useTuner gives gpu a fresh autotuner for one test: a cache file in
// t.TempDir without pre-tuned table, in the given mode. Cache warnings
// fail the test. The default tuner comes back after the test.
func useTuner(t *testing.T, mode autotune.Mode, opts ...autotune.TunerOption) *autotune.Cache {
	t.Helper()
	path := filepath.Join(t.TempDir(), "autotune.json")
	c, err := autotune.Open(autotune.WithPath(path), autotune.WithPretuned(nil),
		autotune.WithWarn(func(err error) { t.Errorf("autotune warning: %v", err) }))
	require.NoError(t, err)
	require.NoError(t, gpu.SetAutotune(c, append([]autotune.TunerOption{autotune.WithMode(mode)}, opts...)...))
	t.Cleanup(gpu.resetAutotune)
	return c
}

// convData is one convolution's device inputs.
type convData struct {
	m           *kmap.Map
	ci, co      int
	mth         kernels.Math
	x, w, b, dy sparse.Matrix
}

func newConvData(t testing.TB, rng *rand.Rand, m *kmap.Map, ci, co int, mth kernels.Math) *convData {
	t.Helper()
	dt := dtypeOf(mth)
	V := m.V()
	d := &convData{m: m, ci: ci, co: co, mth: mth,
		x:  dev(t, m.NIn, ci, synth.Uniform[float32](rng, m.NIn*ci), dt),
		w:  dev(t, co, V*ci, synth.Weights[float32](rng, co, V, ci), dt),
		b:  dev(t, 1, co, synth.Uniform[float32](rng, co), dt),
		dy: dev(t, m.NOut, co, synth.Uniform[float32](rng, m.NOut*co), dt),
	}
	return d
}

func (d *convData) free() { gpu.Free(d.x, d.w, d.b, d.dy) }

// run computes one direction with options o and returns it on the host.
func (d *convData) run(t testing.TB, dir autotune.Direction, o Options) []float32 {
	t.Helper()
	gpu.SetTF32(d.mth == kernels.TF32)
	var out sparse.Matrix
	var err error
	switch dir {
	case autotune.Fwd:
		out, err = gpu.Forward(d.m, d.x, d.w, d.b, o)
	case autotune.DGrad:
		out, err = gpu.InputGrad(d.m, d.dy, d.w, o)
	default:
		out, err = gpu.WeightGrad(d.m, d.x, d.dy, o)
	}
	require.NoError(t, err, "%v %+v", dir, o)
	h := host(t, out)
	gpu.Free(out)
	return h
}

func (d *convData) key(t testing.TB, dir autotune.Direction) autotune.Key {
	t.Helper()
	k, ok := gpu.convKey(dir, d.m, d.mth, int64(d.ci), int64(d.co))
	require.True(t, ok)
	return k
}

func requireSameBits(t testing.TB, want, got []float32, what string) {
	t.Helper()
	require.Equal(t, len(want), len(got), what)
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			require.Failf(t, "different bits", "%s: element %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

func shellMap(t testing.TB, res int) *kmap.Map {
	t.Helper()
	coords, ext := synth.SphereShell(res, 1)
	return mapOK(t)(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
}

var allDirs = []autotune.Direction{autotune.Fwd, autotune.DGrad, autotune.WGrad}

// legacy is the fixed heuristic of conv.go (what Auto ran before the
// tuner, and still runs in modes off and cache-only on a miss).
var legacy = Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}}

// TestAutotuneKeys checks the key of each map kind and direction.
func TestAutotuneKeys(t *testing.T) {
	ok := mapOK(t)
	rng := rand.New(rand.NewPCG(1, 2))
	ext := grid.Extent{Batch: 1, X: 12, Y: 11, Z: 10}
	coords := synth.RandomScene(rng, ext, 0.2)
	subm := ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
	strided := ok(kmap.NewStrided(coords, ext, grid.Cube(3, 2, 1, 1), nil))
	aniso := ok(kmap.NewStrided(coords, ext, grid.Conv{Kernel: [3]int{1, 2, 2}, Stride: [3]int{1, 2, 2}, Dilation: [3]int{1, 1, 1}}, nil))
	inverse := ok(kmap.NewInverse(strided))
	transposed := ok(kmap.NewTransposed(coords, ext, grid.Cube(2, 2, 0, 1)))
	info := gpu.Info()
	dev := autotune.Device{Name: info.Name, SMs: info.SMs, Major: info.Major, Minor: info.Minor}
	require.Equal(t, dev, gpu.AutotuneDevice())
	for _, tc := range []struct {
		m  *kmap.Map
		op string
	}{
		{subm, "conv_submanifold"},
		{strided, "conv_strided_s2"},
		{aniso, "conv_strided_s1_2_2"},
		{inverse, "conv_inverse_s2"},
		{transposed, "conv_transposed_s2"},
	} {
		require.Equal(t, tc.op, convOpName(tc.m))
		for _, mth := range kernels.Maths {
			for _, dir := range allDirs {
				k, ok := gpu.convKey(dir, tc.m, mth, 13, 96)
				require.True(t, ok)
				require.NoError(t, k.Validate())
				rows := tc.m.NOut
				if dir == autotune.DGrad {
					rows = tc.m.NIn
				}
				dt, tf32 := map[kernels.Math]string{kernels.F32: "fp32", kernels.TF32: "fp32", kernels.F16: "fp16", kernels.BF16: "bf16"}[mth], mth == kernels.TF32
				require.Equal(t, autotune.Key{Device: dev, Op: tc.op, Dir: dir, DType: dt, TF32: tf32, V: tc.m.V(), Ci: 13, Co: 96,
					LogN: autotune.Bucket(rows)}, k)
				back, ok := keyMath(k)
				require.True(t, ok)
				require.Equal(t, mth, back)
			}
		}
	}
	// Nothing to tune: no rows or no channels.
	empty := ok(kmap.NewSubmanifold(nil, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
	_, found := gpu.convKey(autotune.Fwd, empty, kernels.F32, 4, 4)
	require.False(t, found)
	_, found = gpu.convKey(autotune.Fwd, subm, kernels.F32, 0, 4)
	require.False(t, found)
	_, found = gpu.convKey(autotune.WGrad, subm, kernels.F32, 4, 0)
	require.False(t, found)
}

// TestAutotuneCandidates checks the candidate lists over a grid of keys:
// non-empty, distinct, runnable (known algorithm, compiled tile that fits
// the device, split factor exactly for split-K algorithms), stable, with
// the heuristic's pick among them.
func TestAutotuneCandidates(t *testing.T) {
	dev := gpu.AutotuneDevice()
	lim := gpu.tuneLimits()
	n := 0
	for _, dir := range allDirs {
		for _, mth := range kernels.Maths {
			dt, tf32 := keyDType(mth)
			for _, V := range []int{1, 8, 27, 125} {
				for _, ch := range [][2]int{{1, 1}, {3, 16}, {13, 96}, {64, 64}, {256, 256}} {
					for _, lg := range []int{0, 5, 10, 14, 17, 20, 24} {
						k := autotune.Key{Device: dev, Op: "conv_submanifold", Dir: dir, DType: dt, TF32: tf32, V: V, Ci: ch[0], Co: ch[1], LogN: lg}
						name := k.String()
						cands := convCandidates(k, lim)
						require.NotEmpty(t, cands, name)
						require.LessOrEqual(t, len(cands), len(kernels.AllTiles())*(3+2*len(splitsFor(dir))), name)
						require.Equal(t, cands, convCandidates(k, lim), "%s: not a pure function of the key", name)
						seen := map[autotune.Candidate]bool{}
						for _, c := range cands {
							require.False(t, seen[c], "%s: duplicate %v", name, c)
							seen[c] = true
							alg, err := sparse.ParseAlgorithm(c.Algorithm)
							require.NoError(t, err, name)
							require.Contains(t, algorithmsFor(dir), alg, name)
							tile, err := kernels.ParseTile(c.Tile)
							require.NoError(t, err, name)
							require.NoError(t, tile.Validate(mth), name)
							fam := kernels.Gather
							if dir == autotune.WGrad {
								fam = kernels.Pairs
							}
							require.LessOrEqual(t, kernels.SmemBytes(fam, mth, tile), lim.maxSmem, name)
							if isSplit(alg) {
								require.Contains(t, splitsFor(dir), c.SplitK, "%s: %v", name, c)
							} else {
								require.Zero(t, c.SplitK, "%s: %v", name, c)
							}
							o, err := candidateOptions(Options{}, c)
							require.NoError(t, err)
							require.Equal(t, alg, o.Algorithm)
							require.Equal(t, c.Tile, o.Tile)
							require.Equal(t, max(c.SplitK, 0), o.SplitK)
						}
						require.Contains(t, cands, convHeuristic(k, cands), name)
						n++
					}
				}
			}
		}
	}
	t.Logf("%d keys checked", n)

	// The weight gradient offers no masked algorithm (same kernels).
	k := autotune.Key{Device: dev, Op: "conv_submanifold", Dir: autotune.WGrad, DType: "fp16", V: 27, Ci: 64, Co: 64, LogN: 14}
	for _, c := range convCandidates(k, lim) {
		require.NotContains(t, c.Algorithm, "masked", c)
	}
	// An im2col matrix over an eighth of the device is not offered.
	k = autotune.Key{Device: dev, Op: "conv_submanifold", Dir: autotune.Fwd, DType: "fp32", V: 125, Ci: 256, Co: 256, LogN: 26}
	for _, c := range convCandidates(k, lim) {
		require.NotEqual(t, sparse.Explicit.String(), c.Algorithm, c)
	}
	// Small problems offer every algorithm.
	k = autotune.Key{Device: dev, Op: "conv_submanifold", Dir: autotune.Fwd, DType: "fp16", V: 27, Ci: 64, Co: 64, LogN: 10}
	algs := map[string]bool{}
	for _, c := range convCandidates(k, lim) {
		algs[c.Algorithm] = true
	}
	require.Len(t, algs, len(sparse.Algorithms))
	// The empty bucket has no candidates (nothing is tuned for N = 0).
	k.LogN = -1
	require.Empty(t, convCandidates(k, lim))
}

// TestAutotuneHeuristicMirrorsConv checks that the tuner's copy of the
// fixed heuristic (measured first) is chooseTile and chooseSplits, and
// that the tuner describes each launch to it as conv.go does.
func TestAutotuneHeuristicMirrorsConv(t *testing.T) {
	sms := int64(gpu.Info().SMs)
	uses := []tileUse{useGather, useGatherWT, usePairs, useIm2colWGrad}
	for _, mth := range kernels.Maths {
		for _, use := range uses {
			for _, rows := range []int64{1, 63, 64, 100, 129, 192, 193, 255, 256, 1024, 5000, 33792, 33793, 70000, 1 << 20} {
				for _, cols := range []int64{1, 3, 32, 33, 64, 65, 128, 255, 256, 300, 1024} {
					for _, kc := range []int64{3, 63, 64, 256, 6912} {
						for _, taps := range []int64{1, 27, 125} {
							what := fmt.Sprintf("%v use %d rows %d cols %d kc %d taps %d", mth, use, rows, cols, kc, taps)
							want, err := gpu.chooseTile(Options{}, mth, use, rows, cols, kc, taps)
							require.NoError(t, err, what)
							require.True(t, want.Supports(mth), what)
							require.True(t, !use.gathers() || want.ServesTaps(taps), what)
							g := gemmShape{use: use, rows: rows, cols: cols, kLen: kc, kTaps: taps}
							require.Equal(t, want, heuristicTile(mth, g, sms, gpu.hopperDefaults(mth)), what)
							require.Equal(t, want.Name(), preferredTiles(mth, g, sms, gpu.hopperDefaults(mth))[0], what)
						}
					}
				}
			}
		}
	}
	// shapeOf gives the use, output and reduction per tap that Forward,
	// InputGrad and WeightGrad pass to chooseTile.
	dev := gpu.AutotuneDevice()
	for _, dir := range allDirs {
		for _, alg := range algorithmsFor(dir) {
			k := autotune.Key{Device: dev, Op: "conv_submanifold", Dir: dir, DType: "fp16", V: 27, Ci: 13, Co: 96, LogN: 12}
			const rows = 5000
			g := shapeOf(k, alg, rows, 2)
			type launch struct {
				use              tileUse
				rows, cols, kLen int64
			}
			var want launch
			switch {
			case dir == autotune.Fwd && alg == sparse.Explicit:
				want = launch{useGather, rows, 96, 27 * 13}
			case dir == autotune.Fwd:
				want = launch{useGather, rows, 96, 13}
			case dir == autotune.DGrad && alg == sparse.Explicit: // a materialised transpose
				want = launch{useGather, rows, 13, 27 * 96}
			case dir == autotune.DGrad: // fp16: the weight read transposed
				want = launch{useGatherWT, rows, 13, 96}
			case alg == sparse.Explicit:
				want = launch{useIm2colWGrad, 96, 27 * 13, rows}
			default:
				want = launch{usePairs, 96, 13, rows}
			}
			require.Equal(t, want, launch{g.use, g.rows, g.cols, g.kLen}, "%v %v", dir, alg)
		}
	}
	mma, hop := kernels.Tiles[0], kernels.HopperTiles[0]
	for _, tc := range []struct {
		t             kernels.Tile
		blocks, iters int64
		want          int
	}{
		{mma, 0, 1000, 1}, {mma, 7, 1, 1}, {mma, 7, 1000, 16}, {mma, 28, 432, 10}, {mma, 120, 432, 3},
		{mma, 264, 1000, 1}, {mma, 265, 1000, 1}, {mma, 7, 5, 5},
		{hop, 8, 432, 16}, {hop, 28, 432, 4}, {hop, 120, 432, 1}, {hop, 200, 1000, 1}, {hop, 28, 2, 2},
	} {
		got := heuristicSplits(tc.t, tc.blocks, tc.iters, 132)
		require.Equal(t, tc.want, got, "%s blocks %d iters %d", tc.t.Name(), tc.blocks, tc.iters)
		if sms == 132 {
			require.Equal(t, got, gpu.chooseSplits(0, tc.t, tc.blocks, tc.iters))
		}
	}
	for s, want := range map[int]int{0: 1, 1: 1, 2: 2, 3: 2, 7: 4, 8: 8, 15: 8, 16: 16, 40: 16} {
		require.Equal(t, want, pow2Floor(s, 16), "pow2Floor(%d, 16)", s)
	}
	require.Equal(t, 32, pow2Floor(40, 64))
	require.Equal(t, 64, pow2Floor(64, 64))
	// The weight gradient: the tuner ranks with choosePairsSplits' rule
	// (not the gather family's 2·SMs, ≤ 16 splits), through the tuner's
	// own shape of a key.
	for _, blocks := range []int64{0, 1, 27, 54, 108, 432, 1728, 10000} {
		for _, kIters := range []int64{0, 1, 2, 9, 100, 3700, 100000} {
			for _, out := range []int64{0, 1 << 10, 27 << 20} {
				for _, tile := range []kernels.Tile{kernels.Tiles[0], kernels.HopperTiles[0]} {
					require.Equal(t, gpu.choosePairsSplits(0, tile, blocks, kIters, out), pairsSplits(tile, blocks, kIters, out, sms), "blocks %d kIters %d out %d", blocks, kIters, out)
				}
			}
		}
	}
	for _, c := range []int{64, 256, 1024} {
		for _, lg := range []int{12, 17, 22} {
			k := autotune.Key{Device: dev, Op: "conv_submanifold", Dir: autotune.WGrad, DType: "fp16", V: 27, Ci: c, Co: c, LogN: lg}
			_, mid, _ := rowRange(k)
			g := shapeOf(k, sparse.ImplicitSplitK, mid, 2)
			tile, err := gpu.chooseTile(Options{}, kernels.F16, usePairs, int64(c), int64(c), mid, 1)
			require.NoError(t, err)
			blocks := ceilDiv(int64(c), int64(tile.BM)) * ceilDiv(int64(c), int64(tile.BN)) * 27
			want := gpu.choosePairsSplits(0, tile, blocks, ceilDiv(mid, int64(tile.BK)), int64(c*c*27))
			require.Equal(t, want, g.splits(tile, sms), "%v", k)
			h := convHeuristic(k, convCandidates(k, gpu.tuneLimits()))
			if want >= 2 {
				require.Equal(t, pow2Floor(want, pairsMaxSplits), h.SplitK, "%v: %v", k, h)
			}
		}
	}
}

// TestDefaultTiles checks the fixed heuristic's tiles at the shapes of
// BenchmarkConvTiles (sphere shells: N = 15 192 at RES 64, 252 392 at 256,
// 4 113 056 at 1024; docs/PERF_NOTES.md step 5): the 16-bit arithmetics
// take the measured winners at C ≥ 256, float32 and TF32 the old tiles
// (the new ones are Narrow), and C = 64 stays where it was.
func TestDefaultTiles(t *testing.T) {
	// The mma.sync table first (Hopper defaults off), then what the Hopper
	// tiles change on a device that has them.
	gpu.SetHopperDefaults(false)
	defer gpu.SetHopperDefaults(os.Getenv(EnvNoHopper) != "1")
	for _, tc := range []struct {
		use              tileUse
		rows, cols, kc   int64
		narrow, fullSize string
		tf32             string // "": fullSize
	}{
		{useGather, 15192, 1024, 1024, "m128n128k64w2x4s3", "m128n128k32w2x4s3", ""},               // RES 64 C 1024 fwd/dgrad
		{useGather, 252392, 256, 256, "m128n128k64w2x4s3", "m128n128k32w2x4s3", ""},                // RES 256 C 256
		{useGather, 4113056, 64, 64, "m128n64k32w2x2s4", "m128n64k32w2x2s4", ""},                   // RES 1024 C 64
		{useGather, 252392, 256, 16, "m128n128k32w2x4s3", "m128n128k32w2x4s3", ""},                 // Ci 16 → Co 256: BK 64 mostly padding
		{useGather, 252392, 256, 27 * 16, "m128n128k64w2x4s3", "m128n128k32w2x4s3", ""},            // explicit, K = V·Ci
		{useGather, 2000, 256, 256, "m64n64k32w2x2s4", "m64n64k32w2x2s4", ""},                      // under one wave of 128×128 tiles
		{usePairs, 1024, 1024, 15192, "m128n128k32w2x4s4", "m64n64k32w2x2s4", "m128n128k32w2x4s3"}, // RES 64 C 1024 wgrad
		{usePairs, 256, 256, 252392, "m128n128k32w2x4s4", "m64n64k32w2x2s4", "m128n128k32w2x4s3"},  // RES 256 C 256 wgrad
		{usePairs, 64, 64, 4113056, "m64n64k32w2x2s4", "m64n64k32w2x2s4", ""},                      // RES 1024 C 64 wgrad
		{usePairs, 256, 128, 252392, "m128n128k32w2x4s4", "m64n64k32w2x2s4", "m128n128k32w2x4s3"},  // Ci 128: wide from 128 (RES 512 C 128: 2.20 vs 3.77 ms)
		{usePairs, 128, 128, 1026536, "m128n128k32w2x4s4", "m64n64k32w2x2s4", "m128n128k32w2x4s3"}, // RES 512 C 128 wgrad
		{useIm2colWGrad, 1024, 27 * 256, 252392, "m128n128k32w2x4s3", "m128n128k32w2x4s3", ""},     // explicit wgrad: unchanged
	} {
		for _, mth := range kernels.Maths {
			want := tc.fullSize
			if mth.ElemSize() == 2 {
				want = tc.narrow
			} else if mth == kernels.TF32 && tc.tf32 != "" {
				want = tc.tf32
			}
			got, err := gpu.chooseTile(Options{}, mth, tc.use, tc.rows, tc.cols, tc.kc, 27)
			require.NoError(t, err)
			require.Equal(t, want, got.Name(), "%v use %d rows %d cols %d kc %d", mth, tc.use, tc.rows, tc.cols, tc.kc)
		}
	}
	if gpu.d.hopperTiles(kernels.F16) {
		gpu.SetHopperDefaults(true)
		for _, tc := range []struct {
			use            tileUse
			rows, cols, kc int64
			narrow, tf32   string // "": the mma.sync default
		}{
			{useGather, 15192, 1024, 1024, "m128n256k64w8x1s4h", "m128n256k32w8x1s4h"},
			{useGather, 848, 1024, 1024, "m128n256k64w8x1s4h", "m128n256k32w8x1s4h"}, // small M: split-K fills the GPU
			{useGather, 192, 1024, 1024, "m128n256k64w8x1s4h", "m128n256k32w8x1s4h"}, // 129–192 rows: the tall tile where specialised (below)
			{useGather, 150, 128, 128, "m256n128k64w16x1s4h", ""},
			{useGather, 128, 1024, 1024, "m128n256k64w8x1s4h", "m128n256k32w8x1s4h"}, // one 128-row tile: not tall
			{useGather, 252392, 256, 256, "m128n256k64w8x1s4h", "m128n256k32w8x1s4h"},
			{useGather, 252392, 256, 32, "", "m128n256k32w8x1s4h"},    // 32 channels per tap: half a 16-bit stage
			{useGather, 1026536, 128, 128, "m256n128k64w16x1s4h", ""}, // 128 columns: four warpgroups, specialised: 128×128 (tf32: its own, specialised only)
			{useGather, 200000, 128, 128, "m256n128k64w16x1s4h", ""},  // under tallManyRows rows: 128×128 where specialised
			{useGather, 300000, 200, 200, "m256n128k64w16x1s4h", ""},  // 200 columns, over tallManyRows rows: the 192-row tile where specialised
			{useGather, 4113056, 64, 64, "m128n64k64w8x1s4h", ""},     // 64 columns, ≥ hopperNarrowRows rows (tf32: its own, specialised only)
			{useGather, 252392, 64, 64, "", ""},                       // 64 columns, fewer rows: mma.sync
			{usePairs, 1024, 1024, 15192, "m128n256k64w8x1s4h", ""},   // weight gradient: 16-bit only
			{usePairs, 256, 256, 252392, "m128n256k64w8x1s4h", ""},
			{usePairs, 128, 128, 252392, "m128n128k64w8x1s6h", ""},
			{usePairs, 256, 128, 1026536, "m128n128k64w8x1s6h", ""}, // Co 256, Ci 128
			{usePairs, 64, 64, 4113056, "m64n64k64w4x1s4h", ""},
			{usePairs, 64, 128, 4113056, "", ""}, // Co 64, Ci 128: mma.sync
			{usePairs, 32, 32, 4113056, "", ""},
		} {
			// With the warp-specialised gathers on (the default), the
			// gathers of the 128×256 tiles (16-bit and tf32) and of the
			// 16-bit 128×64 tile take their specialised twins, and those
			// of the 16-bit 256×128 tile the specialised 128×128 tile.
			// With EnvNarrowPersistent on (the default), the 16-bit 128×64
			// tile's twin is the three-stage one of two descriptions.
			wsTwin := map[string]string{"m128n256k64w8x1s4h": "m128n256k64w8x1s4hp4", "m128n64k64w8x1s4h": "m128n64k64w8x1s4hp4",
				"m128n256k32w8x1s4h": "m128n256k32w8x1s4hp4", "m256n128k64w16x1s4h": "m128n128k64w8x1s6hp4"}
			for _, narrow := range []bool{false, true} {
				narrowPersistent.Store(narrow)
				for _, ws := range []bool{false, true} {
					specializedGathers.Store(ws)
					for _, mth := range kernels.Maths {
						gpu.SetHopperDefaults(false)
						old, err := gpu.chooseTile(Options{}, mth, tc.use, tc.rows, tc.cols, tc.kc, 27)
						require.NoError(t, err)
						gpu.SetHopperDefaults(true)
						want := map[kernels.Math]string{kernels.F16: tc.narrow, kernels.BF16: tc.narrow, kernels.TF32: tc.tf32}[mth]
						if want == "" {
							want = old.Name()
						}
						if twin, ok := wsTwin[want]; ok && ws && tc.use == useGather {
							want = twin
							if narrow && want == "m128n64k64w8x1s4hp4" {
								want = "m128n64k64w8x1s3hp4"
							}
						}
						// tf32 gathers of 128–255 columns, and of 64–127
						// over hopperNarrowRows rows: the tf32 specialised
						// tiles under EnvTF32Narrow (the mma.sync tiles
						// before them), and for 64 columns the plain one
						// where the specialised tiles are off.
						if !ws && tc.use == useGather && mth == kernels.TF32 && tf32Narrow.Load() && tc.cols >= 64 && tc.cols < 128 && tc.rows >= hopperNarrowRows {
							want = "m128n64k32w8x1s4h"
						}
						if ws && tc.use == useGather && mth == kernels.TF32 && tf32Narrow.Load() {
							switch {
							case tc.cols >= 128 && tc.cols < 256:
								want = "m128n128k32w8x1s6hp4"
								if swappedWide.Load() && tc.rows >= tallManyRows && tc.kc%4 == 0 {
									want = "m256n128k32w16x1s4hp4" // EnvSwappedWide (step 127)
								}
							case tc.cols >= 64 && tc.cols < 128 && tc.rows >= hopperNarrowRows:
								want = "m128n64k32w8x1s4hp4" // four stages whatever EnvNarrowPersistent says (step 119)
							}
						}
						// Gathers of 129–192 rows and ≥ 128 columns: the
						// 192-row specialised tile (16-bit only).
						if ws && tc.use == useGather && tc.rows > 128 && tc.rows <= 192 && tc.cols >= 128 && mth.ElemSize() == 2 {
							want = "m192n128k64w12x1s4hp4"
							if tallDeep.Load() {
								want = "m192n128k64w12x1s5hp4"
							}
						}
						// 16-bit gathers of 128–255 columns and at least
						// tallManyRows rows: the four-stage 192-row tile.
						if ws && tc.use == useGather && tallMany.Load() && tc.rows >= tallManyRows && tc.cols >= 128 && tc.cols < 256 && mth.ElemSize() == 2 {
							want = "m192n128k64w12x1s4hp4"
						}
						// … and the 16-bit 256×128 tile where EnvSwappedWide16
						// is on (the default) and the rows are 16 bytes.
						if ws && tc.use == useGather && swappedWide16.Load() && tc.rows >= tallManyRows && tc.cols >= 128 && tc.cols < 256 && tc.kc%8 == 0 && mth.ElemSize() == 2 {
							want = "m256n128k64w16x1s4hp4"
						}
						got, err := gpu.chooseTile(Options{}, mth, tc.use, tc.rows, tc.cols, tc.kc, 27)
						require.NoError(t, err)
						require.Equal(t, want, got.Name(), "Hopper: %v use %d rows %d cols %d kc %d specialised %v narrow %v", mth, tc.use, tc.rows, tc.cols, tc.kc, ws, narrow)
					}
				}
			}
			specializedGathers.Store(true)
			narrowPersistent.Store(narrowPersistentDefault)
		}
		// EnvSwappedWide and EnvSwappedWide16 (on by default): tf32 and
		// 16-bit forward gathers of 128–255 columns over at least
		// tallManyRows rows and 16-byte rows take their arithmetic's
		// 256×128 tile (its swapped twin runs them); the 16-bit input
		// gradient (useGatherWT: the weight read transposed, its twin off
		// here), fewer rows, unaligned rows, more than 27 taps, the 16-bit
		// switch off or the specialised tiles off keep the others. want ""
		// is any tile but the arithmetic's 256×128 one.
		swappedWide.Store(true)
		swappedWT.Store(false)
		for _, tc := range []struct {
			mth            kernels.Math
			use            tileUse
			rows, cols, kc int64
			taps           int64
			ws, wide16     bool
			want           string
		}{
			{kernels.TF32, useGather, 1026536, 128, 128, 27, true, false, "m256n128k32w16x1s4hp4"},
			{kernels.TF32, useGather, 1026536, 200, 96, 27, true, false, "m256n128k32w16x1s4hp4"},
			{kernels.TF32, useGather, tallManyRows - 1, 128, 128, 27, true, false, "m128n128k32w8x1s6hp4"},
			{kernels.TF32, useGather, 1026536, 128, 126, 27, true, false, "m128n128k32w8x1s6hp4"},
			{kernels.TF32, useGather, 1026536, 128, 128, 28, true, false, "m128n128k32w8x1s6hp4"}, // its plain twin serves the taps
			{kernels.TF32, useGather, 1026536, 256, 128, 27, true, false, "m128n256k32w8x1s4hp4"},
			{kernels.TF32, useGather, 1026536, 128, 128, 27, false, false, ""},
			{kernels.F16, useGather, 1026536, 128, 128, 27, true, false, "m192n128k64w12x1s4hp4"}, // EnvSwappedWide16 off
			{kernels.F16, useGather, 1026536, 128, 128, 27, true, true, "m256n128k64w16x1s4hp4"},
			{kernels.BF16, useGather, 1026536, 200, 96, 27, true, true, "m256n128k64w16x1s4hp4"},
			{kernels.F16, useGatherWT, 1026536, 128, 128, 27, true, true, "m192n128k64w12x1s4hp4"},
			{kernels.F16, useGather, tallManyRows - 1, 128, 128, 27, true, true, "m128n128k64w8x1s6hp4"},
			{kernels.F16, useGather, 1026536, 128, 100, 27, true, true, "m192n128k64w12x1s4hp4"},
			{kernels.F16, useGather, 1026536, 128, 128, 28, true, true, "m128n128k64w8x1s6hp4"},
			{kernels.F16, useGather, 1026536, 256, 128, 27, true, true, "m128n256k64w8x1s4hp4"},
			{kernels.TF32, useGather, 1026536, 128, 128, 27, true, true, "m256n128k32w16x1s4hp4"},
			{kernels.F16, useGather, 1026536, 128, 128, 27, false, true, ""},
		} {
			specializedGathers.Store(tc.ws)
			swappedWide16.Store(tc.wide16)
			got, err := gpu.chooseTile(Options{}, tc.mth, tc.use, tc.rows, tc.cols, tc.kc, tc.taps)
			require.NoError(t, err)
			if tc.want == "" {
				require.NotEqual(t, fmt.Sprintf("m256n128k%dw16x1s4hp4", 128/tc.mth.ElemSize()), got.Name(), "swapped wide: %+v", tc)
				continue
			}
			require.Equal(t, tc.want, got.Name(), "swapped wide: %+v", tc)
		}
		// EnvSwappedWT (on by default) gives the 16-bit input gradients
		// the 256×128 tile too (their swapped twins run them), and only
		// where EnvSwappedWide16 is on.
		for _, c := range []struct {
			wide16, wt bool
			want       string
		}{{true, true, "m256n128k64w16x1s4hp4"}, {true, false, "m192n128k64w12x1s4hp4"}, {false, true, "m192n128k64w12x1s4hp4"}} {
			specializedGathers.Store(true)
			swappedWide16.Store(c.wide16)
			swappedWT.Store(c.wt)
			for _, mth := range []kernels.Math{kernels.F16, kernels.BF16} {
				got, err := gpu.chooseTile(Options{}, mth, useGatherWT, 1026536, 128, 128, 27)
				require.NoError(t, err)
				require.Equal(t, c.want, got.Name(), "swapped input gradient: %v %+v", mth, c)
			}
		}
		specializedGathers.Store(true)
		swappedWide.Store(swappedWideDefault)
		swappedWide16.Store(swappedWide16Default)
		swappedWT.Store(swappedWTDefault)
		// The 192-row tile has no plain twin: a gather of more than 27
		// taps keeps the 128-row tiles, a forced one is an error naming it,
		// and EnvTallGathers off keeps them too.
		for _, taps := range []int64{1, 27, 28, 125} {
			got, err := gpu.chooseTile(Options{}, kernels.F16, useGather, 192, 1024, 1024, taps)
			require.NoError(t, err)
			require.Equal(t, taps <= 27, got.BM == 192, "taps %d: %s", taps, got.Name())
			_, err = gpu.chooseTile(Options{Tile: "m192n128k64w12x1s4hp4"}, kernels.F16, useGather, 192, 1024, 1024, taps)
			if taps <= 27 {
				require.NoError(t, err)
				continue
			}
			require.ErrorIs(t, err, sparse.ErrShape)
			require.ErrorContains(t, err, "m192n128k64w12x1s4hp4 is warp-specialised without a plain twin and serves at most 27 taps")
		}
		tallGathers.Store(false)
		got, err := gpu.chooseTile(Options{}, kernels.F16, useGather, 192, 1024, 1024, 27)
		tallGathers.Store(tallGathersDefault)
		require.NoError(t, err)
		require.Equal(t, "m128n256k64w8x1s4hp4", got.Name())
		// A forced Hopper tile: every GEMM takes it in 16 bits; in tf32
		// the weight gradient (no tf32 Hopper pairs kernel) its default;
		// in an arithmetic it does not serve it is an error naming it.
		got, err = gpu.chooseTile(Options{Tile: "m128n128k64w8x1s6h"}, kernels.F16, useGather, 10, 64, 64, 27)
		require.NoError(t, err)
		require.True(t, got.Hopper)
		got, err = gpu.chooseTile(Options{Tile: "m128n128k64w8x1s6h"}, kernels.F16, usePairs, 1024, 1024, 15192, 1)
		require.NoError(t, err)
		require.True(t, got.Hopper)
		gpu.SetTF32(true)
		got, err = gpu.chooseTile(Options{Tile: "m128n256k32w8x1s4h"}, kernels.TF32, usePairs, 1024, 1024, 15192, 1)
		gpu.SetTF32(false)
		require.NoError(t, err)
		require.False(t, got.Hopper)
		_, err = gpu.chooseTile(Options{Tile: "m128n128k64w8x1s6h"}, kernels.TF32, useGather, 10, 64, 64, 27)
		require.ErrorIs(t, err, sparse.ErrShape)
		require.ErrorContains(t, err, "m128n128k64w8x1s6h")
		gpu.SetHopperDefaults(false)
	}
	// TileRows restricts the choice to tiles the arithmetic has.
	for _, mth := range kernels.Maths {
		got, err := gpu.chooseTile(Options{ConvOptions: sparse.ConvOptions{TileRows: 256}}, mth, useGather, 1<<20, 256, 256, 27)
		if mth.ElemSize() == 2 {
			require.NoError(t, err)
			require.Equal(t, 256, got.BM)
			continue
		}
		require.ErrorIs(t, err, sparse.ErrShape)
		require.ErrorContains(t, err, "no "+mth.String()+" tile configuration has 256 rows (have [64 128])")
		got, err = gpu.chooseTile(Options{ConvOptions: sparse.ConvOptions{TileRows: 128}}, mth, usePairs, 1024, 1024, 1<<14, 1)
		require.NoError(t, err)
		require.True(t, got.Supports(mth), got.Name())
		require.Equal(t, 128, got.BM)
	}
	// A forced Narrow tile in float32 is an error naming it, also for an
	// empty problem.
	_, err := gpu.chooseTile(Options{Tile: "m256n128k32w4x2s3"}, kernels.F32, useGather, 0, 64, 64, 27)
	require.ErrorIs(t, err, sparse.ErrShape)
	require.ErrorContains(t, err, "tile m256n128k32w4x2s3 is not instantiated for")
}

// TestAutotuneColdBudget tunes cold shapes with the default 2 s budget:
// the first Auto call returns within maxColdTune of wall time, measures
// and stores (in memory and in the cache file) a choice whose result
// matches a fixed algorithm; the second call hits the cache, launches
// nothing and gives the same bits, as does running the chosen candidate
// explicitly.
func TestAutotuneColdBudget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		res, c int
		mth    kernels.Math
		long   bool
	}{
		{"shell64-c32-f32", 64, 32, kernels.F32, false},
		{"shell128-c64-f16", 128, 64, kernels.F16, false},
		{"shell128-c64-tf32", 128, 64, kernels.TF32, true},
		{"shell256-c128-f32", 256, 128, kernels.F32, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.long && testing.Short() {
				t.Skip("large shape")
			}
			defer gpu.SetTF32(false)
			defer gpu.ReleaseCache() // the large shapes leave GBs of im2col and split-K scratch cached
			cache := useTuner(t, autotune.On)
			rng := rand.New(rand.NewPCG(uint64(tc.res), uint64(tc.c)))
			d := newConvData(t, rng, shellMap(t, tc.res), tc.c, tc.c, tc.mth)
			defer d.free()
			defer gpu.ForgetMap(d.m)
			// The fixed-algorithm reference; these runs also upload the
			// map's tables (masked ones for both tile heights), so the
			// timed call measures tuning, not table building.
			ref := d.run(t, autotune.Fwd, Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.Implicit}, Tile: "m64n64k32w2x2s4"})
			for _, tile := range []string{"m128n64k32w2x2s4", "m64n64k32w2x2s4"} {
				d.run(t, autotune.Fwd, Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicit}, Tile: tile})
			}
			key := d.key(t, autotune.Fwd)
			before := gpu.AutotuneStats()
			require.Zero(t, before.Decisions)
			gpu.SetTF32(tc.mth == kernels.TF32)
			_, _, found := gpu.AutotuneChoice(autotune.Fwd, d.m, dtypeOf(tc.mth), tc.c, tc.c)
			require.False(t, found, "a cold shape has a choice")

			gpu.SetTF32(tc.mth == kernels.TF32)
			t0 := time.Now()
			y, err := gpu.Forward(d.m, d.x, d.w, d.b, Options{})
			require.NoError(t, err)
			require.NoError(t, gpu.Synchronize())
			wall := time.Since(t0)
			first := host(t, y)
			gpu.Free(y)

			st := gpu.AutotuneStats()
			rec := gpu.autotuneState().lastRecord()
			r := rec.result
			t.Logf("%v: tuned in %v (measuring %v): %v at %v, %d of %d candidates, over budget %v",
				key, wall, st.TuneTime, r.Choice.Candidate, r.Choice.Time, r.Choice.Tried, r.Choice.Total, r.OverBudget)
			require.LessOrEqual(t, wall, maxColdTune, "first call on a cold shape")
			require.LessOrEqual(t, st.TuneTime, maxColdTune)
			require.Equal(t, key, rec.key)
			require.Equal(t, autotune.FromMeasurement, r.Source)
			require.Equal(t, int64(1), st.Decisions)
			require.Equal(t, int64(1), st.Tuned)
			require.Zero(t, st.Failures, "%v", r.Failures)
			require.Empty(t, r.Failures)
			require.Equal(t, len(convCandidates(key, gpu.tuneLimits())), r.Choice.Total)
			require.Equal(t, len(r.Timings), r.Choice.Tried)
			require.GreaterOrEqual(t, r.Choice.Tried, 1)
			if !r.OverBudget {
				require.Equal(t, r.Choice.Total, r.Choice.Tried, "within budget every candidate is measured")
			}
			require.GreaterOrEqual(t, st.Launches, int64(2*r.Choice.Tried), "a warm-up and at least one timed launch per candidate")
			require.Positive(t, r.Choice.Time)
			require.Equal(t, convHeuristic(key, convCandidates(key, gpu.tuneLimits())), r.Timings[0].Candidate, "the heuristic's pick is measured first")
			for _, tm := range r.Timings {
				require.GreaterOrEqual(t, tm.Median, r.Choice.Time, "%v is faster than the choice", tm.Candidate)
			}
			e := relL2(first, f64(ref))
			require.LessOrEqual(t, e, bound(tc.mth), "tuned %v vs implicit GEMM", r.Choice.Candidate)

			// Stored in memory and in the file.
			ch, src, ok := cache.Lookup(key)
			require.True(t, ok)
			require.Equal(t, autotune.FromCache, src)
			require.Equal(t, r.Choice.Candidate, ch.Candidate)
			gpu.SetTF32(tc.mth == kernels.TF32)
			cand, src, ok := gpu.AutotuneChoice(autotune.Fwd, d.m, dtypeOf(tc.mth), tc.c, tc.c)
			require.True(t, ok)
			require.Equal(t, autotune.FromCache, src)
			require.Equal(t, r.Choice.Candidate, cand)
			_, _, ok = gpu.AutotuneChoice(autotune.DGrad, d.m, dtypeOf(tc.mth), tc.c, tc.c)
			require.False(t, ok, "the input gradient was not tuned")
			onDisk, err := autotune.Open(autotune.WithPath(cache.Path()), autotune.WithPretuned(nil))
			require.NoError(t, err)
			ch, src, ok = onDisk.Lookup(key)
			require.True(t, ok, "choice not written to %s", cache.Path())
			require.Equal(t, autotune.FromCache, src)
			require.Equal(t, r.Choice.Candidate, ch.Candidate)

			// The second call hits the cache and measures nothing.
			t0 = time.Now()
			y, err = gpu.Forward(d.m, d.x, d.w, d.b, Options{})
			require.NoError(t, err)
			require.NoError(t, gpu.Synchronize())
			t.Logf("second call %v", time.Since(t0))
			second := host(t, y)
			gpu.Free(y)
			st2 := gpu.AutotuneStats()
			require.Equal(t, st.Launches, st2.Launches, "the second call launched candidates")
			require.Equal(t, int64(1), st2.Tuned)
			require.Equal(t, int64(1), st2.CacheHits)
			require.Equal(t, autotune.FromCache, gpu.autotuneState().lastRecord().result.Source)
			requireSameBits(t, first, second, "second Auto call")

			// Auto ran exactly the chosen candidate.
			o, err := candidateOptions(Options{}, r.Choice.Candidate)
			require.NoError(t, err)
			requireSameBits(t, first, d.run(t, autotune.Fwd, o), "explicit run of the choice")
		})
	}
}

// TestAutotuneDirections tunes every direction and arithmetic on small
// scenes through the package API (sparse.Conv and its gradients with
// ConvOptions{}) and compares with the CPU engine in float64; the second
// pass hits the cache for every key and measures nothing.
func TestAutotuneDirections(t *testing.T) {
	useTuner(t, autotune.On)
	defer gpu.SetTF32(false)
	rng := rand.New(rand.NewPCG(21, 22))
	scenes := testScenes(t, rng, true)
	const ci, co = 13, 96
	refs := make([]*reference, len(scenes))
	for i, sc := range scenes {
		refs[i] = cpuReference(t, rng, sc.m, ci, co)
	}
	keys := map[autotune.Key]bool{}
	pass := func(t *testing.T) {
		for i, sc := range scenes {
			ref := refs[i]
			for _, mth := range kernels.Maths {
				gpu.SetTF32(mth == kernels.TF32)
				dt := dtypeOf(mth)
				x, w, b, dy := ref.operands(t, sc.m, dt)
				opt := sparse.ConvOptions{}
				y, err := sparse.Conv(sc.m, x, w, b, opt)
				require.NoError(t, err)
				dx, err := sparse.ConvInputGrad(sc.m, dy, w, opt)
				require.NoError(t, err)
				dw, err := sparse.ConvWeightGrad(sc.m, x, dy, opt)
				require.NoError(t, err)
				for _, r := range []struct {
					dir  autotune.Direction
					got  sparse.Matrix
					want []float64
				}{{autotune.Fwd, y, ref.y}, {autotune.DGrad, dx, ref.dx}, {autotune.WGrad, dw, ref.dw}} {
					e := relL2(host(t, r.got), r.want)
					require.LessOrEqual(t, e, bound(mth), "%s %v %v", sc.name, mth, r.dir)
					if k, ok := gpu.convKey(r.dir, sc.m, mth, ci, co); ok {
						keys[k] = true
					}
				}
				gpu.Free(x, w, b, dy, y, dx, dw)
			}
		}
	}
	pass(t)
	st := gpu.AutotuneStats()
	require.Len(t, keys, 3*len(kernels.Maths)*(len(scenes)-1), "one key per non-empty scene × arithmetic × direction")
	require.Equal(t, int64(len(keys)), st.Decisions, "the empty scene is not tuned")
	require.Equal(t, int64(len(keys)), st.Tuned)
	require.Zero(t, st.Heuristic)
	require.Zero(t, st.Failures)
	t.Logf("%d keys tuned in %v, %d launches", st.Tuned, st.TuneTime, st.Launches)

	pass(t)
	st2 := gpu.AutotuneStats()
	require.Equal(t, 2*st.Decisions, st2.Decisions)
	require.Equal(t, st.Tuned, st2.Tuned)
	require.Equal(t, st.Decisions, st2.CacheHits)
	require.Equal(t, st.Launches, st2.Launches)
}

// TestAutotuneOff checks that mode off runs the fixed heuristic without
// measuring or touching any cache, set by option and by
// FLEXGEMM_AUTOTUNE, and that an unknown mode is a clear error.
func TestAutotuneOff(t *testing.T) {
	defer gpu.SetTF32(false)
	rng := rand.New(rand.NewPCG(31, 32))
	d := newConvData(t, rng, shellMap(t, 16), 24, 40, kernels.F16)
	defer d.free()
	want := map[autotune.Direction][]float32{}
	for _, dir := range allDirs {
		want[dir] = d.run(t, dir, legacy)
	}
	check := func(t *testing.T, cache *autotune.Cache) {
		for _, dir := range allDirs {
			requireSameBits(t, want[dir], d.run(t, dir, Options{}), fmt.Sprintf("%v in mode off", dir))
			rec := gpu.autotuneState().lastRecord()
			require.Equal(t, d.key(t, dir), rec.key)
			require.Equal(t, autotune.FromHeuristic, rec.result.Source)
			_, _, found := cache.Lookup(rec.key)
			require.False(t, found, "mode off stored a choice")
			_, _, found = gpu.AutotuneChoice(dir, d.m, sparse.Float16, d.ci, d.co)
			require.False(t, found, "mode off reports a choice")
		}
		st := gpu.AutotuneStats()
		require.Equal(t, int64(3), st.Decisions)
		require.Equal(t, int64(3), st.Heuristic)
		require.Zero(t, st.Launches)
		require.Zero(t, st.Tuned)
		require.Zero(t, st.TuneTime)
	}
	t.Run("option", func(t *testing.T) {
		cache := useTuner(t, autotune.Off)
		check(t, cache)
		_, err := os.Stat(cache.Path())
		require.ErrorIs(t, err, fs.ErrNotExist, "mode off wrote the cache file")
	})
	t.Run("env", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "autotune.json")
		t.Setenv(autotune.EnvMode, "off")
		t.Setenv(autotune.EnvCache, path)
		gpu.resetAutotune()
		t.Cleanup(gpu.resetAutotune)
		cache, err := gpu.AutotuneCache()
		require.NoError(t, err)
		require.Empty(t, cache.Path(), "mode off keeps the cache in memory")
		require.Equal(t, autotune.Off, gpu.autotuneState().tuner.Mode())
		check(t, cache)
		_, err = os.Stat(path)
		require.ErrorIs(t, err, fs.ErrNotExist, "mode off wrote the cache file")
	})
	t.Run("unknown", func(t *testing.T) {
		t.Setenv(autotune.EnvMode, "sometimes")
		gpu.resetAutotune()
		t.Cleanup(gpu.resetAutotune)
		_, err := gpu.Forward(d.m, d.x, d.w, d.b, Options{})
		require.ErrorIs(t, err, autotune.ErrMode)
		require.Contains(t, err.Error(), "sometimes")
		// A fixed algorithm needs no tuner.
		requireSameBits(t, want[autotune.Fwd], d.run(t, autotune.Fwd, legacy), "fixed algorithm with a bad mode")
	})
}

// TestAutotuneCacheOnly checks mode cache-only: the heuristic on a miss,
// the stored choice on a hit, never a measurement.
func TestAutotuneCacheOnly(t *testing.T) {
	cache := useTuner(t, autotune.CacheOnly)
	rng := rand.New(rand.NewPCG(41, 42))
	d := newConvData(t, rng, shellMap(t, 16), 32, 32, kernels.F32)
	defer d.free()
	for _, dir := range allDirs {
		requireSameBits(t, d.run(t, dir, legacy), d.run(t, dir, Options{}), fmt.Sprintf("%v cache-only miss", dir))
		require.Equal(t, autotune.FromHeuristic, gpu.autotuneState().lastRecord().result.Source)
		// Store the last candidate (not the heuristic's) by hand.
		k := d.key(t, dir)
		cands := convCandidates(k, gpu.tuneLimits())
		pick := cands[len(cands)-1]
		require.NotEqual(t, convHeuristic(k, cands), pick)
		require.NoError(t, cache.Store(k, autotune.Choice{Candidate: pick, Heuristic: true}))
		o, err := candidateOptions(Options{}, pick)
		require.NoError(t, err)
		requireSameBits(t, d.run(t, dir, o), d.run(t, dir, Options{}), fmt.Sprintf("%v cache-only hit", dir))
		rec := gpu.autotuneState().lastRecord()
		require.Equal(t, autotune.FromCache, rec.result.Source)
		require.Equal(t, pick, rec.result.Choice.Candidate)
	}
	st := gpu.AutotuneStats()
	require.Equal(t, int64(6), st.Decisions)
	require.Equal(t, int64(3), st.Heuristic)
	require.Equal(t, int64(3), st.CacheHits)
	require.Zero(t, st.Launches)
}

// TestAutotuneMemo checks when a remembered decision holds: while the
// cache's entry for its key is the one it was taken with (a store, a
// user entry over a pre-tuned one, or a new tuner makes the next call
// decide again), and always in mode off.
func TestAutotuneMemo(t *testing.T) {
	k := autotune.Key{Device: gpu.AutotuneDevice(), Op: "conv_submanifold", Dir: autotune.Fwd, DType: "fp16", V: 27, Ci: 64, Co: 64, LogN: 14}
	cands := convCandidates(k, gpu.tuneLimits())
	require.GreaterOrEqual(t, len(cands), 3)
	for _, mode := range []autotune.Mode{autotune.On, autotune.CacheOnly, autotune.Off} {
		st := &tuneState{}
		cache, err := autotune.Open(autotune.InMemory(), autotune.WithPretuned(nil))
		require.NoError(t, err)
		tuner, err := autotune.NewTuner(cache, autotune.WithMode(mode), autotune.WithHeuristic(convHeuristic))
		require.NoError(t, err)
		st.set(cache, tuner)
		_, ok := st.memoized(k)
		require.False(t, ok)
		// A heuristic decision (cache-only miss, mode off).
		heur := autotune.Result{Choice: autotune.Choice{Candidate: convHeuristic(k, cands), Heuristic: true}, Source: autotune.FromHeuristic}
		st.memoize(k, heur, tuner, cache)
		r, ok := st.memoized(k)
		require.True(t, ok, "%v", mode)
		require.Equal(t, heur, r)
		// A choice stored afterwards: the next call decides again, except
		// in mode off (which never reads the cache).
		stored := autotune.Choice{Candidate: cands[1], Time: time.Microsecond}
		require.NoError(t, cache.Store(k, stored))
		_, ok = st.memoized(k)
		require.Equal(t, mode == autotune.Off, ok, "%v: memo after a store", mode)
		if mode == autotune.Off {
			continue
		}
		// The decision taken from the cache holds until the entry changes.
		hit := autotune.Result{Choice: stored, Source: autotune.FromCache}
		st.memoize(k, hit, tuner, cache)
		r, ok = st.memoized(k)
		require.True(t, ok)
		require.Equal(t, hit, r)
		require.NoError(t, cache.Store(k, autotune.Choice{Candidate: cands[2], Time: time.Microsecond}))
		_, ok = st.memoized(k)
		require.False(t, ok, "%v: memo after a second store", mode)
		// A result that disagrees with the cache is not remembered.
		st.memoize(k, hit, tuner, cache)
		_, ok = st.memoized(k)
		require.False(t, ok)
		// A new tuner forgets everything; forget drops one key.
		st.memoize(k, autotune.Result{Choice: autotune.Choice{Candidate: cands[2], Time: time.Microsecond}, Source: autotune.FromCache}, tuner, cache)
		_, ok = st.memoized(k)
		require.True(t, ok)
		st.forget(k)
		_, ok = st.memoized(k)
		require.False(t, ok)
		st.memoize(k, autotune.Result{Choice: autotune.Choice{Candidate: cands[2], Time: time.Microsecond}, Source: autotune.FromCache}, tuner, cache)
		st.set(cache, tuner)
		_, ok = st.memoized(k)
		require.False(t, ok)
		// A decision of a replaced tuner is dropped.
		other, err := autotune.NewTuner(cache, autotune.WithMode(mode))
		require.NoError(t, err)
		st.memoize(k, autotune.Result{Choice: autotune.Choice{Candidate: cands[2], Time: time.Microsecond}, Source: autotune.FromCache}, other, cache)
		_, ok = st.memoized(k)
		require.False(t, ok)
	}
}

// TestAutotuneBypass checks that Auto with a forced tile, tile height or
// split factor runs the fixed heuristic with that option, untuned.
func TestAutotuneBypass(t *testing.T) {
	useTuner(t, autotune.On)
	rng := rand.New(rand.NewPCG(51, 52))
	d := newConvData(t, rng, shellMap(t, 16), 32, 64, kernels.F16)
	defer d.free()
	for _, o := range []Options{
		{Tile: "m64n32k32w2x1s4"},
		{ConvOptions: sparse.ConvOptions{TileRows: 128}},
		{ConvOptions: sparse.ConvOptions{SplitK: 3}},
	} {
		fixed := o
		fixed.Algorithm = sparse.MaskedImplicitSplitK
		for _, dir := range allDirs {
			requireSameBits(t, d.run(t, dir, fixed), d.run(t, dir, o), fmt.Sprintf("%v %+v", dir, o))
		}
	}
	require.Zero(t, gpu.AutotuneStats().Decisions)
}

// TestAutotuneConcurrent runs one cold key from several goroutines: it is
// measured once and every caller gets the same bits.
func TestAutotuneConcurrent(t *testing.T) {
	useTuner(t, autotune.On)
	rng := rand.New(rand.NewPCG(61, 62))
	d := newConvData(t, rng, shellMap(t, 32), 32, 32, kernels.BF16)
	defer d.free()
	const n = 4
	outs := make([][]float32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			y, err := gpu.Forward(d.m, d.x, d.w, d.b, Options{})
			if err != nil {
				errs[i] = err
				return
			}
			h, err := gpu.ToHost(y)
			gpu.Free(y)
			errs[i], outs[i] = err, h.F32()
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	for i := 1; i < n; i++ {
		requireSameBits(t, outs[0], outs[i], fmt.Sprintf("goroutine %d", i))
	}
	st := gpu.AutotuneStats()
	require.Equal(t, int64(n), st.Decisions)
	require.Equal(t, int64(1), st.Tuned)
	require.Equal(t, int64(n-1), st.CacheHits)
}

// TestTuneGrid runs an offline grid into a fresh cache (every candidate
// measured), again (cache hits, nothing measured), with Retune (measured
// and stored again), and checks its argument errors.
func TestTuneGrid(t *testing.T) {
	useTuner(t, autotune.On)
	probs, err := ShellGrid([]int{16}, []int{16}, []kernels.Math{kernels.F16, kernels.TF32})
	require.NoError(t, err)
	require.Len(t, probs, 4)
	require.Equal(t, "shell16-subm3-c16-f16", probs[0].Name)
	require.Equal(t, kmap.Submanifold, probs[0].Map.Kind)
	require.Equal(t, kmap.Strided, probs[2].Map.Kind)
	cache, err := autotune.Open(autotune.InMemory(), autotune.WithPretuned(nil))
	require.NoError(t, err)
	gpu.SetTF32(false)
	var progress []TuneResult
	res, err := gpu.TuneGrid(probs, GridOptions{Cache: cache, Budget: 20 * time.Second, Repeats: 3, Progress: func(r TuneResult) { progress = append(progress, r) }})
	require.NoError(t, err)
	require.False(t, gpu.TF32(), "TuneGrid left TF32 on")
	require.Len(t, res, 3*len(probs))
	require.Equal(t, res, progress)
	keys := map[autotune.Key]bool{}
	for i, r := range res {
		p := probs[i/3]
		require.NoError(t, r.Err, "%s", p.Name)
		require.Equal(t, p.Name, r.Problem)
		require.Equal(t, allDirs[i%3], r.Key.Dir)
		require.Equal(t, p.Math == kernels.TF32, r.Key.TF32)
		require.Equal(t, autotune.FromMeasurement, r.Result.Source, "%v", r.Key)
		require.False(t, r.Result.OverBudget, "%v", r.Key)
		require.Equal(t, len(convCandidates(r.Key, gpu.tuneLimits())), r.Result.Choice.Total)
		require.Equal(t, r.Result.Choice.Total, r.Result.Choice.Tried, "%v: every candidate is measured", r.Key)
		require.Empty(t, r.Result.Failures)
		require.Positive(t, r.Wall)
		ch, src, ok := cache.Lookup(r.Key)
		require.True(t, ok)
		require.Equal(t, autotune.FromCache, src)
		require.Equal(t, r.Result.Choice, ch)
		keys[r.Key] = true
		t.Logf("%v: %v at %v (%d candidates, %v)", r.Key, r.Result.Choice.Candidate, r.Result.Choice.Time, r.Result.Choice.Total, r.Wall)
	}
	require.Len(t, keys, len(res))
	require.Len(t, cache.Entries(gpu.AutotuneDevice()), len(res))

	launches := gpu.AutotuneStats().Launches
	res2, err := gpu.TuneGrid(probs, GridOptions{Cache: cache})
	require.NoError(t, err)
	for i, r := range res2 {
		require.NoError(t, r.Err)
		require.Equal(t, autotune.FromCache, r.Result.Source)
		require.Equal(t, res[i].Result.Choice, r.Result.Choice)
	}
	require.Equal(t, launches, gpu.AutotuneStats().Launches, "a tuned grid measured again")

	before := cache.Entries(gpu.AutotuneDevice())
	res3, err := gpu.TuneGrid(probs[:1], GridOptions{Cache: cache, Retune: true, Budget: 20 * time.Second})
	require.NoError(t, err)
	require.Len(t, res3, 3)
	after := cache.Entries(gpu.AutotuneDevice())
	for _, r := range res3 {
		require.NoError(t, r.Err)
		require.Equal(t, autotune.FromMeasurement, r.Result.Source)
		ch, _, _ := cache.Lookup(r.Key)
		require.Equal(t, r.Result.Choice, ch, "retuned choice not stored")
		i := slices.IndexFunc(before, func(e autotune.Entry) bool { return e.Key == r.Key })
		j := slices.IndexFunc(after, func(e autotune.Entry) bool { return e.Key == r.Key })
		require.True(t, after[j].Updated.After(before[i].Updated), "%v not updated", r.Key)
	}

	// Bad problems are rejected before anything runs.
	good := probs[0]
	for _, tc := range []struct {
		mut  func(*TuneProblem)
		want error
	}{
		{func(p *TuneProblem) { p.Map = nil }, sparse.ErrShape},
		{func(p *TuneProblem) { p.Ci = 0 }, sparse.ErrShape},
		{func(p *TuneProblem) { p.Co = -1 }, sparse.ErrShape},
		{func(p *TuneProblem) { p.Math = kernels.Math(9) }, sparse.ErrDType},
		{func(p *TuneProblem) { p.Dirs = []autotune.Direction{"sideways"} }, sparse.ErrShape},
	} {
		p := good
		tc.mut(&p)
		launches := gpu.AutotuneStats().Launches
		_, err := gpu.TuneGrid([]TuneProblem{good, p}, GridOptions{Cache: cache, Retune: true})
		require.ErrorIs(t, err, tc.want)
		require.Contains(t, err.Error(), "problem 1")
		require.Equal(t, launches, gpu.AutotuneStats().Launches)
	}
	_, err = gpu.TuneGrid(probs, GridOptions{Budget: -time.Second})
	require.ErrorIs(t, err, sparse.ErrShape)
	_, err = ShellGrid([]int{1}, []int{16}, kernels.Maths)
	require.ErrorIs(t, err, sparse.ErrShape)
	// An empty map has nothing to tune: an error in its results only.
	empty := mapOK(t)(kmap.NewSubmanifold(nil, grid.Extent{Batch: 1, X: 4, Y: 4, Z: 4}, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
	res4, err := gpu.TuneGrid([]TuneProblem{{Name: "empty", Map: empty, Ci: 4, Co: 4, Math: kernels.F32, Dirs: []autotune.Direction{autotune.Fwd}}}, GridOptions{Cache: cache})
	require.NoError(t, err)
	require.Len(t, res4, 1)
	require.ErrorIs(t, res4[0].Err, sparse.ErrShape)
}

// TestAutotunePretuned writes a pre-tuned table from a grid run, loads it
// as the embedded table would be, and checks that Auto uses it without
// measuring and that a user entry wins over it.
func TestAutotunePretuned(t *testing.T) {
	defer gpu.SetTF32(false)
	m := shellMap(t, 16)
	const ci, co = 16, 32
	fresh, err := autotune.Open(autotune.InMemory(), autotune.WithPretuned(nil))
	require.NoError(t, err)
	res, err := gpu.TuneGrid([]TuneProblem{{Name: "p", Map: m, Ci: ci, Co: co, Math: kernels.F16}}, GridOptions{Cache: fresh, Budget: 10 * time.Second})
	require.NoError(t, err)
	dir := t.TempDir()
	path := filepath.Join(dir, "h200.json")
	require.NoError(t, gpu.WritePretuned(fresh, path, "test table"))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var head struct {
		Format  string `json:"format"`
		Schema  int    `json:"schema"`
		Note    string `json:"note"`
		Devices []struct {
			Device  autotune.Device   `json:"device"`
			Entries []json.RawMessage `json:"entries"`
		} `json:"devices"`
	}
	require.NoError(t, json.Unmarshal(raw, &head))
	require.Equal(t, autotune.Format, head.Format)
	require.Equal(t, autotune.Schema, head.Schema)
	require.Equal(t, "test table", head.Note)
	require.Len(t, head.Devices, 1)
	require.Equal(t, gpu.AutotuneDevice(), head.Devices[0].Device)
	require.Len(t, head.Devices[0].Entries, 3)
	matches, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	require.Equal(t, []string{path}, matches, "temporary files left behind")

	pre, err := autotune.Open(autotune.WithPath(filepath.Join(t.TempDir(), "user.json")), autotune.WithPretuned(os.DirFS(dir)))
	require.NoError(t, err)
	require.NoError(t, gpu.SetAutotune(pre, autotune.WithMode(autotune.On)))
	t.Cleanup(gpu.resetAutotune)
	rng := rand.New(rand.NewPCG(71, 72))
	d := newConvData(t, rng, m, ci, co, kernels.F16)
	defer d.free()
	for i, dir := range allDirs {
		require.Equal(t, res[i].Key, d.key(t, dir))
		got := d.run(t, dir, Options{})
		rec := gpu.autotuneState().lastRecord()
		require.Equal(t, autotune.FromPretuned, rec.result.Source, "%v", dir)
		require.Equal(t, res[i].Result.Choice.Candidate, rec.result.Choice.Candidate)
		cand, src, ok := gpu.AutotuneChoice(dir, m, sparse.Float16, ci, co)
		require.True(t, ok)
		require.Equal(t, autotune.FromPretuned, src)
		require.Equal(t, res[i].Result.Choice.Candidate, cand)
		o, err := candidateOptions(Options{}, rec.result.Choice.Candidate)
		require.NoError(t, err)
		requireSameBits(t, d.run(t, dir, o), got, fmt.Sprintf("%v pretuned", dir))
	}
	require.Zero(t, gpu.AutotuneStats().Launches)
	require.Equal(t, int64(3), gpu.AutotuneStats().PretunedHits)

	// A user entry wins over the table.
	k := d.key(t, autotune.Fwd)
	cands := convCandidates(k, gpu.tuneLimits())
	other := cands[len(cands)-1]
	if other == res[0].Result.Choice.Candidate {
		other = cands[0]
	}
	require.NoError(t, pre.Store(k, autotune.Choice{Candidate: other, Time: time.Microsecond}))
	got := d.run(t, autotune.Fwd, Options{})
	rec := gpu.autotuneState().lastRecord()
	require.Equal(t, autotune.FromCache, rec.result.Source)
	require.Equal(t, other, rec.result.Choice.Candidate)
	o, err := candidateOptions(Options{}, other)
	require.NoError(t, err)
	requireSameBits(t, d.run(t, autotune.Fwd, o), got, "user entry")
	require.Zero(t, gpu.AutotuneStats().Launches)
}

// BenchmarkAutotuneDecision measures the host cost that the tuner adds to
// an Auto convolution whose key is cached (key, candidates, lookup).
func BenchmarkAutotuneDecision(b *testing.B) {
	c, err := autotune.Open(autotune.InMemory(), autotune.WithPretuned(nil))
	require.NoError(b, err)
	require.NoError(b, gpu.SetAutotune(c, autotune.WithMode(autotune.On)))
	b.Cleanup(gpu.resetAutotune)
	m := shellMap(b, 64)
	k, ok := gpu.convKey(autotune.Fwd, m, kernels.F16, 64, 64)
	require.True(b, ok)
	cands := convCandidates(k, gpu.tuneLimits())
	require.NoError(b, c.Store(k, autotune.Choice{Candidate: cands[0], Time: time.Microsecond}))
	launch := func(Options) (sparse.Matrix, error) { return sparse.Matrix{}, errors.New("measured a cached key") }
	for b.Loop() {
		o, err := gpu.tuned(tuneFwd, m, kernels.F16, 64, 64, Options{}, launch)
		if err != nil || o.Tile != cands[0].Tile {
			b.Fatalf("tuned: %+v, %v", o, err)
		}
	}
}

// ExampleEngine_TuneGrid shows the offline workflow that fills
// autotune/pretuned/<device>.json: tune a grid into a fresh cache, then
// write the measured entries as a table (needs a GPU; not run as a test).
func ExampleEngine_TuneGrid() {
	e, err := Open(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	problems, err := ShellGrid(DefaultTuneResolutions, DefaultTuneChannels, kernels.Maths)
	if err != nil {
		fmt.Println(err)
		return
	}
	cache, err := autotune.Open(autotune.InMemory(), autotune.WithPretuned(nil))
	if err != nil {
		fmt.Println(err)
		return
	}
	results, err := e.TuneGrid(problems, GridOptions{Cache: cache, Progress: func(r TuneResult) {
		fmt.Printf("%-36s %-5s %v\n", r.Problem, r.Key.Dir, r.Result.Choice.Candidate)
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(results), "keys tuned")
	note := fmt.Sprintf("Measured on %v by TuneGrid over ShellGrid.", e.AutotuneDevice())
	if err := e.WritePretuned(cache, "autotune/pretuned/h200.json", note); err != nil {
		fmt.Println(err)
	}
}

// TestWindowPairsSplits checks the windowed weight-gradient split on the
// benchmark's shells: slices of pairsWindowRows rows, float32 partials
// capped at half the operands and at pairsPartBytes.
func TestWindowPairsSplits(t *testing.T) {
	for _, tc := range []struct {
		rows, m, n, esz int64
		want            int
	}{
		{4113056, 64, 64, 2, 503},   // RES 1024 C 64: ⌈rows/8192⌉ windows (222 MB of partials)
		{1026536, 128, 128, 2, 126}, // RES 512 C 128: windows (223 MB)
		{252392, 256, 256, 2, 18},   // RES 256 C 256: partials capped at half the operands (127 MB)
		{64160, 512, 512, 2, 0},     // RES 128 C 512: operands 131 MB, below the threshold
		{15192, 1024, 1024, 4, 0},   // RES 64 C 1024 tf32: 124 MB
		{1 << 22, 1024, 1024, 2, 4}, // partials capped at pairsPartBytes: 4 slices of 113 MB
		{1 << 24, 16, 16, 2, 2048},  // windows of pairsWindowRows: 2^24 / 8192 slices
		{0, 64, 64, 2, 0},
	} {
		got := windowPairsSplits(tc.rows, tc.m, tc.n, tc.esz, tc.m*27*tc.n, pairsWindowMinBytes, pairsWindowRows)
		require.Equal(t, tc.want, got, "%+v", tc)
		if got > 0 {
			part := int64(got) * 4 * tc.m * 27 * tc.n
			require.LessOrEqual(t, part, int64(pairsPartBytes), "%+v", tc)
			require.LessOrEqual(t, part, tc.rows*(tc.m+tc.n)*tc.esz/2, "%+v", tc)
		}
	}
}

// TestBalancedPairsSplits checks the balanced weight-gradient split: the
// longest tap fits its slices, every block gets at least pairsMinIters
// steps, the caps hold, and a split of one means no chunking.
func TestBalancedPairsSplits(t *testing.T) {
	mma, hop := kernels.Tiles[0], kernels.HopperTiles[0]
	for _, tc := range []struct {
		tile                            kernels.Tile
		tiles, longest, total, outElems int64
	}{
		{hop, 2, 3944, 44500, 27 * 256 * 256},    // RES 256 C 256: the centre tap is 2.5× the others
		{hop, 32, 238, 2600, 27 * 1024 * 1024},   // RES 64 C 1024
		{mma, 1, 16040, 200000, 27 * 128 * 128},  // RES 512 C 128
		{mma, 1, 1, 27, 27 * 64 * 64},            // one step per tap: no split
		{mma, 4, 100, 100, 1 << 30},              // partials capped: one slice
		{hop, 1, 1 << 20, 1 << 21, 27 * 64 * 64}, // very long: capped at pairsMaxSplits
	} {
		s, chunk := balancedPairsSplits(tc.tile, tc.tiles, 27, tc.longest, tc.total, tc.outElems, pairsPartBytes, 132)
		what := fmt.Sprintf("%+v", tc)
		require.GreaterOrEqual(t, s, 1, what)
		require.LessOrEqual(t, s, pairsMaxSplits, what)
		if s == 1 {
			require.Zero(t, chunk, what)
			continue
		}
		require.GreaterOrEqual(t, chunk, int64(pairsMinIters), what)
		require.GreaterOrEqual(t, int64(s)*chunk, tc.longest, "%s: the longest tap must fit its %d slices", what, s)
		require.LessOrEqual(t, int64(s)*4*tc.outElems, int64(max(pairsPartBytes, 4*tc.outElems)), what)
	}
	// The centre-heavy RES 256 case: the long tap gets more slices than a
	// short one (the point of balancing).
	s, chunk := balancedPairsSplits(hop, 2, 27, 3944, 44500, 27*256*256, pairsPartBytes, 132)
	require.Greater(t, int64(s), ceilDiv(1560, chunk))
	// A Hopper tile whose tiles·taps blocks fill hopperBalancedWaves per SM
	// is not split (RES 64 C 1024: 32 tiles per tap); RES 128 C 512 is.
	s, chunk = balancedPairsSplits(hop, 32, 27, 238, 2600, 27*1024*1024, pairsPartBytes, 132)
	require.Equal(t, 1, s)
	require.Zero(t, chunk)
	s, chunk = balancedPairsSplits(hop, 8, 27, 1003, 13000, 27*512*512, pairsPartBytes, 132)
	require.Equal(t, 8, s)
	require.Equal(t, int64(132), chunk)
}

// TestBalancedPairsSplitsPartBytes checks the partials budget of the
// balanced split (4-byte weight gradients get half their operands): the
// slices are cut to what partBytes holds, chunk grows so the longest tap
// still fits, and there is no split where two slices would not fit.
func TestBalancedPairsSplitsPartBytes(t *testing.T) {
	const out = 27 * 1024 * 1024 // tf32 (64, 1024, 2): Co·V·Ci
	mma := kernels.Tiles[0]
	const tiles, longest, total = 8, 475, 5000 // 13 slices of 38 steps without a budget
	free, freeChunk := balancedPairsSplits(mma, tiles, 27, longest, total, out, 1<<40, 132)
	require.Greater(t, free, 2, "the case must split three ways or more without a budget")
	for _, tc := range []struct {
		partBytes int64
		wantS     int
		wantChunk int64
	}{
		{62 << 20, 1, 0},                      // RES 64 C 1024 tf32: half the operands hold one slice
		{1 << 40, free, freeChunk},            // room for every slice
		{2*4*out + 1, 2, max(freeChunk, 238)}, // two slices: chunk grows to ⌈475/2⌉
		{0, 1, 0},                             // no room at all
	} {
		s, chunk := balancedPairsSplits(mma, tiles, 27, longest, total, out, tc.partBytes, 132)
		require.Equal(t, tc.wantS, s, "%+v", tc)
		require.Equal(t, tc.wantChunk, chunk, "%+v", tc)
		if s > 1 {
			require.GreaterOrEqual(t, int64(s)*chunk, int64(longest))
			require.LessOrEqual(t, int64(s)*4*out, tc.partBytes)
		}
	}
}

// TestPairsTapSlices checks the Go mirror of fg::PairsTap::slices.
func TestPairsTapSlices(t *testing.T) {
	for _, c := range []struct{ steps, chunk, splits, want int64 }{
		{100, 0, 7, 7},  // no balanced split: every slice
		{100, 30, 7, 4}, // ⌈100/30⌉
		{100, 10, 7, 7}, // capped at the splits
		{0, 30, 7, 1},   // an empty tap still takes one slice
		{5, 30, 7, 1},
		{60, 30, 7, 2},
	} {
		require.Equal(t, c.want, pairsTapSlices(c.steps, c.chunk, c.splits), "%+v", c)
	}
}
