//go:build cudaext

package cudaext

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
)

// TestSwappedGathers checks the swapped twins of the warp-specialised
// gathers of 128 rows and 64 columns and of the 256×128 tiles
// (kernels.SwappedName, EnvSwappedGathers; the 16-bit input gradients'
// kernels.SwappedTransposedName, EnvSwappedWT, switched on here) in every
// arithmetic: forward with a bias and input
// gradient of every tile that has one against the float64 reference, the
// implicit and masked GEMMs and their split-K forms, on a small shell, a
// random submanifold scene and a shell of more tiles than resident
// blocks. Channel counts include output columns that are not whole
// 64-column tiles (and odd ones: 16-bit element stores) and rows that are
// not 16 bytes. The twin must run exactly where the gather allows it —
// unsplit, over 16-byte rows — and leave the other gathers to the plain kernel;
// the result must be within the arithmetic's bound of the reference and
// of the plain kernel's (the same products, summed by the other operand
// order).
func TestSwappedGathers(t *testing.T) {
	skipWithoutHopper(t)
	rng := rand.New(rand.NewPCG(62, 1))
	scenes := twinScenes(t, rng, [][2]int{{32, 64}, {64, 128}, {96, 40}, {13, 64}, {72, 24}, {16, 37}}, [][2]int{{64, 64}}, [][2]int{{64, 64}})
	cases := twinCases(t, kernels.Tile.HasSwapped)
	setSW := deviceSwitch(t, func(d *Device) *bool { return &d.swapped })
	launches := deviceCounter(t, func(d *Device) int { return d.swappedLaunches })
	deviceSwitch(t, func(d *Device) *bool { return &d.registerA })(false)
	swappedWT.Store(true)
	defer swappedWT.Store(swappedWTDefault)
	withoutPerTapGathers(t)
	defer gpu.SetTF32(false)
	for _, sc := range scenes {
		for _, ch := range sc.channels {
			ci, co := ch[0], ch[1]
			ref := cpuReference(t, rng, sc.m, ci, co)
			for _, c := range cases {
				gpu.SetTF32(c.mth == kernels.TF32)
				x, w, b, dy := ref.operands(t, sc.m, dtypeOf(c.mth))
				// Forward reads rows of K = ci, the input gradient K = co;
				// a 16-bit input gradient reads the weight transposed, so its
				// twin (where the tile has one) needs rows of N = ci 16 bytes
				// too, as the plain kernel's bulk copies do.
				vec := 16 / c.mth.ElemSize()
				inputTwin := c.mth == kernels.TF32 || c.tile.HasSwappedTransposed(c.mth)
				for _, a := range twinAlgorithms {
					name := fmt.Sprintf("%s/ci%d-co%d/%v/%s/%v/split%d", sc.name, ci, co, c.mth, c.tile.Name(), a.alg, a.splits)
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: a.alg, SplitK: a.splits}, Tile: c.tile.Name()}
					wantRuns := 0
					if a.splits == 0 {
						if ci%vec == 0 {
							wantRuns++
						}
						if inputTwin && co%vec == 0 && (c.mth == kernels.TF32 || ci%vec == 0) {
							wantRuns++
						}
					}
					checkTwin(t, sc.m, x, w, b, dy, o, ref, bound(c.mth), setSW, launches, wantRuns, name)
				}
				gpu.Free(x, w, b, dy)
			}
			gpu.SetTF32(false)
		}
		gpu.ReleaseMap(sc.m)
	}
}
