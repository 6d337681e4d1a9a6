package reference

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/stretchr/testify/require"
)

func line(n int) grid.Extent { return grid.Extent{Batch: 1, X: n, Y: 1, Z: 1} }

// sites returns coordinates (0, x, 0, 0) for each x.
func sites(xs ...int) []int32 {
	var c []int32
	for _, x := range xs {
		c = append(c, 0, int32(x), 0, 0)
	}
	return c
}

// TestConv3dByHand checks 1-D convolutions along x computed by hand.
func TestConv3dByHand(t *testing.T) {
	// x = [1, 2, 0, 4, 5] on a line of 5 with site 2 inactive; kernel
	// (10, 20, 30) along x, one channel.
	in := Sparse{Coords: sites(0, 1, 3, 4), Feats: []float64{1, 2, 4, 5}, C: 1, Extent: line(5)}
	w := Weight{W: []float64{10, 20, 30}, Co: 1, Ci: 1, K: [3]int{3, 1, 1}}
	one := [3]int{1, 1, 1}

	// Stride 1, padding 1: y[o] = 10·x[o−1] + 20·x[o] + 30·x[o+1] + 0.5.
	g := Geometry{Stride: one, Padding: [3]int{1, 0, 0}, Dilation: one}
	y := Conv3d(in, w, []float64{0.5}, g, sites(0, 1, 2, 3, 4))
	require.Equal(t, []float64{
		20*1 + 30*2 + 0.5,
		10*1 + 20*2 + 0.5,
		10*2 + 30*4 + 0.5,
		20*4 + 30*5 + 0.5,
		10*4 + 20*5 + 0.5,
	}, y)

	// Stride 2, no padding: outputs 0, 1 read x[0..2] and x[2..4].
	require.Equal(t, line(2), ConvExtent(line(5), w.K, Geometry{Stride: [3]int{2, 1, 1}, Dilation: one}))
	g = Geometry{Stride: [3]int{2, 1, 1}, Dilation: one}
	require.Equal(t, []float64{10*1 + 20*2, 20*4 + 30*5}, Conv3d(in, w, nil, g, sites(0, 1)))
	require.Equal(t, sites(0, 1), ConvOutputs(in.Coords, in.Extent, w.K, g))

	// Dilation 2, padding 2: y[o] = 10·x[o−2] + 20·x[o] + 30·x[o+2].
	g = Geometry{Stride: one, Padding: [3]int{2, 0, 0}, Dilation: [3]int{2, 1, 1}}
	require.Equal(t, []float64{20 * 1, 10*2 + 20*4, 20 * 5}, Conv3d(in, w, nil, g, sites(0, 3, 4)))

	// The submanifold form: padding K/2·D and outputs at the inputs.
	y = SubmanifoldConv3d(in, w, nil, one)
	require.Equal(t, []float64{20*1 + 30*2, 10*1 + 20*2, 20*4 + 30*5, 10*4 + 20*5}, y)
}

// TestConvTranspose3dByHand checks a 1-D transposed convolution by hand:
// input i scatters w[k]·x[i] to i·S − P + k·D.
func TestConvTranspose3dByHand(t *testing.T) {
	in := Sparse{Coords: sites(0, 2), Feats: []float64{1, 3}, C: 1, Extent: line(3)}
	w := Weight{W: []float64{10, 20, 30}, Co: 1, Ci: 1, K: [3]int{3, 1, 1}}
	g := Geometry{Stride: [3]int{2, 1, 1}, Padding: [3]int{1, 0, 0}, Dilation: [3]int{1, 1, 1}}
	oe := TransposeExtent(in.Extent, w.K, g)
	require.Equal(t, line(5), oe) // (3−1)·2 − 2 + 2 + 1
	// Input 0 reaches −1 (dropped), 0, 1; input 2 reaches 3, 4, 5 (dropped).
	require.Equal(t, sites(0, 1, 3, 4), TransposeOutputs(in.Coords, w.K, g, oe))
	y := ConvTranspose3d(in, w, []float64{1}, g, oe, sites(0, 1, 2, 3, 4))
	require.Equal(t, []float64{20 + 1, 30 + 1, 1, 10*3 + 1, 20*3 + 1}, y)
}

// TestChannelsAndBatches checks the channel contraction and that batches
// do not mix: two batches with one site each, 2→3 channels, 1×1×1 kernel.
func TestChannelsAndBatches(t *testing.T) {
	ext := grid.Extent{Batch: 2, X: 1, Y: 1, Z: 1}
	in := Sparse{Coords: []int32{0, 0, 0, 0, 1, 0, 0, 0}, Feats: []float64{1, 2, 3, 4}, C: 2, Extent: ext}
	w := Weight{W: []float64{1, 10, 100, 1000, -1, 0}, Co: 3, Ci: 2, K: [3]int{1, 1, 1}}
	y := SubmanifoldConv3d(in, w, nil, [3]int{1, 1, 1})
	require.Equal(t, []float64{21, 2100, -1, 43, 4300, -3}, y)
}

// randomProblem returns a random sparse input on a small grid.
func randomProblem(rng *rand.Rand, ext grid.Extent, c int, density float64) Sparse {
	var coords []int32
	for b := range ext.Batch {
		for x := range ext.X {
			for y := range ext.Y {
				for z := range ext.Z {
					if rng.Float64() < density {
						coords = append(coords, int32(b), int32(x), int32(y), int32(z))
					}
				}
			}
		}
	}
	feats := make([]float64, len(coords)/4*c)
	for i := range feats {
		feats[i] = rng.NormFloat64()
	}
	return Sparse{Coords: coords, Feats: feats, C: c, Extent: ext}
}

func randomWeight(rng *rand.Rand, co, ci int, k [3]int) Weight {
	w := Weight{W: make([]float64, co*k[0]*k[1]*k[2]*ci), Co: co, Ci: ci, K: k}
	for i := range w.W {
		w.W[i] = rng.NormFloat64()
	}
	return w
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// fdCheck compares an analytic gradient with central differences of
// f at p (modified in place and restored).
func fdCheck(t *testing.T, what string, p []float64, grad []float64, f func() float64) {
	t.Helper()
	const h = 1e-6
	require.Len(t, grad, len(p))
	for i := range p {
		old := p[i]
		p[i] = old + h
		fp := f()
		p[i] = old - h
		fm := f()
		p[i] = old
		fd := (fp - fm) / (2 * h)
		require.InDelta(t, fd, grad[i], 1e-6*(1+math.Abs(fd)), "%s[%d]", what, i)
	}
}

// TestGradientsFiniteDifference checks Conv3dGrad and ConvTranspose3dGrad
// against central differences of L = Σ y ⊙ r.
func TestGradientsFiniteDifference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ext := grid.Extent{Batch: 2, X: 4, Y: 3, Z: 4}
	in := randomProblem(rng, ext, 2, 0.4)
	k := [3]int{2, 3, 1}
	w := randomWeight(rng, 3, 2, k)
	bias := []float64{0.1, -0.2, 0.3}
	g := Geometry{Stride: [3]int{2, 1, 1}, Padding: [3]int{0, 1, 0}, Dilation: [3]int{1, 1, 2}}

	out := ConvOutputs(in.Coords, ext, k, g)
	require.NotEmpty(t, out)
	r := make([]float64, len(out)/4*w.Co)
	for i := range r {
		r[i] = rng.NormFloat64()
	}
	loss := func() float64 { return dot(Conv3d(in, w, bias, g, out), r) }
	dx, dw, db := Conv3dGrad(in, w, g, out, r)
	fdCheck(t, "conv dx", in.Feats, dx, loss)
	fdCheck(t, "conv dw", w.W, dw, loss)
	fdCheck(t, "conv db", bias, db, loss)

	oe := TransposeExtent(ext, k, g)
	tout := TransposeOutputs(in.Coords, k, g, oe)
	require.NotEmpty(t, tout)
	rt := make([]float64, len(tout)/4*w.Co)
	for i := range rt {
		rt[i] = rng.NormFloat64()
	}
	tloss := func() float64 { return dot(ConvTranspose3d(in, w, bias, g, oe, tout), rt) }
	dx, dw, db = ConvTranspose3dGrad(in, w, g, oe, tout, rt)
	fdCheck(t, "transpose dx", in.Feats, dx, tloss)
	fdCheck(t, "transpose dw", w.W, dw, tloss)
	fdCheck(t, "transpose db", bias, db, tloss)
}

// TestTransposeIsAdjoint checks ⟨Conv3d(x), u⟩ = ⟨x, ConvTranspose3d(u)⟩
// with the weight's channel axes swapped: the two oracles are written
// independently (gather and scatter form), so agreement checks both.
func TestTransposeIsAdjoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ext := grid.Extent{Batch: 2, X: 6, Y: 5, Z: 4}
	x := randomProblem(rng, ext, 3, 0.5)
	k := [3]int{3, 2, 3}
	g := Geometry{Stride: [3]int{2, 1, 3}, Padding: [3]int{1, 0, 2}, Dilation: [3]int{1, 2, 1}}
	w := randomWeight(rng, 4, 3, k)
	oe := ConvExtent(ext, k, g)
	u := randomProblem(rng, oe, 4, 0.7)
	y := Conv3d(x, w, nil, g, u.Coords)

	wt := Weight{W: make([]float64, len(w.W)), Co: 3, Ci: 4, K: k}
	V := k[0] * k[1] * k[2]
	for co := range 4 {
		for v := range V {
			for ci := range 3 {
				wt.W[(ci*V+v)*4+co] = w.W[(co*V+v)*3+ci]
			}
		}
	}
	z := ConvTranspose3d(u, wt, nil, g, ext, x.Coords)
	require.InDelta(t, dot(y, u.Feats), dot(x.Feats, z), 1e-9*(1+math.Abs(dot(y, u.Feats))))
}
