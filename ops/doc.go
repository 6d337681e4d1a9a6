// Package ops makes the sparse 3D primitives of package sparse native
// Gorgonia operations: sparse convolutions of every kind, max and average
// pooling, grid sampling and space-filling-curve serialisation, each as a
// node-level function in Gorgonia's style returning (*gorgonia.Node,
// error). Every float op is differentiable both symbolically
// (gorgonia.Grad with a TapeMachine, through the backward ops of package
// grad) and automatically (ADOp.DoDiff in a LispMachine), in float32 and
// float64 graphs.
//
// # Operations
//
//	Conv3d(x, w, m, opts...)            any kernel-map kind
//	SubMConv3d / SparseConv3d / InverseConv3d / TransposedConv3d
//	                                    the same, checking m.Kind
//	MaxPool3d(x, m), AvgPool3d(x, m)    pooling over a map (normally strided)
//	GridSample3d(feats, points, coords, ext, mode)
//	                                    trilinear/nearest sampling, gradients
//	                                    for feats and points
//	Serialize(coords, ext, mode)        [N, 4] Int32 → [N] Int64 codes
//	Deserialize(codes, ext, mode)       and back (not differentiable)
//	VoxelNorm(x, gamma, beta, eps)      per-channel normalisation over voxels
//	ReLU(x), ConcatChannels(xs...)      activation and skip concatenation
//	SoftmaxCrossEntropy(logits, labels) mean loss (WithClassWeights,
//	                                    WithLossScale for float16 training)
//
// # Device tensors
//
// The float ops also run on device tensors (package ops/device): when
// their inputs live on a GPU (or the CPU emulation used in tests) they
// launch the device's kernels and their results stay on the device, so a
// whole training step runs without host copies (serialisation works on
// host coordinates only). Use ReLU and ConcatChannels rather than
// gorgonia.Rectify and gorgonia.Concat in such graphs: the built-ins read
// tensor data on the host.
//
// Shapes follow package sparse: features x [m.NIn, Ci], weights
// w [Co, Kx, Ky, Kz, Ci] with (Kx, Ky, Kz) = m.Conv.Kernel, optional bias
// [Co] (WithBias), result [m.NOut, Co]. The algorithm (WithAlgorithm),
// split-K (WithSplitK) and tile size (WithTileRows) are chosen per node;
// WithoutInputGrad skips the input gradient of a first layer.
// Wrong dtypes, ranks and shapes are reported when the node is built, as
// errors wrapping sparse.ErrDType or sparse.ErrShape; a map of the wrong
// kind wraps ErrMapKind.
//
// # One graph per batch
//
// Gorgonia shapes are static, while every batch of a sparse network has its
// own coordinates and kernel maps. The pattern is therefore: compute the
// coordinates and kernel maps eagerly, outside the graph; build a graph for
// this batch whose ops carry their maps (so every shape is known); keep
// the weights as shared *tensor.Dense values that each step's graph binds
// with gorgonia.WithValue; and let the solver update them in place, listing
// the learnables in the same order every step (solvers key their state by
// position):
//
//	w := tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(16, 3, 3, 3, 4)) // shared, initialise it
//	solver := gorgonia.NewAdamSolver(gorgonia.WithLearnRate(1e-3))
//	for _, b := range batches {
//		m, err := kmap.NewSubmanifold(b.Coords, b.Extent, [3]int{3, 3, 3}, [3]int{1, 1, 1})
//		if err != nil { ... }
//		g := gorgonia.NewGraph()
//		x := gorgonia.NewMatrix(g, gorgonia.Float32, gorgonia.WithShape(m.NIn, 4),
//			gorgonia.WithValue(b.Feats), gorgonia.WithName("x"))
//		wn := gorgonia.NewTensor(g, gorgonia.Float32, 5, gorgonia.WithShape(w.Shape()...),
//			gorgonia.WithValue(w), gorgonia.WithName("w"))
//		y, err := ops.SubMConv3d(x, wn, m, ops.WithAlgorithm(sparse.MaskedImplicit))
//		if err != nil { ... }
//		loss := ... // a scalar built from y
//		learnables := gorgonia.Nodes{wn} // same order every step
//		if _, err := gorgonia.Grad(loss, learnables...); err != nil { ... }
//		vm := gorgonia.NewTapeMachine(g, gorgonia.BindDualValues(learnables...))
//		if err := vm.RunAll(); err != nil { ... }
//		if err := solver.Step(gorgonia.NodesToValueGrads(learnables)); err != nil { ... }
//		vm.Close()
//	}
//
// The package example shows it running. A kernel map may be shared by
// several layers of one graph (all submanifold convolutions at one
// resolution); its derived tables are built once.
//
// # Gorgonia notes
//
//   - Node identity: Gorgonia merges nodes whose ops hash equally on the same
//     inputs. Every op here hashes all its parameters, including a
//     process-unique identifier of its kernel map, so two convolutions that
//     differ in any way (another map, algorithm, split-K, tile size, bias)
//     are never merged; identical ones are, which is correct.
//   - LispMachine: create a new machine per run (Reset only re-runs the last
//     node); with ExecuteFwdOnly and gorgonia.Grad, read gradients with
//     n.Deriv().Value() rather than n.Grad().
//   - Gorgonia's VM wraps errors from Do in a type without Unwrap, so a
//     run-time error can be matched by text but not with errors.Is.
//   - Values with zero elements: the ops of this package accept them (a
//     batch with no active voxels gives [0, C] results), but gorgonia.org/
//     tensor's Data and Gorgonia's built-in ops (Sum, Mul, …) panic on
//     them, so skip empty batches rather than feed them to a training
//     graph.
//
// Use package grad's Check to compare the gradients of any graph built
// from these ops with finite differences.
package ops
