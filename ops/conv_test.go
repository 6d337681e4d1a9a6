package ops_test

import (
	"errors"
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

// convFor returns the kind-checked constructor for m.
func convFor(m *kmap.Map) func(x, w *gorgonia.Node, m *kmap.Map, opts ...ops.ConvOption) (*gorgonia.Node, error) {
	switch m.Kind {
	case kmap.Submanifold:
		return ops.SubMConv3d
	case kmap.Strided:
		return ops.SparseConv3d
	case kmap.Inverse:
		return ops.InverseConv3d
	default:
		return ops.TransposedConv3d
	}
}

func weightShape(m *kmap.Map, co, ci int) []int {
	k := m.Conv.Kernel
	return []int{co, k[0], k[1], k[2], ci}
}

func TestConvForwardMatchesSparse(t *testing.T) {
	const ci, co = 3, 4
	algos := append([]sparse.Algorithm{sparse.Auto}, sparse.Algorithms...)
	for _, tm := range testMaps(t, 1) {
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			for ai, algo := range algos {
				bias := ai%2 == 0
				t.Run(name(tm.Name, "/", dt, "/", algo, "/bias=", bias), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(ai), 7))
					xv := randDense(rng, dt, tm.M.NIn, ci)
					wv := randDense(rng, dt, weightShape(tm.M, co, ci)...)
					bv := randDense(rng, dt, co)

					g := gorgonia.NewGraph()
					x, w := input(g, "x", xv), input(g, "w", wv)
					opts := []ops.ConvOption{ops.WithAlgorithm(algo), ops.WithSplitK(2), ops.WithTileRows(8)}
					want := sparse.Matrix{}
					if bias {
						opts = append(opts, ops.WithBias(input(g, "b", bv)))
						want = sparse.Matrix{Rows: 1, Cols: co, Data: bv.Data()}
					}
					y, err := convFor(tm.M)(x, w, tm.M, opts...)
					require.NoError(t, err)
					require.Equal(t, tensor.Shape{tm.M.NOut, co}, y.Shape())
					require.Equal(t, dt, y.Dtype())
					vm := gorgonia.NewTapeMachine(g)
					defer vm.Close()
					require.NoError(t, vm.RunAll())

					ref, err := sparse.Conv(tm.M,
						sparse.Matrix{Rows: tm.M.NIn, Cols: ci, Data: xv.Data()},
						sparse.Matrix{Rows: co, Cols: tm.M.V() * ci, Data: wv.Data()},
						want, sparse.ConvOptions{Algorithm: algo, SplitK: 2, TileRows: 8})
					require.NoError(t, err)
					require.Equal(t, ref.Data, y.Value().Data(), "graph result must equal sparse.Conv bit for bit")

					// The generic Conv3d gives the same node value.
					g2 := gorgonia.NewGraph()
					opts2 := []ops.ConvOption{ops.WithAlgorithm(algo), ops.WithSplitK(2), ops.WithTileRows(8)}
					if bias {
						opts2 = append(opts2, ops.WithBias(input(g2, "b", bv)))
					}
					y2, err := ops.Conv3d(input(g2, "x", xv), input(g2, "w", wv), tm.M, opts2...)
					require.NoError(t, err)
					vm2 := gorgonia.NewTapeMachine(g2)
					defer vm2.Close()
					require.NoError(t, vm2.RunAll())
					require.Equal(t, ref.Data, y2.Value().Data())
				})
			}
		}
	}
}

// TestConvGradients checks every gradient (x, w, bias) of every map kind
// against finite differences through TapeMachine+Grad and LispMachine.
func TestConvGradients(t *testing.T) {
	const ci, co = 2, 3
	i := 0
	for _, tm := range testMaps(t, 2) {
		for _, bias := range []bool{false, true} {
			algo := sparse.Algorithms[i%len(sparse.Algorithms)]
			i++
			t.Run(name(tm.Name, "/", algo, "/bias=", bias), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(i), 3))
				inputs := []*tensor.Dense{
					randDense(rng, tensor.Float64, tm.M.NIn, ci),
					randDense(rng, tensor.Float64, weightShape(tm.M, co, ci)...),
				}
				if bias {
					inputs = append(inputs, randDense(rng, tensor.Float64, co))
				}
				rep, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
					opts := []ops.ConvOption{ops.WithAlgorithm(algo), ops.WithSplitK(3), ops.WithTileRows(4)}
					if bias {
						opts = append(opts, ops.WithBias(in[2]))
					}
					y, err := convFor(tm.M)(in[0], in[1], tm.M, opts...)
					if err != nil {
						return nil, err
					}
					return sumSquares(y)
				}, inputs)
				require.NoError(t, err)
				require.True(t, rep.OK())
				for _, in := range rep.Inputs {
					require.True(t, in.Tape.Ran)
					require.True(t, in.Lisp.Ran)
					require.Less(t, in.Tape.MaxAbsErr, 1e-6, rep.String())
					require.Less(t, in.Lisp.MaxAbsErr, 1e-6, rep.String())
				}
			})
		}
	}
}

// TestConvChain differentiates two stacked convolutions over a strided and
// its inverse map (an encoder/decoder pair) sharing one weight node.
func TestConvChain(t *testing.T) {
	maps := testMaps(t, 3)
	strided, inverse := maps[1].M, maps[2].M
	rng := rand.New(rand.NewPCG(5, 5))
	inputs := []*tensor.Dense{
		randDense(rng, tensor.Float64, strided.NIn, 2),
		randDense(rng, tensor.Float64, weightShape(strided, 2, 2)...),
	}
	_, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
		h, err := ops.SparseConv3d(in[0], in[1], strided)
		if err != nil {
			return nil, err
		}
		y, err := ops.InverseConv3d(h, in[1], inverse, ops.WithAlgorithm(sparse.MaskedImplicit))
		if err != nil {
			return nil, err
		}
		return sumSquares(y)
	}, inputs)
	require.NoError(t, err)
}

func TestConvHashing(t *testing.T) {
	maps := testMaps(t, 4)
	m := maps[0].M
	rng := rand.New(rand.NewPCG(1, 1))
	g := gorgonia.NewGraph()
	x := input(g, "x", randDense(rng, tensor.Float64, m.NIn, 2))
	w := input(g, "w", randDense(rng, tensor.Float64, weightShape(m, 2, 2)...))
	b := input(g, "b", randDense(rng, tensor.Float64, 2))

	// A twin map with the same coordinates and geometry is a different map.
	twin, err := kmap.NewSubmanifold(m.OutCoords, m.In, m.Conv.Kernel, m.Conv.Dilation)
	require.NoError(t, err)

	build := func(m *kmap.Map, opts ...ops.ConvOption) *gorgonia.Node {
		y, err := ops.Conv3d(x, w, m, opts...)
		require.NoError(t, err)
		return y
	}
	variants := []*gorgonia.Node{
		build(m),
		build(twin),
		build(m, ops.WithAlgorithm(sparse.Explicit)),
		build(m, ops.WithAlgorithm(sparse.ImplicitSplitK)),
		build(m, ops.WithAlgorithm(sparse.ImplicitSplitK), ops.WithSplitK(2)),
		build(m, ops.WithAlgorithm(sparse.ImplicitSplitK), ops.WithSplitK(3)),
		build(m, ops.WithTileRows(16)),
		build(m, ops.WithBias(b)),
		build(m, ops.WithoutInputGrad()),
	}
	for i := range variants {
		for j := range i {
			require.NotSame(t, variants[i], variants[j], "variants %d and %d were merged", i, j)
			require.NotEqual(t, variants[i].Op().Hashcode(), variants[j].Op().Hashcode(), "variants %d and %d hash equal", i, j)
			require.NotEqual(t, variants[i].Op().String(), variants[j].Op().String())
		}
	}
	// The same parameters on the same inputs are one node (Gorgonia's CSE).
	require.Same(t, variants[2], build(m, ops.WithAlgorithm(sparse.Explicit)))

	// The graph computes all variants with the right values.
	vm := gorgonia.NewTapeMachine(g)
	defer vm.Close()
	require.NoError(t, vm.RunAll())
	require.InDeltaSlice(t, variants[0].Value().Data(), variants[2].Value().Data(), 1e-12)
	require.InDeltaSlice(t, variants[0].Value().Data(), variants[1].Value().Data(), 1e-12)
}

func TestConvErrors(t *testing.T) {
	maps := testMaps(t, 6)
	subm, strided := maps[0].M, maps[1].M
	rng := rand.New(rand.NewPCG(2, 2))
	g := gorgonia.NewGraph()
	x := input(g, "x", randDense(rng, tensor.Float64, subm.NIn, 2))
	x32 := input(g, "x32", randDense(rng, tensor.Float32, subm.NIn, 2))
	xRows := input(g, "xrows", randDense(rng, tensor.Float64, subm.NIn+1, 2))
	x3 := input(g, "x3", randDense(rng, tensor.Float64, subm.NIn, 2, 1))
	xi := gorgonia.NewMatrix(g, tensor.Int32, gorgonia.WithShape(subm.NIn, 2), gorgonia.WithName("xi"))
	w := input(g, "w", randDense(rng, tensor.Float64, 4, 3, 3, 3, 2))
	wCi := input(g, "wci", randDense(rng, tensor.Float64, 4, 3, 3, 3, 5))
	wK := input(g, "wk", randDense(rng, tensor.Float64, 4, 3, 3, 1, 2))
	w4 := input(g, "w4", randDense(rng, tensor.Float64, 4, 27, 2, 1))
	b := input(g, "b", randDense(rng, tensor.Float64, 4))
	bBad := input(g, "bbad", randDense(rng, tensor.Float64, 3))
	b32 := input(g, "b32", randDense(rng, tensor.Float32, 4))
	other := gorgonia.NewGraph()
	wOther := input(other, "w", randDense(rng, tensor.Float64, 4, 3, 3, 3, 2))

	cases := []struct {
		name string
		run  func() (*gorgonia.Node, error)
		want error
		text string
	}{
		{"float32 x with float64 w", func() (*gorgonia.Node, error) { return ops.Conv3d(x32, w, subm) }, sparse.ErrDType, "weight has dtype float64 but x is float32"},
		{"int32 x", func() (*gorgonia.Node, error) { return ops.Conv3d(xi, w, subm) }, sparse.ErrDType, "x has dtype int32"},
		{"float32 bias", func() (*gorgonia.Node, error) { return ops.Conv3d(x, w, subm, ops.WithBias(b32)) }, sparse.ErrDType, "bias has dtype float32"},
		{"x rank 3", func() (*gorgonia.Node, error) { return ops.Conv3d(x3, w, subm) }, sparse.ErrShape, "x has shape"},
		{"x rows", func() (*gorgonia.Node, error) { return ops.Conv3d(xRows, w, subm) }, sparse.ErrShape, "m.NIn"},
		{"Ci mismatch", func() (*gorgonia.Node, error) { return ops.Conv3d(x, wCi, subm) }, sparse.ErrShape, "Ci of x"},
		{"kernel mismatch", func() (*gorgonia.Node, error) { return ops.Conv3d(x, wK, subm) }, sparse.ErrShape, "the map's kernel [3 3 3]"},
		{"weight rank 4", func() (*gorgonia.Node, error) { return ops.Conv3d(x, w4, subm) }, sparse.ErrShape, "weight has shape"},
		{"bias shape", func() (*gorgonia.Node, error) { return ops.Conv3d(x, w, subm, ops.WithBias(bBad)) }, sparse.ErrShape, "bias has shape"},
		{"nil map", func() (*gorgonia.Node, error) { return ops.Conv3d(x, w, nil) }, ops.ErrNilInput, "nil kernel map"},
		{"nil x", func() (*gorgonia.Node, error) { return ops.Conv3d(nil, w, subm) }, ops.ErrNilInput, "x is nil"},
		{"other graph", func() (*gorgonia.Node, error) { return ops.Conv3d(x, wOther, subm) }, sparse.ErrShape, "another graph"},
		{"kind", func() (*gorgonia.Node, error) { return ops.SubMConv3d(x, w, strided) }, ops.ErrMapKind, "needs a submanifold map, got a strided map"},
		{"kind transposed", func() (*gorgonia.Node, error) { return ops.TransposedConv3d(x, w, subm) }, ops.ErrMapKind, "transposed"},
		{"negative split-K", func() (*gorgonia.Node, error) { return ops.Conv3d(x, w, subm, ops.WithSplitK(-1)) }, ops.ErrOption, "split-K -1"},
		{"negative tile", func() (*gorgonia.Node, error) { return ops.Conv3d(x, w, subm, ops.WithTileRows(-2)) }, ops.ErrOption, "tile rows -2"},
		{"bad algorithm", func() (*gorgonia.Node, error) { return ops.Conv3d(x, w, subm, ops.WithAlgorithm(sparse.Algorithm(42))) }, sparse.ErrAlgorithm, "42"},
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
	// A valid call with the same nodes works.
	y, err := ops.Conv3d(x, w, subm, ops.WithBias(b))
	require.NoError(t, err)
	require.Equal(t, tensor.Shape{subm.NOut, 4}, y.Shape())
}

// TestConvAdam trains a submanifold convolution towards a target with the
// graph-per-batch pattern: a fresh graph every step, the weight shared.
func TestConvAdam(t *testing.T) {
	m := testMaps(t, 8)[0].M
	rng := rand.New(rand.NewPCG(8, 8))
	xv := randDense(rng, tensor.Float64, m.NIn, 2)
	wTrue := randDense(rng, tensor.Float64, weightShape(m, 1, 2)...)
	target, err := sparse.Conv(m, sparse.Matrix{Rows: m.NIn, Cols: 2, Data: xv.Data()},
		sparse.Matrix{Rows: 1, Cols: m.V() * 2, Data: wTrue.Data()}, sparse.Matrix{}, sparse.ConvOptions{})
	require.NoError(t, err)
	tv := tensor.New(tensor.WithShape(m.NOut, 1), tensor.WithBacking(target.Data))

	shared := tensor.New(tensor.Of(tensor.Float64), tensor.WithShape(weightShape(m, 1, 2)...)) // zeros
	solver := gorgonia.NewAdamSolver(gorgonia.WithLearnRate(0.05))
	var losses []float64
	for step := 0; step < 30; step++ {
		g := gorgonia.NewGraph()
		x := input(g, "x", xv)
		w := input(g, "w", shared)
		tg := input(g, "target", tv)
		y, err := ops.SubMConv3d(x, w, m)
		require.NoError(t, err)
		diff, err := gorgonia.Sub(y, tg)
		require.NoError(t, err)
		loss, err := sumSquares(diff)
		require.NoError(t, err)
		_, err = gorgonia.Grad(loss, w)
		require.NoError(t, err)
		vm := gorgonia.NewTapeMachine(g, gorgonia.BindDualValues(w))
		require.NoError(t, vm.RunAll())
		losses = append(losses, loss.Value().Data().(float64))
		if step == 0 {
			// Adam's first step moves every weight by the learning rate
			// against the sign of its gradient.
			gv, err := w.Grad()
			require.NoError(t, err)
			before := append([]float64(nil), shared.Data().([]float64)...)
			require.NoError(t, solver.Step(gorgonia.NodesToValueGrads(gorgonia.Nodes{w})))
			for j, gj := range gv.Data().([]float64) {
				if gj > 1e-9 {
					require.Less(t, shared.Data().([]float64)[j], before[j])
				} else if gj < -1e-9 {
					require.Greater(t, shared.Data().([]float64)[j], before[j])
				}
			}
		} else {
			require.NoError(t, solver.Step(gorgonia.NodesToValueGrads(gorgonia.Nodes{w})))
		}
		vm.Close()
	}
	require.Less(t, losses[len(losses)-1], 0.2*losses[0], "losses %v", losses)
}

// TestConvGradientsFloat32 runs the gradient check on a float32 graph
// (float32 SymDiff/DoDiff paths), with float32 tolerances.
func TestConvGradientsFloat32(t *testing.T) {
	tm := testMaps(t, 15)[1]
	rng := rand.New(rand.NewPCG(15, 15))
	inputs := []*tensor.Dense{
		randDense(rng, tensor.Float32, tm.M.NIn, 2),
		randDense(rng, tensor.Float32, weightShape(tm.M, 2, 2)...),
		randDense(rng, tensor.Float32, 2),
	}
	rep, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
		y, err := ops.SparseConv3d(in[0], in[1], tm.M, ops.WithBias(in[2]), ops.WithAlgorithm(sparse.MaskedImplicitSplitK))
		if err != nil {
			return nil, err
		}
		return sumSquares(y)
	}, inputs)
	require.NoError(t, err, "%v", rep)
	for _, in := range rep.Inputs {
		require.True(t, in.Lisp.Ran && in.Tape.Ran)
	}
}

// TestConvEmpty: a batch with no voxels gives [0, Co] results (Gorgonia's
// own ops cannot take empty values, but ours can).
func TestConvEmpty(t *testing.T) {
	ext := grid.Extent{Batch: 1, X: 3, Y: 3, Z: 3}
	m, err := kmap.NewSubmanifold(nil, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	g := gorgonia.NewGraph()
	x := input(g, "x", tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(0, 2)))
	w := input(g, "w", randDense(rand.New(rand.NewPCG(1, 1)), tensor.Float32, 4, 3, 3, 3, 2))
	y, err := ops.SubMConv3d(x, w, m)
	require.NoError(t, err)
	p, err := ops.MaxPool3d(y, m)
	require.NoError(t, err)
	vm := gorgonia.NewTapeMachine(g)
	defer vm.Close()
	require.NoError(t, vm.RunAll())
	require.Equal(t, tensor.Shape{0, 4}, y.Value().Shape())
	require.Equal(t, tensor.Shape{0, 4}, p.Value().Shape())
}

// TestConvWithoutInputGrad: the weight gradient is unchanged, and no input
// gradient node is built.
func TestConvWithoutInputGrad(t *testing.T) {
	m := testMaps(t, 16)[0].M
	rng := rand.New(rand.NewPCG(16, 16))
	xv := randDense(rng, tensor.Float64, m.NIn, 2)
	wv := randDense(rng, tensor.Float64, weightShape(m, 2, 2)...)
	_, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
		y, err := ops.SubMConv3d(in[0], in[1], m, ops.WithoutInputGrad())
		if err != nil {
			return nil, err
		}
		return sumSquares(y)
	}, []*tensor.Dense{xv, wv}, grad.WithConstants(0))
	require.NoError(t, err)

	g := gorgonia.NewGraph()
	x, w := input(g, "x", xv), input(g, "w", wv)
	y, err := ops.SubMConv3d(x, w, m, ops.WithoutInputGrad())
	require.NoError(t, err)
	cost, err := sumSquares(y)
	require.NoError(t, err)
	_, err = gorgonia.Grad(cost, w)
	require.NoError(t, err)
	nOps := 0
	for _, n := range g.AllNodes() {
		if n.Op() != nil {
			nOps++
			require.NotContains(t, n.Op().String(), "ConvInputGrad")
		}
	}
	require.Greater(t, nOps, 3)
	_, err = gorgonia.Grad(cost, x)
	require.Error(t, err, "x is not differentiable with WithoutInputGrad")
}
