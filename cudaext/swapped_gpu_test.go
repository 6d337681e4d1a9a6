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

// TestSwappedGathers checks the swapped twins of the warp-specialised
// tf32 gathers of 64 columns (kernels.SwappedName, EnvSwappedGathers):
// forward with a bias and input gradient of every tile that has one
// against the float64 reference, the implicit and masked GEMMs and their
// split-K forms, on a small shell, a random submanifold scene and a shell
// of more tiles than resident blocks. Channel counts include output
// columns that are not whole 64-column tiles and rows that are not 16
// bytes. The twin must run exactly where the gather allows it — unsplit,
// over 16-byte rows — and leave the other gathers to the plain kernel;
// the result must be within tf32's bound of the reference and of the
// plain kernel's (the same products, summed by the other operand order).
func TestSwappedGathers(t *testing.T) {
	skipWithoutHopper(t)
	ok := mapOK(t)
	rng := rand.New(rand.NewPCG(62, 1))
	type sceneChannels struct {
		scene
		channels [][2]int
	}
	rext := grid.Extent{Batch: 1, X: 14, Y: 12, Z: 10}
	big, bigExt := synth.SphereShell(64, 2)
	scenes := []sceneChannels{
		{scene{"shell8-subm3", shell8Map(t)}, [][2]int{{32, 64}, {64, 128}, {96, 40}, {13, 64}, {72, 24}}},
		{scene{"random-subm3", ok(kmap.NewSubmanifold(synth.RandomScene(rng, rext, 0.3), rext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))}, [][2]int{{64, 64}}},
		{scene{"shell64b2-subm3", ok(kmap.NewSubmanifold(big, bigExt, [3]int{3, 3, 3}, [3]int{1, 1, 1}))}, [][2]int{{64, 64}}},
	}
	var tiles []kernels.Tile
	for _, tile := range kernels.HopperTiles {
		if tile.HasSwapped(kernels.TF32) && envSelected("FLEXGEMM_TEST_TILES", tile.Name()) {
			tiles = append(tiles, tile)
		}
	}
	require.NotEmpty(t, tiles)
	setSW := deviceSwitch(t, func(d *Device) *bool { return &d.swapped })
	launches := deviceCounter(t, func(d *Device) int { return d.swappedLaunches })
	deviceSwitch(t, func(d *Device) *bool { return &d.registerA })(false)
	withoutPerTapGathers(t)
	gpu.SetTF32(true)
	defer gpu.SetTF32(false)
	algs := []struct {
		alg    sparse.Algorithm
		splits int
	}{{sparse.Implicit, 0}, {sparse.MaskedImplicit, 0}, {sparse.ImplicitSplitK, 3}, {sparse.MaskedImplicitSplitK, 5}}
	for _, sc := range scenes {
		for _, ch := range sc.channels {
			ci, co := ch[0], ch[1]
			ref := cpuReference(t, rng, sc.m, ci, co)
			x, w, b, dy := ref.operands(t, sc.m, sparse.Float32)
			for _, tile := range tiles {
				for _, a := range algs {
					name := fmt.Sprintf("%s/ci%d-co%d/%s/%v/split%d", sc.name, ci, co, tile.Name(), a.alg, a.splits)
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: a.alg, SplitK: a.splits}, Tile: tile.Name()}
					// Forward reads rows of K = ci, the input gradient K = co:
					// the twin runs unsplit over 16-byte rows.
					wantRuns := 0
					if a.splits == 0 {
						for _, k := range []int{ci, co} {
							if k%4 == 0 {
								wantRuns++
							}
						}
					}
					setSW(false)
					before := launches()
					want := forwardAndInputGrad(t, sc.m, x, w, b, dy, o, true, name)
					require.Equal(t, before, launches(), "%s: switched off, no twin runs", name)
					setSW(true)
					got := forwardAndInputGrad(t, sc.m, x, w, b, dy, o, true, name)
					require.Equal(t, before+wantRuns, launches(), "%s: the twin runs unsplit over 16-byte rows", name)
					for d, r := range [][]float64{ref.y, ref.dx} {
						e := relL2(got[d], r)
						require.LessOrEqual(t, e, bound(kernels.TF32), "%s direction %d: error %g against float64", name, d, e)
						r32 := make([]float64, len(want[d]))
						for i, v := range want[d] {
							r32[i] = float64(v)
						}
						e = relL2(got[d], r32)
						require.LessOrEqual(t, e, bound(kernels.TF32), "%s direction %d: error %g against the plain kernel", name, d, e)
					}
				}
			}
			gpu.Free(x, w, b, dy)
		}
		gpu.ReleaseMap(sc.m)
	}
}
