//go:build cudaext

package cudaext

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/stretchr/testify/require"
)

// TestMulticastGathers checks the multicast twins of the 128×256
// warp-specialised gathers and of the tf32 256×128 one (its swapped
// consumers) (kernels.MulticastName, EnvMulticast: clusters of two blocks
// computing a tile of twice the rows over tables built for that height,
// each weight stage multicast into both) in every arithmetic: forward
// with a bias and input gradient against the float64 reference, the
// implicit and masked GEMMs and their split-K forms, on a small shell, a
// random submanifold scene and a shell of many tiles, with output columns
// of one, two and partial column tiles, odd row counts (a last tile whose
// second half is past the rows or partly so) and rows that are not 16
// bytes. The twin must run exactly where the gather allows it — unsplit,
// over 16-byte rows, the weight as stored (the 16-bit forward gathers and
// both tf32 ones) — and leave the other gathers to the plain kernel; the
// result must be within the arithmetic's bound of the reference and of
// the plain kernel's.
func TestMulticastGathers(t *testing.T) {
	skipWithoutHopper(t)
	rng := rand.New(rand.NewPCG(64, 1))
	scenes := twinScenes(t, rng, [][2]int{{32, 256}, {64, 300}, {13, 64}, {72, 40}, {16, 37}}, [][2]int{{64, 256}}, [][2]int{{64, 512}})
	cases := twinCases(t, kernels.Tile.HasMulticast)
	was := multicastGathers.Load()
	t.Cleanup(func() { multicastGathers.Store(was) })
	setMC := func(on bool) { multicastGathers.Store(on) }
	launches := deviceCounter(t, func(d *Device) int { return d.multicastLaunches })
	var minRows int64
	require.NoError(t, gpu.d.do(func() error { minRows, gpu.d.multicastMinRows = gpu.d.multicastMinRows, 0; return nil }))
	t.Cleanup(func() { gpu.d.do(func() error { gpu.d.multicastMinRows = minRows; return nil }) })
	withoutPerTapGathers(t)
	defer gpu.SetTF32(false)
	for _, sc := range scenes {
		t.Logf("%s: %d output rows, %d row tiles of 128", sc.name, sc.m.NOut, (sc.m.NOut+127)/128)
		for _, ch := range sc.channels {
			ci, co := ch[0], ch[1]
			ref := cpuReference(t, rng, sc.m, ci, co)
			for _, c := range cases {
				gpu.SetTF32(c.mth == kernels.TF32)
				x, w, b, dy := ref.operands(t, sc.m, dtypeOf(c.mth))
				// Forward reads rows of K = ci, the input gradient K = co
				// (the 16-bit input gradient reads the weight transposed: the
				// plain kernel's; tf32's multiplies a transposed copy).
				vec := 16 / c.mth.ElemSize()
				ks := []int{ci, co}
				if c.mth != kernels.TF32 {
					ks = ks[:1]
				}
				for _, a := range twinAlgorithms {
					name := fmt.Sprintf("%s/ci%d-co%d/%v/%s/%v/split%d", sc.name, ci, co, c.mth, c.tile.Name(), a.alg, a.splits)
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: a.alg, SplitK: a.splits}, Tile: c.tile.Name()}
					wantRuns := 0
					if a.splits == 0 {
						for _, k := range ks {
							if k%vec == 0 {
								wantRuns++
							}
						}
					}
					checkTwin(t, sc.m, x, w, b, dy, o, ref, bound(c.mth), setMC, launches, wantRuns, name)
				}
				gpu.Free(x, w, b, dy)
			}
			gpu.SetTF32(false)
		}
		gpu.ReleaseMap(sc.m)
	}
}
