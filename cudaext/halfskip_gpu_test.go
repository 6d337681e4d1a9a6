//go:build cudaext

package cudaext

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// TestHalfSkip checks the half-skip twins of the warp-specialised gathers
// (kernels.HalfSkipName, EnvHalfSkip): forward with a bias and input
// gradient of every tile that has one, the implicit GEMM (every tile
// visits all 27 taps, so most warpgroups skip some) and the masked one
// (tap unions of 128 rows, which 64-row halves often lack taps of), over
// 16-byte rows of one and of several K stages per tap and rows copied by
// element, on a small shell, a random submanifold scene and a shell of
// more tiles than resident blocks (persistent blocks). The twin must run,
// and its result must be within the arithmetic's bound of the float64
// reference and have the same bits as the plain kernel's: only products of
// zero rows are left out.
func TestHalfSkip(t *testing.T) {
	skipWithoutHopper(t)
	rng := rand.New(rand.NewPCG(41, 1))
	scenes := twinScenes(t, rng, [][2]int{{13, 40}, {72, 136}, {136, 264}}, [][2]int{{72, 136}}, [][2]int{{32, 64}})
	cases := twinCases(t, kernels.Tile.HasHalfSkip)
	setSkip := deviceSwitch(t, func(d *Device) *bool { return &d.halfSkip })
	launches := deviceCounter(t, func(d *Device) int { return d.halfSkipLaunches })
	withoutPerTapGathers(t)
	// The plain kernel it compares bit for bit, not its register-A or
	// swapped twin (FLEXGEMM_REGISTER_A=1 and FLEXGEMM_SWAPPED_GATHERS=1,
	// the default, run those; their sums differ in the last bits).
	deviceSwitch(t, func(d *Device) *bool { return &d.registerA })(false)
	deviceSwitch(t, func(d *Device) *bool { return &d.swapped })(false)
	for _, sc := range scenes {
		// The scene must give the masked gathers halves to skip.
		require.Positive(t, halvesLackingTaps(sc.m.Masked(), 128), "%s: no half of a masked tile lacks a tap", sc.name)
		for _, ch := range sc.channels {
			ci, co := ch[0], ch[1]
			ref := cpuReference(t, rng, sc.m, ci, co)
			for _, c := range cases {
				gpu.SetTF32(c.mth == kernels.TF32)
				x, w, b, dy := ref.operands(t, sc.m, dtypeOf(c.mth))
				for _, alg := range []sparse.Algorithm{sparse.Implicit, sparse.MaskedImplicit} {
					name := fmt.Sprintf("%s/ci%d-co%d/%v/%s/%v", sc.name, ci, co, c.mth, c.tile.Name(), alg)
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: alg}, Tile: c.tile.Name()}
					setSkip(false)
					before := launches()
					want := forwardAndInputGrad(t, sc.m, x, w, b, dy, o, true, name)
					require.Equal(t, before, launches(), "%s: switched off, no twin runs", name)
					setSkip(true)
					got := forwardAndInputGrad(t, sc.m, x, w, b, dy, o, true, name)
					require.Equal(t, before+2, launches(), "%s: the twin runs the forward and the input gradient", name)
					for d, r := range [][]float64{ref.y, ref.dx} {
						e := relL2(got[d], r)
						require.LessOrEqual(t, e, bound(c.mth), "%s direction %d: error %g against float64", name, d, e)
						requireSameBits(t, want[d], got[d], fmt.Sprintf("%s: direction %d: the twin against the plain kernel", name, d))
					}
				}
				gpu.Free(x, w, b, dy)
			}
			gpu.SetTF32(false)
		}
		gpu.ReleaseMap(sc.m)
	}
}

// halvesLackingTaps counts the (tile, half, tap) triples of the masked
// order's tiles of bm rows where a 64-row half lacks a tap that its tile's
// union has: the products the half skip leaves out.
func halvesLackingTaps(mk *kmap.Masked, bm int) int {
	n := 0
	order := mk.Order
	for t0 := 0; t0 < len(order); t0 += bm {
		t1 := min(t0+bm, len(order))
		union := make([]uint64, mk.Words)
		var halves [][]uint64
		for h0 := t0; h0 < t1; h0 += 64 {
			u := make([]uint64, mk.Words)
			for _, r := range order[h0:min(h0+64, t1)] {
				for i := range u {
					u[i] |= mk.Mask[int(r)*mk.Words+i]
				}
			}
			for i := range union {
				union[i] |= u[i]
			}
			halves = append(halves, u)
		}
		for _, u := range halves {
			for i := range u {
				n += bits.OnesCount64(union[i] &^ u[i])
			}
		}
	}
	return n
}
