//go:build cudaext

package cudaext

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
	"github.com/stretchr/testify/require"
)

// TestWeightGradOrderedSplits checks the split weight gradients that add
// their slices into a float32 sum in split order in the kernel
// (EnvOrderedSplits, fg::pairs_store_ordered): on the window split of
// small maps (thresholds lowered; windows of 64 and 1000 rows), in both
// 16-bit arithmetics, with the 64×64 and 128×128 Hopper tiles over one
// and two column tiles, the float32 result must be the
// partials-and-reduction result bit for bit (the same sums in the same
// order), also with the bias gradient beside it and with the blocks run in
// groups of splits (PairsParams.order_groups), and the narrow result (a
// scratch sum, rounded by the last split) that float32 result rounded, as
// the reduction rounds it; the kernel must take the path exactly where it
// applies (more than one slice, whole tiles) and leave partial tiles to
// the partials.
func TestWeightGradOrderedSplits(t *testing.T) {
	skipWithoutHopper(t)
	rng := rand.New(rand.NewPCG(69, 70))
	maps := splitTestMaps(t, rng, 16, grid.Extent{Batch: 1, X: 20, Y: 18, Z: 22}, 0.08)
	setWindow := func(minBytes, rows int64) {
		require.NoError(t, gpu.d.do(func() error {
			gpu.d.pairsWindowMin, gpu.d.pairsWindowRows = minBytes, rows
			return nil
		}))
	}
	defer setWindow(pairsWindowMinBytes, pairsWindowRows)
	var orig int64
	require.NoError(t, gpu.d.do(func() error { orig = gpu.d.pairsOrderGroups; return nil }))
	setOrder := func(g int64) {
		require.NoError(t, gpu.d.do(func() error { gpu.d.pairsOrderGroups = g; return nil }))
	}
	defer setOrder(orig)
	setOrdered := deviceSwitch(t, func(d *Device) *bool { return &d.orderedPairs })
	deviceSwitch(t, func(d *Device) *bool { return &d.poisonPartials })(true)
	launches := deviceCounter(t, func(d *Device) int { return d.orderedSplitLaunches })
	cases := []struct {
		ci, co int
		tile   string
		whole  bool
	}{
		{64, 64, "m64n64k64w4x1s4h", true},
		{128, 64, "m64n64k64w4x1s4h", true},
		{128, 128, "m128n128k64w8x1s6h", true},
		{256, 128, "m128n128k64w8x1s6h", true},
		{40, 64, "m64n64k64w4x1s4h", false},
	}
	ran := 0
	for _, sc := range maps {
		m := sc.m
		for _, c := range cases {
			xs := synth.Uniform[float32](rng, m.NIn*c.ci)
			dys := synth.Uniform[float32](rng, m.NOut*c.co)
			for _, mth := range []kernels.Math{kernels.F16, kernels.BF16} {
				dt := dtypeOf(mth)
				want, wantB := refWeightGrad(t, m, roundedF64(mth, xs), roundedF64(mth, dys), c.ci, c.co)
				x, dy := dev(t, m.NIn, c.ci, xs, dt), dev(t, m.NOut, c.co, dys, dt)
				for _, rows := range []int64{64, 1000} {
					setWindow(0, rows)
					s := windowPairsSplits(int64(m.NOut), int64(c.co), int64(c.ci), 2, int64(c.co*m.V()*c.ci), 0, rows)
					name := fmt.Sprintf("%s/ci%d-co%d/%v/%s/window%d-slices%d", sc.name, c.ci, c.co, mth, c.tile, rows, s)
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}, Tile: c.tile}
					setOrder(0)
					setOrdered(false)
					dw, db, err := gpu.ParamGrads(m, x, dy, o)
					require.NoError(t, err, name)
					got, gotB := host(t, dw), host(t, db)
					gpu.Free(dw, db)
					require.LessOrEqual(t, relL2(got, want), accBound, name)
					require.LessOrEqual(t, relL2(gotB, wantB), accBound, name)
					wantRuns := 0
					if c.whole && s > 1 {
						wantRuns = 1
					}
					setOrdered(true)
					before := launches()
					dw, db, err = gpu.ParamGrads(m, x, dy, o)
					require.NoError(t, err, name)
					require.Equal(t, wantRuns, launches()-before, "%s: ordered launches", name)
					require.Equal(t, got, host(t, dw), "%s: ordered splits", name)
					require.Equal(t, gotB, host(t, db), "%s: bias beside the ordered splits", name)
					gpu.Free(dw, db)
					ran += wantRuns
					// The blocks in groups of splits, long taps first: the
					// splits of a (tap, tile) still in order.
					for _, g := range []int64{1, 4, 7} {
						setOrder(g)
						dw, err := gpu.WeightGrad(m, x, dy, o)
						require.NoError(t, err, name)
						require.Equal(t, got, host(t, dw), "%s: ordered splits, order groups %d", name, g)
						gpu.Free(dw)
					}
					setOrder(0)
					// The narrow result on request, by the partials and
					// by the ordered splits: the float32 sums rounded.
					on := o
					on.NarrowWeightGrad = true
					for _, ordered := range []bool{false, true} {
						setOrdered(ordered)
						before = launches()
						dwN, err := gpu.WeightGrad(m, x, dy, on)
						require.NoError(t, err, name)
						runs := 0
						if ordered {
							runs = wantRuns
						}
						require.Equal(t, runs, launches()-before, "%s: narrow result, ordered %v: ordered launches", name, ordered)
						hN := host(t, dwN)
						gpu.Free(dwN)
						for i, v := range got {
							require.Equalf(t, roundTo(mth, v), hN[i], "%s: narrow element %d, ordered %v", name, i, ordered)
						}
					}
				}
				gpu.Free(x, dy)
			}
		}
	}
	require.Greater(t, ran, 0, "no case ran the ordered splits")
}

// TestOrderedSplitsWhere checks where Device.orderedSplits takes the
// ordered accumulation: the benchmark's fp16 and bf16 training steps'
// weight gradients ((512, 128, 2) on the 128×128 Hopper tile, (1024, 64, 2)
// on the 64×64 one, window splits, 16-bit results as FlexGEMM's .grad)
// must qualify, float32 results too; not the 16-warp tile, mma.sync tiles,
// tf32, the balanced split, one slice, partial tiles or the switch off.
func TestOrderedSplitsWhere(t *testing.T) {
	tile := func(name string) kernels.Tile {
		tl, err := kernels.ParseTile(name)
		require.NoError(t, err, name)
		return tl
	}
	h128, h64, h256 := tile("m128n128k64w8x1s6h"), tile("m64n64k64w4x1s4h"), tile("m256n128k64w16x1s4h")
	mma := kernels.Tiles[0]
	job := func(mth kernels.Math, out sparse.DType, m, n int64) pairsJob {
		return pairsJob{math: mth, M: m, N: n, V: 27, out: &Buffer{dtype: out}}
	}
	d := &Device{orderedPairs: true}
	cases := []struct {
		name   string
		j      pairsJob
		t      kernels.Tile
		splits int
		chunk  int64
		on     bool // orderedPairs
		want   bool
	}{
		{"fp16 (512, 128, 2), fp16 result", job(kernels.F16, sparse.Float16, 128, 128), h128, 126, 0, true, true},
		{"bf16 (512, 128, 2), bf16 result", job(kernels.BF16, sparse.BFloat16, 128, 128), h128, 126, 0, true, true},
		{"fp16 (1024, 64, 2), fp16 result", job(kernels.F16, sparse.Float16, 64, 64), h64, 100, 0, true, true},
		{"fp16, float32 result", job(kernels.F16, sparse.Float32, 128, 128), h128, 126, 0, true, true},
		{"switch off", job(kernels.F16, sparse.Float16, 128, 128), h128, 126, 0, false, false},
		{"one slice", job(kernels.F16, sparse.Float16, 128, 128), h128, 1, 0, true, false},
		{"balanced split", job(kernels.F16, sparse.Float16, 128, 128), h128, 8, 3, true, false},
		{"16-warp tile", job(kernels.F16, sparse.Float16, 256, 128), h256, 126, 0, true, false},
		{"partial tile rows", job(kernels.F16, sparse.Float16, 96, 128), h128, 126, 0, true, false},
		{"partial tile columns", job(kernels.F16, sparse.Float16, 128, 100), h128, 126, 0, true, false},
		{"mma.sync tile", job(kernels.F16, sparse.Float16, 128, 128), mma, 126, 0, true, false},
		{"tf32", job(kernels.TF32, sparse.Float32, 128, 128), h128, 126, 0, true, false},
	}
	for _, c := range cases {
		d.orderedPairs = c.on
		require.Equal(t, c.want, d.orderedSplits(c.j, c.t, c.splits, c.chunk), c.name)
	}
	require.False(t, mma.Hopper)
	require.Equal(t, 16, h256.WM*h256.WN)
}
