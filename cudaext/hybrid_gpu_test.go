//go:build cudaext

package cudaext

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// TestHybridGathers checks the hybrid tf32 forward gathers (hybrid.go):
// shares of a quarter, a half and all of a tile's rows, the masked and
// masked split-K algorithms, on a shell and a random scene (host maps),
// every Hopper tile and one plain tile, rows of a multiple of four columns
// and not: forwards within tf32's bound of the float64 reference and of
// the masked gather, input gradients of the reference, the same bits on a
// second run, one hybrid launch a gather, sparse pairs moved at a share of
// 1; float16 never hybrid; the tables made again when the share changes.
func TestHybridGathers(t *testing.T) {
	ok := mapOK(t)
	rng := rand.New(rand.NewPCG(73, 1))
	rext := grid.Extent{Batch: 2, X: 12, Y: 11, Z: 9}
	scenes := []scene{
		{"shell8-subm3", shell8Map(t)},
		{"random-subm3", ok(kmap.NewSubmanifold(synth.RandomScene(rng, rext, 0.3), rext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))},
	}
	tiles := kernels.Tiles
	if gpu.d.hopperTiles(kernels.TF32) {
		tiles = kernels.AllTiles()
	}
	setPerTapRules(t, 0, 0) // the masked gathers, not per tap
	setPerTapGroupRules(t, 0, perTapMinChannels)
	share := func(s float64) (launches int) {
		require.NoError(t, gpu.d.do(func() error {
			gpu.d.hybridShare = s
			launches = gpu.d.hybridLaunches
			return nil
		}))
		return launches
	}
	t.Cleanup(func() { share(0) })
	moved := false
	for _, sc := range scenes {
		m := sc.m
		for _, ch := range [][2]int{{256, 256}, {264, 258}} {
			ci, co := ch[0], ch[1]
			ref := cpuReference(t, rng, m, ci, co)
			gpu.SetTF32(true)
			x, w, b, dy := ref.operands(t, m, sparse.Float32)
			for _, tile := range tiles {
				if !tile.Supports(kernels.TF32) || !envSelected("FLEXGEMM_TEST_TILES", tile.Name()) ||
					tile.Name() != tiles[0].Name() && !tile.Hopper {
					continue
				}
				for _, alg := range []sparse.Algorithm{sparse.MaskedImplicitSplitK, sparse.MaskedImplicit} {
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: alg}, Tile: tile.Name()}
					forward := func() []float32 {
						y, err := gpu.Forward(m, x, w, b, o)
						require.NoError(t, err)
						defer gpu.Free(y)
						return host(t, y)
					}
					share(0)
					masked := forward()
					for _, s := range []float64{0.25, 0.5, 1} {
						name := fmt.Sprintf("%s/ci%d-co%d/%s/%v/share %g", sc.name, ci, co, tile.Name(), alg, s)
						before := share(s)
						got := forward()
						require.Equal(t, before+1, share(s), "%s: one hybrid launch", name)
						require.LessOrEqual(t, relL2(got, ref.y), bound(kernels.TF32), "%s: against float64", name)
						require.LessOrEqual(t, relL2(got, f64(masked)), bound(kernels.TF32), "%s: against the masked gather", name)
						requireSameBits(t, got, forward(), name+": second run")
						var sparsePairs bool
						require.NoError(t, gpu.d.do(func() error {
							h := gpu.maps.entries[keyOf(m)].hybrid[int64(tile.BM)]
							sparsePairs = h != nil && h.sparse != nil
							return nil
						}))
						if s == 1 {
							require.True(t, sparsePairs, "%s: a share of 1 moves the taps some row of a tile lacks", name)
							moved = true
						}
						// The input gradient: hybrid too, through the same
						// tables with mirrored weight taps.
						dgrad := func() []float32 {
							dx, err := gpu.InputGrad(m, dy, w, o)
							require.NoError(t, err, name)
							defer gpu.Free(dx)
							return host(t, dx)
						}
						before = share(s)
						dx := dgrad()
						require.Equal(t, before+1, share(s), "%s: the input gradient is hybrid", name)
						require.LessOrEqual(t, relL2(dx, ref.dx), bound(kernels.TF32), "%s: input gradient against float64", name)
						requireSameBits(t, dx, dgrad(), name+": input gradient, second run")
					}
				}
			}
			gpu.Free(x, w, b, dy)
			gpu.SetTF32(false)
			// float16 is not hybrid.
			x16, w16, b16, dy16 := ref.operands(t, m, sparse.Float16)
			before := share(1)
			y, err := gpu.Forward(m, x16, w16, b16, Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}})
			require.NoError(t, err)
			require.LessOrEqual(t, relL2(host(t, y), ref.y), bound(kernels.F16))
			require.Equal(t, before, share(0), "%s: float16 is not hybrid", sc.name)
			gpu.Free(x16, w16, b16, dy16, y)
		}
		gpu.ReleaseMap(m)
	}
	require.True(t, moved)
}
