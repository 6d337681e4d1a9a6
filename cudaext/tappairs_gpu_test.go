//go:build cudaext

package cudaext

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
	"github.com/stretchr/testify/require"
)

// TestTapPairsWeightGrad checks the tap-pairs weight gradient
// (tappairs.go) against the float64 reference of the rounded inputs
// (float32 result, accBound) and of the inputs (the narrow result, the
// arithmetic's bound), in both 16-bit arithmetics and both masked
// algorithms: submanifold maps of odd V (the centre a pair of its own) and
// a strided 2×2×2 one (even V), channel counts of one and of several
// column tiles at both tile edges, tile heights cached by a forward or
// set, split counts from one slice (tiles past one block's list) to one
// slice a tile, with the partials poisoned so that a slice left unwritten
// shows. It must launch exactly where it applies (16-byte multiples of
// 64 channels, V ≤ 32), give the same bits twice, and sum the bias
// gradient beside it.
func TestTapPairsWeightGrad(t *testing.T) {
	skipWithoutHopper(t)
	ok := mapOK(t)
	rng := rand.New(rand.NewPCG(69, 1))
	rext := grid.Extent{Batch: 1, X: 14, Y: 12, Z: 10}
	sext := grid.Extent{Batch: 2, X: 24, Y: 20, Z: 18}
	big, bigExt := synth.SphereShell(48, 2)
	s8, s8Ext := synth.SphereShell(8, 1)
	type sceneCase struct {
		scene
		channels [][2]int // ci, co
	}
	scenes := []sceneCase{
		{scene{"shell8-subm3", shell8Map(t)}, [][2]int{{64, 64}, {128, 128}, {256, 128}, {13, 64}}},
		{scene{"random-subm3", ok(kmap.NewSubmanifold(synth.RandomScene(rng, rext, 0.3), rext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))}, [][2]int{{64, 128}, {128, 256}}},
		{scene{"random-strided-k2s2", ok(kmap.NewStrided(synth.RandomScene(rng, sext, 0.2), sext, grid.Cube(2, 2, 0, 1), nil))}, [][2]int{{64, 64}, {128, 128}}},
		{scene{"random-strided-k3s2", ok(kmap.NewStrided(synth.RandomScene(rng, sext, 0.2), sext, grid.Cube(3, 2, 1, 1), nil))}, [][2]int{{128, 64}}},
		{scene{"shell48b2-subm3", ok(kmap.NewSubmanifold(big, bigExt, [3]int{3, 3, 3}, [3]int{1, 1, 1}))}, [][2]int{{64, 64}}},
		{scene{"shell8-subm5", ok(kmap.NewSubmanifold(s8, s8Ext, [3]int{5, 5, 5}, [3]int{1, 1, 1}))}, [][2]int{{64, 64}}},
	}
	setOn := deviceSwitch(t, func(d *Device) *bool { return &d.tapPairs })
	setPoison := deviceSwitch(t, func(d *Device) *bool { return &d.poisonPartials })
	launches := deviceCounter(t, func(d *Device) int { return d.tapPairsLaunches })
	var wasSplits, wasRows int
	require.NoError(t, gpu.d.do(func() error { wasSplits, wasRows = gpu.d.tapPairsSplits, gpu.d.tapPairsRows; return nil }))
	setKnobs := func(splits, rows int) {
		require.NoError(t, gpu.d.do(func() error { gpu.d.tapPairsSplits, gpu.d.tapPairsRows = splits, rows; return nil }))
	}
	t.Cleanup(func() { setKnobs(wasSplits, wasRows) })
	setOn(true)
	setPoison(true)
	knobs := []struct{ splits, rows int }{{0, 0}, {1, 64}, {3, 192}, {1 << 15, 0}}
	for _, sc := range scenes {
		m := sc.m
		// 5×5×5 kernels (125 taps) are past the kernel's 32-bit tap masks.
		applies := m.V() <= 32
		for _, ch := range sc.channels {
			ci, co := ch[0], ch[1]
			xs := synth.Uniform[float32](rng, m.NIn*ci)
			dys := synth.Uniform[float32](rng, m.NOut*co)
			dwRef, _ := refWeightGrad(t, m, f64(xs), f64(dys), ci, co)
			for _, mth := range []kernels.Math{kernels.F16, kernels.BF16} {
				dt := dtypeOf(mth)
				dwR, dbR := refWeightGrad(t, m, roundedF64(mth, xs), roundedF64(mth, dys), ci, co)
				x := dev(t, m.NIn, ci, xs, dt)
				dy := dev(t, m.NOut, co, dys, dt)
				want := 0
				if applies && tapPairsEdge(int64(co), int64(ci)) > 0 {
					want = 1
				}
				for _, alg := range []sparse.Algorithm{sparse.MaskedImplicitSplitK, sparse.MaskedImplicit} {
					for ki, k := range knobs {
						name := fmt.Sprintf("%s/ci%d-co%d/%v/%v/splits%d-rows%d", sc.name, ci, co, mth, alg, k.splits, k.rows)
						setKnobs(k.splits, k.rows)
						o := Options{ConvOptions: sparse.ConvOptions{Algorithm: alg}}
						if ki == 0 {
							// The forward's masked tables first: the kernel
							// walks their (least) tile height.
							w := dev(t, co, m.V()*ci, synth.Uniform[float32](rng, co*m.V()*ci), dt)
							y, err := gpu.Forward(m, x, w, sparse.Matrix{}, o)
							require.NoError(t, err, name)
							gpu.Free(y, w)
						}
						before := launches()
						dw, db, err := gpu.ParamGrads(m, x, dy, o)
						require.NoError(t, err, name)
						require.Equal(t, want, launches()-before, "%s: tap-pairs launches", name)
						h32 := host(t, dw)
						hb := host(t, db)
						gpu.Free(dw, db)
						require.LessOrEqual(t, relL2(h32, dwR), accBound, "%s: float32 result vs the rounded inputs", name)
						require.LessOrEqual(t, relL2(hb, dbR), accBound, "%s: bias gradient", name)
						again, err := gpu.WeightGrad(m, x, dy, o)
						require.NoError(t, err, name)
						h2 := host(t, again)
						gpu.Free(again)
						for i := range h32 {
							if math.Float32bits(h32[i]) != math.Float32bits(h2[i]) {
								t.Fatalf("%s: element %d: %g then %g (not deterministic)", name, i, h32[i], h2[i])
							}
						}
						on := o
						on.NarrowWeightGrad = true
						dwN, err := gpu.WeightGrad(m, x, dy, on)
						require.NoError(t, err, name)
						require.LessOrEqual(t, relL2(host(t, dwN), dwRef), bound(mth), "%s: narrow result", name)
						gpu.Free(dwN)
					}
				}
				gpu.Free(x, dy)
			}
		}
		gpu.ReleaseMap(m)
	}
}
