// Package device lets Gorgonia graphs built from the ops of package ops
// train with their tensors resident on an accelerator: features, weights,
// gradients and optimiser state stay in device memory for the whole
// training step, and only the batch's inputs, the loss and metrics cross
// between host and device.
//
// # Pieces
//
//   - Memory and NN are the framework-free backend contract (memory,
//     convolutions; element-wise, normalisation, loss and optimiser
//     kernels) over sparse.Matrix. *cudaext.Engine and cudaext.NN
//     implement it (build tag cudaext, OpenCUDA); Fake implements it on
//     the CPU for tests (OpenFake).
//   - Device wraps a backend for Gorgonia. A device tensor is an ordinary
//     *tensor.Dense (float32-typed) whose memory pointer is a handle into
//     an address range reserved with no access rights: the registry maps
//     the handle to the backend's storage, and any host code that reads
//     the tensor's data faults at once (Linux) instead of reading garbage.
//   - The ops of packages ops and grad take their device path when their
//     inputs are device tensors; Engine (Device.VMOpt) serves the few
//     gorgonia.org/tensor calls Gorgonia's VM makes itself (the Add that
//     gorgonia.Grad inserts for nodes with several consumers, clones).
//   - Step owns the temporaries of one training step; Adam and LossScaler
//     update parameters on the device; Transfers counts every byte copied.
//
// # Training loop
//
// The same code trains on the host (Host()) or a device:
//
//	d, err := device.OpenCUDA(0, device.WithActivations(sparse.BFloat16))
//	params := ... // d.ToDevice(hostParam) for each, once
//	opt := device.NewAdam(1e-3)
//	for _, b := range batches {
//		st, _ := d.BeginStep()
//		x, _ := d.Input(b.Features)          // counted as Inputs
//		g, learnables, logits, loss := build(params, x, b) // ops.SubMConv3d, ops.VoxelNorm,
//		                                     // ops.ReLU, ops.ConcatChannels, ops.SoftmaxCrossEntropy
//		grads, _ := gorgonia.Grad(loss, learnables...)
//		vm := gorgonia.NewTapeMachine(g, d.VMOpt())
//		_ = vm.RunAll()                      // loss value: 4 bytes back
//		_ = opt.Step(params, values(grads), 1)
//		vm.Close()
//		_ = st.End()                         // frees the step's device memory
//	}
//
// # Mixed precision
//
// WithActivations(Float16 or BFloat16) stores activations and their
// gradients in the narrow dtype, so convolutions run on tensor cores in
// that dtype; parameters, parameter gradients, normalisation statistics
// and Adam's moments stay float32 (the convolution ops cast a weight to
// the activation dtype for each use and return float32 weight
// gradients). The graph itself stays a float32 graph: only the storage
// differs. With Float16, scale the loss gradient (ops.WithLossScale) and
// let LossScaler unscale, skip overflowing steps and adapt the scale.
//
// Device graphs must use the ops of package ops for element-wise work:
// gorgonia.Rectify and gorgonia.Concat read tensor data on the host (their
// gradients slice tensor views), so use ops.ReLU and ops.ConcatChannels.
// docs/GPU_TRAINING.md explains the design.
package device
