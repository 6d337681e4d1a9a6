package grad_test

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"math/rand/v2"
	"testing"

	"github.com/chewxy/hm"
	"github.com/flexgemm-go/flexgemm/grad"
	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// scaleOp is y = k·x with deliberately configurable gradient factors, to
// see the checker catch a wrong SymDiff or a wrong DoDiff.
type scaleOp struct{ k, sym, ad float64 }

func (op scaleOp) Arity() int { return 1 }
func (op scaleOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(gorgonia.TensorType{Dims: 1, Of: a}, gorgonia.TensorType{Dims: 1, Of: a})
}
func (op scaleOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op scaleOp) scaled(v gorgonia.Value, k float64) *tensor.Dense {
	src := v.Data().([]float64)
	out := make([]float64, len(src))
	for i, x := range src {
		out[i] = k * x
	}
	return tensor.New(tensor.WithShape(len(out)), tensor.WithBacking(out))
}
func (op scaleOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	return op.scaled(vs[0], op.k), nil
}
func (op scaleOp) ReturnsPtr() bool      { return false }
func (op scaleOp) CallsExtern() bool     { return false }
func (op scaleOp) OverwritesInput() int  { return -1 }
func (op scaleOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op scaleOp) Hashcode() uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}
func (op scaleOp) String() string       { return fmt.Sprintf("scale{%g %g %g}", op.k, op.sym, op.ad) }
func (op scaleOp) DiffWRT(n int) []bool { return []bool{true} }
func (op scaleOp) SymDiff(in gorgonia.Nodes, _, g *gorgonia.Node) (gorgonia.Nodes, error) {
	d, err := gorgonia.ApplyOp(scaleOp{k: op.sym, sym: op.sym, ad: op.ad}, g)
	return gorgonia.Nodes{d}, err
}
func (op scaleOp) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, out *gorgonia.Node) error {
	gv, _ := out.Grad()
	xg, _ := in[0].Grad()
	dst := xg.Data().([]float64)
	for i, v := range gv.Data().([]float64) {
		dst[i] += op.ad * v
	}
	return nil
}

func scaleCost(op scaleOp) grad.BuildFunc {
	return func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
		y, err := gorgonia.ApplyOp(op, in[0])
		if err != nil {
			return nil, err
		}
		return sumSquares(y)
	}
}

func TestCheckCatchesWrongGradients(t *testing.T) {
	x := tensor.New(tensor.WithShape(4), tensor.WithBacking([]float64{1, -2, 0.5, 3}))
	cases := []struct {
		name       string
		op         scaleOp
		tape, lisp bool
	}{
		{"correct", scaleOp{k: 2, sym: 2, ad: 2}, true, true},
		{"wrong SymDiff", scaleOp{k: 2, sym: 3, ad: 2}, false, true},
		{"wrong DoDiff", scaleOp{k: 2, sym: 2, ad: -2}, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, err := grad.Check(scaleCost(c.op), []*tensor.Dense{x})
			require.NotNil(t, rep)
			in := rep.Inputs[0]
			require.Equal(t, c.tape, in.Tape.Pass, rep.String())
			require.Equal(t, c.lisp, in.Lisp.Pass, rep.String())
			// d/dx Σ (k x)² / 2 = k² x.
			for j, v := range x.Data().([]float64) {
				require.InDelta(t, 4*v, in.Numeric[j], 1e-6)
			}
			if c.tape && c.lisp {
				require.NoError(t, err)
				require.True(t, rep.OK())
				require.Less(t, in.Tape.MaxAbsErr, 1e-6)
				return
			}
			require.ErrorIs(t, err, grad.ErrMismatch)
			require.False(t, rep.OK())
			require.Contains(t, err.Error(), "FAIL")
			// The worst element is the one with the largest |x|.
			bad := in.Tape
			if c.tape {
				bad = in.Lisp
			}
			require.Equal(t, 3, bad.Worst)
			require.Greater(t, bad.MaxAbsErr, 1.0)
			require.Greater(t, bad.MaxRelErr, 0.1)
		})
	}
}

func TestCheckBuiltinOpsAndOptions(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	a := randDense(rng, tensor.Float64, 3, 4)
	b := randDense(rng, tensor.Float64, 4, 2)
	aCopy := a.Clone().(*tensor.Dense)
	build := func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
		p, err := gorgonia.Mul(in[0], in[1])
		if err != nil {
			return nil, err
		}
		th, err := gorgonia.Tanh(p)
		if err != nil {
			return nil, err
		}
		return gorgonia.Sum(th)
	}
	rep, err := grad.Check(build, []*tensor.Dense{a, b})
	require.NoError(t, err)
	require.Len(t, rep.Inputs, 2)
	for _, in := range rep.Inputs {
		require.True(t, in.Tape.Ran)
		require.True(t, in.Lisp.Ran)
		require.Less(t, in.Tape.MaxAbsErr, 1e-7)
		require.Less(t, in.Lisp.MaxAbsErr, 1e-7)
	}
	require.Equal(t, aCopy.Data(), a.Data(), "Check must not modify its inputs")
	require.Equal(t, 1e-6, rep.Step)
	require.Equal(t, 1e-5, rep.ATol)
	require.Equal(t, 1e-3, rep.RTol)

	rep, err = grad.Check(build, []*tensor.Dense{a, b}, grad.WithConstants(1), grad.WithoutLispMachine(),
		grad.WithStep(1e-5), grad.WithTolerance(1e-6, 1e-4))
	require.NoError(t, err)
	require.False(t, rep.Inputs[0].Constant)
	require.True(t, rep.Inputs[1].Constant)
	require.False(t, rep.Inputs[1].Tape.Ran)
	require.True(t, rep.Inputs[0].Tape.Ran)
	require.False(t, rep.Inputs[0].Lisp.Ran)
	require.Equal(t, 1e-5, rep.Step)
	require.Contains(t, rep.String(), "input 1 (4, 2): constant")

	// float32 inputs use float32 defaults and still pass.
	a32 := randDense(rng, tensor.Float32, 3, 4)
	b32 := randDense(rng, tensor.Float32, 4, 2)
	rep, err = grad.Check(build, []*tensor.Dense{a32, b32})
	require.NoError(t, err, "%v", rep)
	require.Equal(t, 1e-3, rep.Step)
}

func TestCheckErrors(t *testing.T) {
	x := tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{1, 2}))
	sum := func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) { return gorgonia.Sum(in[0]) }
	ident := func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) { return in[0], nil }
	fail := func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) { return nil, errors.New("boom") }
	cases := []struct {
		name   string
		build  grad.BuildFunc
		inputs []*tensor.Dense
		opts   []grad.CheckOption
		text   string
	}{
		{"nil build", nil, []*tensor.Dense{x}, nil, "nil build"},
		{"no inputs", sum, nil, nil, "no inputs"},
		{"nil input", sum, []*tensor.Dense{nil}, nil, "input 0 is nil"},
		{"scalar input", sum, []*tensor.Dense{tensor.New(tensor.FromScalar(1.0))}, nil, "scalar"},
		{"vector cost", ident, []*tensor.Dense{x}, nil, "cost must be a float scalar"},
		{"build error", fail, []*tensor.Dense{x}, nil, "boom"},
		{"bad step", sum, []*tensor.Dense{x}, []grad.CheckOption{grad.WithStep(0)}, "step 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := grad.Check(c.build, c.inputs, c.opts...)
			require.ErrorIs(t, err, grad.ErrCheck)
			require.Contains(t, err.Error(), c.text)
		})
	}
	// An int32 input is a constant.
	idx := tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, 1}))
	rep, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
		return gorgonia.Sum(in[0])
	}, []*tensor.Dense{x, idx}, grad.WithoutLispMachine())
	require.NoError(t, err)
	require.True(t, rep.Inputs[1].Constant)
}
