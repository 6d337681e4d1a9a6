package ops_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/grad"
	"github.com/flexgemm-go/flexgemm/ops"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// sampleScene returns voxel coordinates covering 60% of ext and m query
// points per batch spread over the grid (a few slightly outside).
func sampleScene(rng *rand.Rand, ext grid.Extent, perBatch int, dt tensor.Dtype) ([]int32, *tensor.Dense) {
	coords := randCoords(rng, ext, int(ext.Sites())*6/10)
	pts := make([]float64, 0, 3*ext.Batch*perBatch)
	for range ext.Batch * perBatch {
		for _, d := range ext.Spatial() {
			pts = append(pts, -0.3+(float64(d)+0.6)*rng.Float64())
		}
	}
	if dt == tensor.Float32 {
		p32 := make([]float32, len(pts))
		for i, v := range pts {
			p32[i] = float32(v)
		}
		return coords, tensor.New(tensor.WithShape(ext.Batch*perBatch, 3), tensor.WithBacking(p32))
	}
	return coords, tensor.New(tensor.WithShape(ext.Batch*perBatch, 3), tensor.WithBacking(pts))
}

var sampleExt = grid.Extent{Batch: 2, X: 4, Y: 3, Z: 4}

func TestGridSampleForwardMatchesSparse(t *testing.T) {
	const c = 3
	for _, mode := range []sparse.SampleMode{sparse.Trilinear, sparse.Nearest} {
		for _, fdt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			for _, pdt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
				t.Run(name(mode, "/feats=", fdt, "/points=", pdt), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(41, uint64(mode)))
					coords, pv := sampleScene(rng, sampleExt, 6, pdt)
					fv := randDense(rng, fdt, len(coords)/4, c)
					g := gorgonia.NewGraph()
					y, err := ops.GridSample3d(input(g, "feats", fv), input(g, "points", pv), coords, sampleExt, mode)
					require.NoError(t, err)
					require.Equal(t, tensor.Shape{pv.Shape()[0], c}, y.Shape())
					require.Equal(t, fdt, y.Dtype())
					vm := gorgonia.NewTapeMachine(g)
					defer vm.Close()
					require.NoError(t, vm.RunAll())

					plan, err := sparse.NewSamplePlan(coords, sampleExt, sparse.Matrix{Rows: pv.Shape()[0], Cols: 3, Data: pv.Data()}, 6, mode)
					require.NoError(t, err)
					want, err := sparse.GridSample(plan, sparse.Matrix{Rows: len(coords) / 4, Cols: c, Data: fv.Data()})
					require.NoError(t, err)
					require.Equal(t, want.Data, y.Value().Data())

					// A second run with moved points rebuilds the plan.
					moved := pv.Clone().(*tensor.Dense)
					shiftPoints(moved, 0.25)
					require.NoError(t, pv.Memset(zeroOf(pdt)))
					require.NoError(t, tensor.Copy(pv, moved))
					vm.Reset()
					require.NoError(t, vm.RunAll())
					plan2, err := sparse.NewSamplePlan(coords, sampleExt, sparse.Matrix{Rows: pv.Shape()[0], Cols: 3, Data: moved.Data()}, 6, mode)
					require.NoError(t, err)
					want2, err := sparse.GridSample(plan2, sparse.Matrix{Rows: len(coords) / 4, Cols: c, Data: fv.Data()})
					require.NoError(t, err)
					require.Equal(t, want2.Data, y.Value().Data())
					require.NotEqual(t, want.Data, want2.Data)
				})
			}
		}
	}
}

func zeroOf(dt tensor.Dtype) any {
	if dt == tensor.Float32 {
		return float32(0)
	}
	return 0.0
}

func shiftPoints(d *tensor.Dense, by float64) {
	switch p := d.Data().(type) {
	case []float32:
		for i := range p {
			p[i] += float32(by)
		}
	case []float64:
		for i := range p {
			p[i] += by
		}
	}
}

// TestGridSampleGradients checks the gradients of feats and points through
// both machines, in both modes.
func TestGridSampleGradients(t *testing.T) {
	for _, mode := range []sparse.SampleMode{sparse.Trilinear, sparse.Nearest} {
		t.Run(mode.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(42, uint64(mode)))
			coords, pv := sampleScene(rng, sampleExt, 4, tensor.Float64)
			fv := randDense(rng, tensor.Float64, len(coords)/4, 2)
			rep, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
				y, err := ops.GridSample3d(in[0], in[1], coords, sampleExt, mode)
				if err != nil {
					return nil, err
				}
				return sumSquares(y)
			}, []*tensor.Dense{fv, pv})
			require.NoError(t, err)
			pointGrad := rep.Inputs[1].Tape.Analytic
			nonzero := 0
			for _, v := range pointGrad {
				if v != 0 {
					nonzero++
				}
			}
			if mode == sparse.Nearest {
				require.Zero(t, nonzero)
			} else {
				require.Greater(t, nonzero, len(pointGrad)/2, "trilinear point gradients should mostly be non-zero")
			}
		})
	}
}

// TestGridSampleAfterConv samples the output of a submanifold convolution
// (a typical decoder head) and checks gradients of x, w and the points.
func TestGridSampleAfterConv(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 43))
	coords, pv := sampleScene(rng, sampleExt, 3, tensor.Float64)
	m, err := kmap.NewSubmanifold(coords, sampleExt, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	inputs := []*tensor.Dense{
		randDense(rng, tensor.Float64, m.NIn, 2),
		randDense(rng, tensor.Float64, weightShape(m, 2, 2)...),
		pv,
	}
	_, err = grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
		h, err := ops.SubMConv3d(in[0], in[1], m)
		if err != nil {
			return nil, err
		}
		y, err := ops.GridSample3d(h, in[2], coords, sampleExt, sparse.Trilinear)
		if err != nil {
			return nil, err
		}
		return sumSquares(y)
	}, inputs)
	require.NoError(t, err)
}

func TestGridSampleErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(44, 44))
	coords, pv := sampleScene(rng, sampleExt, 3, tensor.Float64)
	n := len(coords) / 4
	g := gorgonia.NewGraph()
	feats := input(g, "feats", randDense(rng, tensor.Float64, n, 2))
	featsRows := input(g, "featsrows", randDense(rng, tensor.Float64, n+1, 2))
	points := input(g, "points", pv)
	points2 := input(g, "points2", randDense(rng, tensor.Float64, 6, 2))
	pointsOdd := input(g, "pointsodd", randDense(rng, tensor.Float64, 5, 3))
	pointsInt := gorgonia.NewMatrix(g, tensor.Int32, gorgonia.WithShape(6, 3), gorgonia.WithName("pi"))
	cases := []struct {
		name string
		run  func() (*gorgonia.Node, error)
		want error
		text string
	}{
		{"feats rows", func() (*gorgonia.Node, error) {
			return ops.GridSample3d(featsRows, points, coords, sampleExt, sparse.Trilinear)
		}, sparse.ErrShape, "one row per coordinate"},
		{"points cols", func() (*gorgonia.Node, error) {
			return ops.GridSample3d(feats, points2, coords, sampleExt, sparse.Trilinear)
		}, sparse.ErrShape, "points has shape (6, 2)"},
		{"points per batch", func() (*gorgonia.Node, error) {
			return ops.GridSample3d(feats, pointsOdd, coords, sampleExt, sparse.Trilinear)
		}, sparse.ErrShape, "B = 2"},
		{"points dtype", func() (*gorgonia.Node, error) {
			return ops.GridSample3d(feats, pointsInt, coords, sampleExt, sparse.Trilinear)
		}, sparse.ErrDType, "points has dtype int32"},
		{"mode", func() (*gorgonia.Node, error) {
			return ops.GridSample3d(feats, points, coords, sampleExt, sparse.SampleMode(7))
		}, sparse.ErrMode, "7"},
		{"coords length", func() (*gorgonia.Node, error) {
			return ops.GridSample3d(feats, points, coords[:5], sampleExt, sparse.Trilinear)
		}, sparse.ErrShape, "length 5"},
		{"coords range", func() (*gorgonia.Node, error) {
			bad := append([]int32(nil), coords...)
			bad[1] = 99
			return ops.GridSample3d(feats, points, bad, sampleExt, sparse.Trilinear)
		}, sparse.ErrOutOfRange, "outside"},
		{"nil points", func() (*gorgonia.Node, error) {
			return ops.GridSample3d(feats, nil, coords, sampleExt, sparse.Trilinear)
		}, ops.ErrNilInput, "points is nil"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			y, err := c.run()
			require.Error(t, err)
			require.Nil(t, y)
			require.True(t, errors.Is(err, c.want), "%v does not wrap %v", err, c.want)
			require.Contains(t, err.Error(), c.text)
		})
	}

	// A non-finite point is reported when the graph runs.
	bad := pv.Clone().(*tensor.Dense)
	bad.Data().([]float64)[4] = math.NaN()
	g2 := gorgonia.NewGraph()
	_, err := ops.GridSample3d(input(g2, "feats", randDense(rng, tensor.Float64, n, 2)), input(g2, "points", bad), coords, sampleExt, sparse.Trilinear)
	require.NoError(t, err)
	vm := gorgonia.NewTapeMachine(g2)
	defer vm.Close()
	err = vm.RunAll()
	require.Error(t, err)
	require.Contains(t, err.Error(), sparse.ErrNotFinite.Error())
}

// TestGridSampleSecondOrder: differentiating the backward nodes reports a
// clear error instead of dropping terms.
func TestGridSampleSecondOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 45))
	coords, pv := sampleScene(rng, sampleExt, 3, tensor.Float64)
	s, err := grad.NewSampleGrid(coords, sampleExt, sparse.Trilinear)
	require.NoError(t, err)
	g := gorgonia.NewGraph()
	points := input(g, "points", pv)
	dy := input(g, "dy", randDense(rng, tensor.Float64, pv.Shape()[0], 2))
	df, err := grad.GridSampleFeatGrad(points, dy, s)
	require.NoError(t, err)
	require.Equal(t, tensor.Shape{len(coords) / 4, 2}, df.Shape())
	cost, err := sumSquares(df)
	require.NoError(t, err)
	_, err = gorgonia.Grad(cost, dy)
	// gorgonia.SymDiffError has no Unwrap: check the text.
	require.Error(t, err)
	require.Contains(t, err.Error(), grad.ErrNotDifferentiable.Error())
	require.Contains(t, err.Error(), "second-order gradients through grad.GridSampleFeatGrad are not supported")
}

func TestGridSampleHashing(t *testing.T) {
	rng := rand.New(rand.NewPCG(46, 46))
	coords, pv := sampleScene(rng, sampleExt, 3, tensor.Float64)
	other := append([]int32(nil), coords...)
	other[len(other)-1] = (other[len(other)-1] + 1) % int32(sampleExt.Z) // same length, other content
	g := gorgonia.NewGraph()
	feats := input(g, "feats", randDense(rng, tensor.Float64, len(coords)/4, 2))
	points := input(g, "points", pv)
	build := func(c []int32, mode sparse.SampleMode) *gorgonia.Node {
		y, err := ops.GridSample3d(feats, points, c, sampleExt, mode)
		require.NoError(t, err)
		return y
	}
	a := build(coords, sparse.Trilinear)
	b := build(other, sparse.Trilinear)
	c := build(coords, sparse.Nearest)
	require.NotSame(t, a, b)
	require.NotSame(t, a, c)
	require.NotSame(t, b, c)
	require.Same(t, a, build(append([]int32(nil), coords...), sparse.Trilinear), "equal grids are one node")
}

// TestGridSampleMixedDtypes: float32 features sampled at float64 points
// get a float32 feature gradient and a float64 point gradient.
func TestGridSampleMixedDtypes(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 47))
	coords, pv := sampleScene(rng, sampleExt, 3, tensor.Float64)
	fv := randDense(rng, tensor.Float32, len(coords)/4, 2)
	rep, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
		y, err := ops.GridSample3d(in[0], in[1], coords, sampleExt, sparse.Trilinear)
		if err != nil {
			return nil, err
		}
		return sumSquares(y)
	}, []*tensor.Dense{fv, pv})
	require.NoError(t, err, "%v", rep)

	g := gorgonia.NewGraph()
	feats, points := input(g, "feats", fv), input(g, "points", pv)
	y, err := ops.GridSample3d(feats, points, coords, sampleExt, sparse.Trilinear)
	require.NoError(t, err)
	cost, err := sumSquares(y)
	require.NoError(t, err)
	grads, err := gorgonia.Grad(cost, feats, points)
	require.NoError(t, err)
	require.Equal(t, tensor.Float32, grads[0].Dtype())
	require.Equal(t, tensor.Float64, grads[1].Dtype())
}
