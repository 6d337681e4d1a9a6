package cpu

import (
	"fmt"
	"testing"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/stretchr/testify/require"
)

// Impulse tests: with an asymmetric kernel whose every tap has a distinct
// weight, a unit impulse at one input site must produce exactly the taps
// that connect it to each output, by the geometry relation
//
//	in = out·S − P + k·D     (submanifold, strided)
//	out = in·S − P + k·D     (transposed, inverse)
//
// evaluated here from coordinates alone. A flipped or mis-ordered tap
// changes the answer. All values are small integers, exact in float32.

// connects reports whether tap v links input site in to output site out.
func connects(sc *scene, in, out []int32, v int) bool {
	if in[0] != out[0] {
		return false
	}
	k := sc.m.Conv.Tap(v)
	g := sc.geom
	for a := range 3 {
		if sc.transpose {
			if int(out[1+a]) != int(in[1+a])*g.Stride[a]-g.Padding[a]+k[a]*g.Dilation[a] {
				return false
			}
		} else if int(in[1+a]) != int(out[1+a])*g.Stride[a]-g.Padding[a]+k[a]*g.Dilation[a] {
			return false
		}
	}
	return true
}

// impulseWeight is w[co, v, ci] = 1000·co + 10·v + ci + 1.
func impulseWeight[T Float](co, V, ci int) []T {
	w := make([]T, co*V*ci)
	for c := range co {
		for v := range V {
			for k := range ci {
				w[(c*V+v)*ci+k] = T(1000*c + 10*v + k + 1)
			}
		}
	}
	return w
}

func testImpulse[T Float](t *testing.T, sc *scene, opt Options) {
	const ci, co = 2, 3
	m := sc.m
	V := m.V()
	w := impulseWeight[T](co, V, ci)
	in := func(i int) []int32 { return sc.inCoords[4*i : 4*i+4] }
	out := func(o int) []int32 { return sc.outCoords[4*o : 4*o+4] }

	// Forward: x = e_i in channel 1.
	for i := range m.NIn {
		x := make([]T, m.NIn*ci)
		x[i*ci+1] = 1
		y := make([]T, m.NOut*co)
		require.NoError(t, Forward(m, x, ci, w, co, nil, y, opt))
		for o := range m.NOut {
			for c := range co {
				var want T
				for v := range V {
					if connects(sc, in(i), out(o), v) {
						want += w[(c*V+v)*ci+1]
					}
				}
				require.Equal(t, want, y[o*co+c], "forward impulse at input %d, output %d channel %d", i, o, c)
			}
		}
	}
	// Input gradient: dy = e_o in channel 2.
	for o := range m.NOut {
		dy := make([]T, m.NOut*co)
		dy[o*co+2] = 1
		dx := make([]T, m.NIn*ci)
		require.NoError(t, InputGrad(m, dy, co, w, ci, dx, opt))
		for i := range m.NIn {
			for k := range ci {
				var want T
				for v := range V {
					if connects(sc, in(i), out(o), v) {
						want += w[(2*V+v)*ci+k]
					}
				}
				require.Equal(t, want, dx[i*ci+k], "input-gradient impulse at output %d, input %d channel %d", o, i, k)
			}
		}
	}
	// Weight gradient: x = e_i (channel 0), dy = e_o (channel 1), for the
	// first, middle and last input.
	for _, i := range []int{0, m.NIn / 2, m.NIn - 1} {
		for o := range m.NOut {
			x := make([]T, m.NIn*ci)
			x[i*ci] = 1
			dy := make([]T, m.NOut*co)
			dy[o*co+1] = 1
			dw := make([]T, co*V*ci)
			require.NoError(t, WeightGrad(m, x, ci, dy, co, dw, opt))
			for j, g := range dw {
				c, v, k := j/(V*ci), j/ci%V, j%ci
				var want T
				if c == 1 && k == 0 && connects(sc, in(i), out(o), v) {
					want = 1
				}
				require.Equal(t, want, g, "weight-gradient impulse input %d output %d: dw[%d, %d, %d]", i, o, c, v, k)
			}
		}
	}
}

func TestImpulse(t *testing.T) {
	specs := []sceneSpec{
		{kmap.Submanifold, ext(2, 5, 6, 4), 0.5, sub([3]int{3, 5, 1}, [3]int{1, 1, 1})},
		{kmap.Submanifold, ext(1, 6, 5, 6), 0.6, sub([3]int{1, 3, 3}, [3]int{1, 2, 1})},
		{kmap.Strided, ext(2, 6, 5, 6), 0.3, geo([3]int{2, 3, 4}, [3]int{2, 1, 2}, [3]int{0, 1, 2}, [3]int{1, 1, 1})},
		{kmap.Strided, ext(1, 7, 7, 7), 0.2, geo([3]int{3, 2, 3}, [3]int{1, 3, 2}, [3]int{2, 0, 1}, [3]int{2, 1, 2})},
		{kmap.Transposed, ext(2, 3, 4, 3), 0.4, geo([3]int{2, 3, 4}, [3]int{2, 1, 2}, [3]int{0, 1, 2}, [3]int{1, 1, 1})},
		{kmap.Transposed, ext(1, 3, 3, 4), 0.4, geo([3]int{3, 2, 3}, [3]int{1, 3, 2}, [3]int{2, 0, 1}, [3]int{2, 1, 2})},
		{kmap.Inverse, ext(2, 6, 5, 6), 0.3, geo([3]int{2, 3, 4}, [3]int{2, 1, 2}, [3]int{0, 1, 2}, [3]int{1, 1, 1})},
	}
	opts := []Options{{Method: Explicit}, {Method: Implicit, TileRows: 4}, {Method: ImplicitSplitK, SplitK: 3},
		{Method: Masked, TileRows: 8}, {Method: MaskedSplitK, SplitK: 5, TileRows: 4}}
	for i, spec := range specs {
		sc := buildScene(t, spec, uint64(i+20))
		require.NotZero(t, sc.m.NIn, "scene %v", spec)
		require.NotZero(t, sc.m.NOut, "scene %v", spec)
		for _, opt := range opts {
			t.Run(fmt.Sprintf("%v/%v", spec, opt.Method), func(t *testing.T) {
				testImpulse[float32](t, sc, opt)
				testImpulse[float64](t, sc, opt)
			})
		}
	}
}
