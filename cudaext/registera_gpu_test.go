//go:build cudaext

package cudaext

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// raColumn is the host mirror of the register-A weight permutation
// (spconv_tf32_operand_ra): column c of a 32-column chunk holds the
// chunk's column raColumn(c).
func raColumn(c int) int {
	k, t, h := c>>3, c&3, (c>>2)&1
	return 16*(k>>1) + 4*t + 2*(k&1) + h
}

// TestRaColumnIsPermutation checks that raColumn maps the 32 columns of a
// chunk onto themselves, and that the eight columns a lane multiplies
// over a stage's four K steps (8k + t + 4h) are its two 16-byte runs.
func TestRaColumnIsPermutation(t *testing.T) {
	seen := map[int]bool{}
	for c := range 32 {
		p := raColumn(c)
		require.True(t, p >= 0 && p < 32 && !seen[p], "column %d → %d", c, p)
		seen[p] = true
	}
	for lane := range 4 {
		var got []int
		for k := range 4 {
			for h := range 2 {
				got = append(got, raColumn(8*k+lane+4*h))
			}
		}
		want := []int{4 * lane, 4*lane + 1, 4*lane + 2, 4*lane + 3, 16 + 4*lane, 17 + 4*lane, 18 + 4*lane, 19 + 4*lane}
		require.ElementsMatch(t, want, got, "lane quad %d", lane)
	}
}

// TestTF32OperandRA checks the register-A weight copy against the host:
// every value permuted inside its 32-column chunk with the 13 mantissa
// bits tf32 ignores cleared, and a count that is not whole chunks
// refused.
func TestTF32OperandRA(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 1))
	d := gpu.d
	for _, n := range []int64{32, 64 * 27 * 128, 32 * 1001} {
		src := synth.Uniform[float32](rng, int(n))
		w := dev(t, 1, int(n), src, sparse.Float32)
		wb, err := gpu.buffer(w, "w")
		require.NoError(t, err)
		var got []uint32
		require.NoError(t, d.do(func() error {
			c, err := gpu.tf32OperandRA(wb.ptr, n)
			if err != nil {
				return err
			}
			defer d.freeTemp(c)
			got, err = download[uint32](d, c.ptr, int(n))
			return err
		}))
		for i := range src {
			want := math.Float32bits(src[i&^31+raColumn(i&31)]) & 0xffffe000
			require.Equal(t, want, got[i], "n %d: value %d", n, i)
		}
		gpu.Free(w)
	}
	require.NoError(t, d.do(func() error {
		_, err := gpu.tf32OperandRA(d.zeroPage, 48)
		require.ErrorIs(t, err, sparse.ErrShape)
		require.ErrorContains(t, err, "32-column chunks")
		return nil
	}))
}

// TestRegisterA checks the register-A twins of the warp-specialised tf32
// gathers (kernels.RegisterAName, EnvRegisterA): forward with a bias and
// input gradient of every tile that has one against the float64
// reference, the implicit and masked GEMMs and their split-K forms (a
// split's share starting inside a tap: the consumers' first K chunk from
// the tile description), on a small shell, a random submanifold scene
// and a shell of more tiles than resident blocks (persistent blocks).
// The twin must run exactly where the gather allows it — K of whole
// 32-column chunks — and leave the other gathers to the plain kernel; the
// result must be within tf32's bound of the reference and of the plain
// kernel's (the products are the same, grouped differently per K step).
func TestRegisterA(t *testing.T) {
	skipWithoutHopper(t)
	rng := rand.New(rand.NewPCG(43, 1))
	scenes := twinScenes(t, rng, [][2]int{{32, 64}, {64, 128}, {96, 32}, {13, 40}, {72, 64}}, [][2]int{{128, 128}}, [][2]int{{64, 64}})
	cases := twinCases(t, kernels.Tile.HasRegisterA) // tf32 only
	setRA := deviceSwitch(t, func(d *Device) *bool { return &d.registerA })
	launches := deviceCounter(t, func(d *Device) int { return d.registerALaunches })
	withoutPerTapGathers(t)
	gpu.SetTF32(true)
	defer gpu.SetTF32(false)
	for _, sc := range scenes {
		for _, ch := range sc.channels {
			ci, co := ch[0], ch[1]
			ref := cpuReference(t, rng, sc.m, ci, co)
			x, w, b, dy := ref.operands(t, sc.m, sparse.Float32)
			// Forward reads K = ci, the input gradient K = co.
			wantRuns := 0
			for _, k := range []int{ci, co} {
				if k%32 == 0 {
					wantRuns++
				}
			}
			for _, c := range cases {
				for _, a := range twinAlgorithms {
					name := fmt.Sprintf("%s/ci%d-co%d/%s/%v/split%d", sc.name, ci, co, c.tile.Name(), a.alg, a.splits)
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: a.alg, SplitK: a.splits}, Tile: c.tile.Name()}
					checkTwin(t, sc.m, x, w, b, dy, o, ref, bound(kernels.TF32), setRA, launches, wantRuns, name)
				}
			}
			gpu.Free(x, w, b, dy)
		}
		gpu.ReleaseMap(sc.m)
	}
}
