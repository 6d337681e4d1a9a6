package device

import "github.com/flexgemm-go/flexgemm/sparse"

// Memory is the memory and convolution half of a device backend. Its
// method set is a subset of *cudaext.Engine's, so the CUDA engine
// satisfies it as is; Fake implements it on the CPU. Every matrix it
// returns holds a sparse.Storage owned by the backend; element types are
// sparse.Float32, Float16, BFloat16 and Int32.
type Memory interface {
	// Engine computes convolutions on the backend's matrices; the Device
	// registers a timing proxy for it with package sparse.
	sparse.Engine
	// Alloc returns an uninitialised [rows, cols] matrix of dtype dt.
	Alloc(dt sparse.DType, rows, cols int) (sparse.Matrix, error)
	// Free releases the storage of device matrices (others are ignored).
	Free(ms ...sparse.Matrix)
	// ToDeviceAs copies a host matrix ([]float32, []float64 or []int32)
	// to the device as dtype dt, rounding to nearest even.
	ToDeviceAs(host sparse.Matrix, dt sparse.DType) (sparse.Matrix, error)
	// ToHost copies a device matrix to the host: float dtypes become
	// []float32 (exactly), Int32 []int32.
	ToHost(m sparse.Matrix) (sparse.Matrix, error)
	// Fill sets every element of a float matrix to v (rounded).
	Fill(m sparse.Matrix, v float32) error
	// Synchronize waits for queued device work and reports asynchronous
	// faults.
	Synchronize() error
}

// NN is the non-convolution half of a device backend: the element-wise,
// normalisation, loss and optimiser kernels a sparse UNet needs. It uses
// only types of package sparse and Go's, so a backend such as cudaext
// implements it without knowing this package. Matrices are device
// matrices of the backend; "float" means Float32, Float16 or BFloat16,
// and operands of one call may mix them (arithmetic is float32 or wider,
// results are rounded to the destination's dtype). Destinations are
// allocated by the caller and may alias an input only where stated.
type NN interface {
	// Copy copies src into dst element by element (same number of
	// elements), converting between float dtypes; Int32 copies to Int32.
	Copy(dst, src sparse.Matrix) error
	// CopyCols sets dst[r, dstCol+j] = src[r, srcCol+j] for j < cols and
	// every row r (dst and src have the same number of rows).
	CopyCols(dst sparse.Matrix, dstCol int, src sparse.Matrix, srcCol, cols int) error
	// Add sets dst = a + b element-wise; dst may be a or b.
	Add(dst, a, b sparse.Matrix) error
	// ReLU sets dst = x > 0 ? x : 0; dst may be x.
	ReLU(dst, x sparse.Matrix) error
	// ReLUGrad sets dx = x > 0 ? dy : 0; dx may be dy.
	ReLUGrad(dx, x, dy sparse.Matrix) error
	// NormStats computes, for x [N, C], the per-channel mean and
	// inv = 1/√(var + eps) (biased variance) into the Float32 [1, C]
	// matrices mean and inv, accumulating in float64 in a fixed order.
	// N = 0 gives mean 0 and inv 1/√eps.
	NormStats(mean, inv, x sparse.Matrix, eps float64) error
	// NormForward sets y = (x − mean)·inv·gamma + beta per channel; gamma,
	// beta, mean, inv are [1, C].
	NormForward(y, x, gamma, beta, mean, inv sparse.Matrix) error
	// NormBackward computes the VoxelNorm gradients from x, gamma, dy and
	// the statistics: dbeta = Σ_rows dy, dgamma = Σ_rows dy·x̂ (Float32
	// [1, C]) and, unless dx is the zero Matrix,
	// dx = gamma·inv·(dy − (dbeta + x̂·dgamma)/N), with x̂ = (x − mean)·inv.
	NormBackward(dx, dgamma, dbeta, x, gamma, dy, mean, inv sparse.Matrix) error
	// NormForwardReLU is NormForward followed by a ReLU in the same pass:
	// y = max(0, v) with v = x·sc + sh, sc = gamma·inv, sh = beta − mean·sc
	// (float32, each product and sum rounded, no fused multiply-add), then
	// rounded to y's dtype; NaN gives 0.
	NormForwardReLU(y, x, gamma, beta, mean, inv sparse.Matrix) error
	// NormBackwardReLU is NormBackward of VoxelNorm followed by ReLU: dy is
	// replaced by dy·[v > 0] with v recomputed from x, gamma, beta and the
	// statistics exactly as NormForwardReLU computes it (before rounding to
	// the activation dtype), in the sums and in dx alike.
	NormBackwardReLU(dx, dgamma, dbeta, x, gamma, beta, dy, mean, inv sparse.Matrix) error
	// XentForward sets the Float32 [1, 1] loss to
	// scale · Σ_i w[l_i]·(log Σ_k exp(z[i, k]) − z[i, l_i]) over the rows i
	// of logits z [N, K] whose label l_i (Int32 [N, 1]) is in [0, K) (−1
	// marks an ignored row; callers validate labels, other values are
	// ignored too); w is the Float32 [1, K] class weights, or 1 when
	// weights is the zero Matrix. The sum is taken in float64 in a fixed
	// order.
	XentForward(loss, logits, labels, weights sparse.Matrix, scale float32) error
	// XentBackward sets dz[i, k] = scale·w[l_i]·(softmax(z[i])[k] − [k =
	// l_i]) for counted rows and 0 for the others.
	XentBackward(dz, logits, labels, weights sparse.Matrix, scale float32) error
	// AdamStep updates one parameter in place, element-wise:
	//
	//	g' = g·gradScale + l2·w
	//	m  = beta1·m + (1 − beta1)·g'
	//	v  = beta2·v + (1 − beta2)·g'²
	//	w  = w − lr·(m·corr1) / (√(v·corr2) + eps)
	//
	// with corr1 = 1/(1 − beta1^t), corr2 = 1/(1 − beta2^t) given by the
	// caller. w, m, v are Float32; g is any float dtype.
	AdamStep(w, g, m, v sparse.Matrix, lr, beta1, beta2, eps, corr1, corr2, gradScale, l2 float32) error
	// AdamSteps is AdamStep on several parameters at once (ws[i], gs[i],
	// ms[i], vs[i] as for AdamStep; the four slices have one length),
	// with the same arithmetic per element, in one launch: the optimiser
	// step of a whole network costs one kernel instead of one per
	// parameter. No parameter may alias another's w, m or v.
	AdamSteps(ws, gs, ms, vs []sparse.Matrix, lr, beta1, beta2, eps, corr1, corr2, gradScale, l2 float32) error
	// NonFinite sets the Float32 [1, 1] flag to 1 if any element of ms is
	// infinite or NaN, and leaves it unchanged otherwise.
	NonFinite(flag sparse.Matrix, ms ...sparse.Matrix) error
	// ArgmaxRows sets dst[i] (Int32 [N, 1]) to the column of the largest
	// element of row i of x [N, K] (the first one on ties; 0 for K = 0).
	ArgmaxRows(dst, x sparse.Matrix) error
}
