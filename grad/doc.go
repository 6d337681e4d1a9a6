// Package grad holds the backward operations of the sparse Gorgonia ops of
// package ops, as Gorgonia ops themselves, and a finite-difference
// gradient checker for any Gorgonia graph.
//
// # Backward ops
//
// Package ops builds these nodes in its SymDiff methods, so users rarely
// call them directly; they are exported for custom ops and for
// second-order uses (gradient penalties). Each runs the matching function
// of package sparse on the node values:
//
//	ConvInputGrad(dy, w, m, opt)    dx [m.NIn, Ci]      sparse.ConvInputGrad
//	ConvWeightGrad(x, dy, m, opt)   dw [Co, K…, Ci]     sparse.ConvWeightGrad
//	BiasGrad(dy)                    db [Co]             sparse.BiasGrad
//	MaxPoolGrad(x, dy, m)           dx [m.NIn, C]       sparse.PoolGrad (argmax recomputed from x)
//	AvgPoolGrad(dy, m)              dx [m.NIn, C]       sparse.PoolGrad
//	GridSampleFeatGrad(points, dy, s)         dFeats   sparse.GridSampleGrad
//	GridSamplePointGrad(feats, points, dy, s) dPoints  sparse.GridSampleGrad
//
// The convolution and pooling backward ops are differentiable again, both
// symbolically and in a LispMachine: with a bias-free convolution, a row
// broadcast, an average pool and an argmax gather (internal ops that only
// appear in gradient graphs) they form a set closed under differentiation,
// so gradients of any order work. The grid-sample backward ops are not
// differentiable; differentiating through them fails with an error
// wrapping ErrNotDifferentiable rather than dropping terms.
//
// A SampleGrid (NewSampleGrid) is the voxel grid of a grid sample. It
// caches the sampling plan of the last query points it saw, so the forward
// and backward nodes of one grid sample build the plan once per step.
//
// # Gradient checking
//
// Check is the counterpart of torch.autograd.gradcheck: it builds a
// function on fresh graphs and compares the gradients that gorgonia.Grad
// with a TapeMachine and a LispMachine compute with float64 central finite
// differences, reporting the largest absolute and relative error of every
// input and machine:
//
//	rep, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
//		y, err := ops.SubMConv3d(in[0], in[1], m, ops.WithBias(in[2]))
//		if err != nil {
//			return nil, err
//		}
//		return gorgonia.Sum(gorgonia.Must(gorgonia.Square(y)))
//	}, []*tensor.Dense{x, w, b})
//
// err wraps ErrMismatch when a gradient is out of tolerance and ErrCheck
// when the check could not run; rep.String() gives one line per input and
// machine.
package grad
