package ops

import (
	"fmt"
	"hash"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/chewxy/hm"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/flexgemm-go/flexgemm/sparse"
)

// VoxelNorm normalises every channel of the sparse features x over all
// voxels (rows) of the batch and applies a per-channel affine map:
//
//	mean[c] = Σ_i x[i, c] / N
//	var[c]  = Σ_i (x[i, c] − mean[c])² / N          (biased, as batch norm)
//	y[i, c] = gamma[c] · (x[i, c] − mean[c]) / √(var[c] + eps) + beta[c]
//
// Shapes: x [N, C], gamma [C], beta [C], result [N, C]; all float32 or all
// float64. The statistics always come from the current batch, in training
// and evaluation alike (there are no running averages), so a prediction
// depends on the other voxels of its batch. For the sparse UNet, whose
// batches hold several whole scenes, that is what one wants; it is also why
// N = 0 gives an empty result and zero gradients rather than NaN.
// eps must be positive and finite. The result is differentiable with
// respect to x, gamma and beta, symbolically (gorgonia.Grad) and in a
// LispMachine.
//
// With WithReLU the node computes max(0, y) as well: the same values, bit
// for bit, as VoxelNorm followed by ReLU, and the same gradients, in one
// op (on a device: one kernel forward and the same reductions backward as
// VoxelNorm alone, where the pair costs two more passes over [N, C]).
func VoxelNorm(x, gamma, beta *gorgonia.Node, eps float64, opts ...NormOption) (*gorgonia.Node, error) {
	names := []string{"x", "gamma", "beta"}
	if err := checkNodes("VoxelNorm", names, x, gamma, beta); err != nil {
		return nil, err
	}
	if _, err := checkFloatNodes("VoxelNorm", names, x, gamma, beta); err != nil {
		return nil, err
	}
	if !(eps > 0) || math.IsInf(eps, 0) {
		return nil, fmt.Errorf("%w: ops.VoxelNorm: eps %v must be positive and finite", ErrOption, eps)
	}
	op := voxelNormOp{eps: eps}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: ops.VoxelNorm: option %d is nil", ErrOption, i)
		}
		o(&op)
	}
	return gorgonia.ApplyOp(op, x, gamma, beta)
}

// NormOption configures a VoxelNorm node.
type NormOption func(*voxelNormOp)

// WithReLU fuses a ReLU into the normalisation: the node returns
// max(0, gamma·(x − mean)/√(var + eps) + beta), equal bit for bit to
// VoxelNorm followed by ReLU on the host. Its gradients are those of the
// pair; the ReLU mask is recomputed from x and the statistics with the
// forward's arithmetic, so no extra tensor is kept. On a device the mask
// is taken on the float32 value before it is rounded to the activation
// dtype: for float16/bfloat16 storage a positive value that rounds to
// zero still passes its gradient (the unfused pair would block it).
func WithReLU() NormOption {
	return func(op *voxelNormOp) { op.relu = true }
}

// normShapes checks x [N, C] and per-channel vectors [C] and returns N, C.
func normShapes(op string, x tensor.Shape, vecs ...tensor.Shape) (n, c int, err error) {
	if x.Dims() != 2 {
		return 0, 0, &sparse.ShapeError{Op: op, Arg: "x", Want: "[N, C]", Got: fmt.Sprint(x)}
	}
	n, c = x[0], x[1]
	for _, v := range vecs {
		if v.Dims() != 1 || v[0] != c {
			return 0, 0, &sparse.ShapeError{Op: op, Arg: "gamma/beta", Want: fmt.Sprintf("[%d]", c), Got: fmt.Sprint(v)}
		}
	}
	return n, c, nil
}

// voxelNormOp is the forward op of VoxelNorm: (x, gamma, beta) → y, or
// max(0, y) with relu.
type voxelNormOp struct {
	eps  float64
	relu bool
}

var (
	_ gorgonia.Op   = voxelNormOp{}
	_ gorgonia.SDOp = voxelNormOp{}
	_ gorgonia.ADOp = voxelNormOp{}
)

func (voxelNormOp) Arity() int { return 3 }

func (voxelNormOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	m := gorgonia.TensorType{Dims: 2, Of: a}
	v := gorgonia.TensorType{Dims: 1, Of: a}
	return hm.NewFnType(m, v, v, m)
}

func (op voxelNormOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	s, err := inputShapes("ops.VoxelNorm", 3, in)
	if err != nil {
		return nil, err
	}
	if _, _, err := normShapes("VoxelNorm", s[0], s[1], s[2]); err != nil {
		return nil, err
	}
	return s[0].Clone(), nil
}

func (op voxelNormOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	if err := checkArity("ops.VoxelNorm", 3, len(in)); err != nil {
		return nil, err
	}
	n, c, err := normShapes("VoxelNorm", in[0].Shape(), in[1].Shape(), in[2].Shape())
	if err != nil {
		return nil, err
	}
	if onDevice(in...) {
		return voxelNormDevice(op.eps, op.relu, in[0], in[1], in[2], n, c)
	}
	if n*c == 0 {
		// Empty tensors have no backing slice (Data would panic).
		return tensor.New(tensor.Of(in[0].Dtype()), tensor.WithShape(n, c)), nil
	}
	switch x := in[0].Data().(type) {
	case []float64:
		g, b, err := normData[float64](in[1], in[2])
		if err != nil {
			return nil, err
		}
		y := make([]float64, n*c)
		voxelNormForward(x, g, b, y, n, c, op.eps, op.relu)
		return normDense(y, n, c), nil
	case []float32:
		g, b, err := normData[float32](in[1], in[2])
		if err != nil {
			return nil, err
		}
		y := make([]float32, n*c)
		voxelNormForward(x, g, b, y, n, c, op.eps, op.relu)
		return normDense(y, n, c), nil
	}
	return nil, fmt.Errorf("%w: VoxelNorm: x holds %T", sparse.ErrDType, in[0].Data())
}

func (voxelNormOp) ReturnsPtr() bool     { return false }
func (voxelNormOp) CallsExtern() bool    { return false }
func (voxelNormOp) OverwritesInput() int { return -1 }
func (op voxelNormOp) WriteHash(h hash.Hash) {
	fmt.Fprint(h, op.String())
}
func (op voxelNormOp) Hashcode() uint32 { return hashOp(op) }
func (op voxelNormOp) String() string {
	if op.relu {
		return fmt.Sprintf("VoxelNormReLU{eps=%g}", op.eps)
	}
	return fmt.Sprintf("VoxelNorm{eps=%g}", op.eps)
}

func (voxelNormOp) DiffWRT(n int) []bool { return allTrue(n) }

// SymDiff returns the gradients of x, gamma and beta as three applications
// of voxelNormGradOp to (x, gamma, grad), or to (x, gamma, beta, grad)
// with relu (beta is needed for the mask).
func (op voxelNormOp) SymDiff(in gorgonia.Nodes, _, grad *gorgonia.Node) (gorgonia.Nodes, error) {
	if err := checkArity("ops.VoxelNorm", 3, len(in)); err != nil {
		return nil, err
	}
	args := gorgonia.Nodes{in[0], in[1], grad}
	if op.relu {
		args = gorgonia.Nodes{in[0], in[1], in[2], grad}
	}
	out := make(gorgonia.Nodes, 3)
	for w := range out {
		var err error
		if out[w], err = gorgonia.ApplyOp(voxelNormGradOp{eps: op.eps, wrt: w, relu: op.relu}, args...); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// DoDiff adds the gradients of x, gamma and beta to their dual values
// (LispMachine).
func (op voxelNormOp) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, output *gorgonia.Node) error {
	if err := checkArity("ops.VoxelNorm", 3, len(in)); err != nil {
		return err
	}
	dy, err := output.Grad()
	if err != nil {
		return err
	}
	var bv gorgonia.Value
	if op.relu {
		bv = in[2].Value()
	}
	grads, err := voxelNormGrads(op.eps, in[0].Value(), in[1].Value(), bv, dy, [3]bool{true, true, true})
	if err != nil {
		return err
	}
	for i, g := range grads {
		if err := normAddGrad(in[i], g); err != nil {
			return err
		}
	}
	return nil
}

// voxelNormGradOp computes one gradient of VoxelNorm from (x, gamma, dy),
// or of VoxelNorm with a fused ReLU from (x, gamma, beta, dy): wrt 0 → dx
// [N, C], 1 → dgamma [C], 2 → dbeta [C].
type voxelNormGradOp struct {
	eps  float64
	wrt  int
	relu bool
}

var _ gorgonia.Op = voxelNormGradOp{}

func (op voxelNormGradOp) Arity() int {
	if op.relu {
		return 4
	}
	return 3
}

func (op voxelNormGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	m := gorgonia.TensorType{Dims: 2, Of: a}
	v := gorgonia.TensorType{Dims: 1, Of: a}
	out := hm.Type(v)
	if op.wrt == 0 {
		out = m
	}
	if op.relu {
		return hm.NewFnType(m, v, v, m, out)
	}
	return hm.NewFnType(m, v, m, out)
}

// split returns x, gamma, beta (nil without relu) and dy of the inputs.
func (op voxelNormGradOp) split(in []gorgonia.Value) (x, g, b, dy gorgonia.Value) {
	if op.relu {
		return in[0], in[1], in[2], in[3]
	}
	return in[0], in[1], nil, in[2]
}

func (op voxelNormGradOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	s, err := inputShapes("ops.VoxelNormGrad", op.Arity(), in)
	if err != nil {
		return nil, err
	}
	vecs := []tensor.Shape{s[1]}
	if op.relu {
		vecs = append(vecs, s[2])
	}
	_, c, err := normShapes("VoxelNormGrad", s[0], vecs...)
	if err != nil {
		return nil, err
	}
	if dy := s[len(s)-1]; !dy.Eq(s[0]) {
		return nil, &sparse.ShapeError{Op: "VoxelNormGrad", Arg: "dy", Want: fmt.Sprint(s[0]), Got: fmt.Sprint(dy)}
	}
	if op.wrt == 0 {
		return s[0].Clone(), nil
	}
	return tensor.Shape{c}, nil
}

func (op voxelNormGradOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	if err := checkArity("ops.VoxelNormGrad", op.Arity(), len(in)); err != nil {
		return nil, err
	}
	if op.wrt < 0 || op.wrt > 2 {
		return nil, fmt.Errorf("%w: VoxelNorm gradient: input %d", sparse.ErrShape, op.wrt)
	}
	x, g, b, dy := op.split(in)
	if onDevice(in...) {
		return voxelNormGradDevice(op.eps, op.wrt, x, g, b, dy)
	}
	var want [3]bool
	want[op.wrt] = true
	grads, err := voxelNormGrads(op.eps, x, g, b, dy, want)
	if err != nil {
		return nil, err
	}
	return grads[op.wrt], nil
}

func (voxelNormGradOp) ReturnsPtr() bool     { return false }
func (voxelNormGradOp) CallsExtern() bool    { return false }
func (voxelNormGradOp) OverwritesInput() int { return -1 }
func (op voxelNormGradOp) WriteHash(h hash.Hash) {
	fmt.Fprint(h, op.String())
}
func (op voxelNormGradOp) Hashcode() uint32 { return hashOp(op) }

// String implements fmt.Stringer for voxelNormGradOp.
func (op voxelNormGradOp) String() string {
	if op.relu {
		return fmt.Sprintf("VoxelNormReLUGrad{eps=%g, wrt=%d}", op.eps, op.wrt)
	}
	return fmt.Sprintf("VoxelNormGrad{eps=%g, wrt=%d}", op.eps, op.wrt)
}

// voxelNormGrads returns those of dx, dgamma and dbeta that want asks
// for, as dense tensors (nil for the others). A non-nil bv (beta) makes
// them the gradients of VoxelNorm followed by ReLU.
func voxelNormGrads(eps float64, xv, gv, bv, dyv gorgonia.Value, want [3]bool) ([3]*tensor.Dense, error) {
	var out [3]*tensor.Dense
	vecs := []tensor.Shape{gv.Shape()}
	if bv != nil {
		vecs = append(vecs, bv.Shape())
	}
	n, c, err := normShapes("VoxelNormGrad", xv.Shape(), vecs...)
	if err != nil {
		return out, err
	}
	if !dyv.Shape().Eq(xv.Shape()) {
		return out, &sparse.ShapeError{Op: "VoxelNormGrad", Arg: "dy", Want: fmt.Sprint(xv.Shape()), Got: fmt.Sprint(dyv.Shape())}
	}
	if n*c == 0 {
		// Empty tensors have no backing slice (Data would panic); the
		// gradients of gamma and beta are sums over no rows, i.e. zero.
		dt := xv.Dtype()
		shapes := [3]tensor.Shape{{n, c}, {c}, {c}}
		for i, w := range want {
			if w {
				out[i] = tensor.New(tensor.Of(dt), tensor.WithShape(shapes[i]...))
			}
		}
		return out, nil
	}
	switch x := xv.Data().(type) {
	case []float64:
		return voxelNormGradsOf(x, gv, bv, dyv, n, c, eps, want)
	case []float32:
		return voxelNormGradsOf(x, gv, bv, dyv, n, c, eps, want)
	}
	return out, fmt.Errorf("%w: VoxelNormGrad: x holds %T", sparse.ErrDType, xv.Data())
}

func voxelNormGradsOf[T float32 | float64](x []T, gv, bv, dyv gorgonia.Value, n, c int, eps float64, want [3]bool) ([3]*tensor.Dense, error) {
	var out [3]*tensor.Dense
	g, dy, err := normData[T](gv, dyv)
	if err != nil {
		return out, err
	}
	var beta []T
	if bv != nil {
		if beta, _, err = normData[T](bv, bv); err != nil {
			return out, err
		}
	}
	var dx, dg, db []T
	if want[0] {
		dx = make([]T, n*c)
	}
	if want[1] {
		dg = make([]T, c)
	}
	if want[2] {
		db = make([]T, c)
	}
	voxelNormBackward(x, g, beta, dy, dx, dg, db, n, c, eps)
	if want[0] {
		out[0] = normDense(dx, n, c)
	}
	if want[1] {
		out[1] = normVec(dg)
	}
	if want[2] {
		out[2] = normVec(db)
	}
	return out, nil
}

// normData returns the backing slices of two values of element type T.
func normData[T float32 | float64](a, b gorgonia.Value) ([]T, []T, error) {
	da, ok1 := a.Data().([]T)
	db, ok2 := b.Data().([]T)
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("%w: mixed dtypes %v and %v", sparse.ErrDType, a.Dtype(), b.Dtype())
	}
	return da, db, nil
}

// normDense wraps the non-empty y as an [n, c] tensor.
func normDense[T float32 | float64](y []T, n, c int) *tensor.Dense {
	return tensor.New(tensor.WithShape(n, c), tensor.WithBacking(y))
}

// normVec wraps the non-empty v as a vector.
func normVec[T float32 | float64](v []T) *tensor.Dense {
	return tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(v))
}

// normChunkRows is the number of rows per parallel chunk. It is a constant,
// not derived from GOMAXPROCS, and per-chunk partial sums are added in
// chunk order, so every result is bit-identical for any number of threads.
const normChunkRows = 1024

// normChunks calls f(k, lo, hi) for every chunk k of rows [lo, hi) of n
// rows, on up to GOMAXPROCS goroutines, and returns the number of chunks.
func normChunks(n int, f func(k, lo, hi int)) int {
	chunks := (n + normChunkRows - 1) / normChunkRows
	workers := min(runtime.GOMAXPROCS(0), chunks)
	body := func(k int) { f(k, k*normChunkRows, min(n, (k+1)*normChunkRows)) }
	if workers <= 1 {
		for k := range chunks {
			body(k)
		}
		return chunks
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := int(next.Add(1) - 1); k < chunks; k = int(next.Add(1) - 1) {
				body(k)
			}
		}()
	}
	wg.Wait()
	return chunks
}

// normColumnSums returns Σ_rows row(i)[j] for every column j, where
// row(i, acc) adds row i's contribution to acc; partial sums are float64
// and combined in chunk order.
func normColumnSums(n, width int, row func(i int, acc []float64)) []float64 {
	chunks := (n + normChunkRows - 1) / normChunkRows
	part := make([]float64, chunks*width)
	normChunks(n, func(k, lo, hi int) {
		acc := part[k*width : (k+1)*width]
		for i := lo; i < hi; i++ {
			row(i, acc)
		}
	})
	sum := make([]float64, width)
	for k := range chunks {
		for j, v := range part[k*width : (k+1)*width] {
			sum[j] += v
		}
	}
	return sum
}

// voxelNormStats returns the per-channel mean and 1/√(var + eps) (two
// passes, float64 accumulation).
func voxelNormStats[T float32 | float64](x []T, n, c int, eps float64) (mean, inv []float64) {
	if n == 0 {
		inv = make([]float64, c)
		for j := range inv {
			inv[j] = 1 / math.Sqrt(eps)
		}
		return make([]float64, c), inv
	}
	mean = normColumnSums(n, c, func(i int, acc []float64) {
		for j, v := range x[i*c : i*c+c] {
			acc[j] += float64(v)
		}
	})
	for j := range mean {
		mean[j] /= float64(n)
	}
	inv = normColumnSums(n, c, func(i int, acc []float64) {
		for j, v := range x[i*c : i*c+c] {
			d := float64(v) - mean[j]
			acc[j] += d * d
		}
	})
	for j := range inv {
		inv[j] = 1 / math.Sqrt(inv[j]/float64(n)+eps)
	}
	return mean, inv
}

// voxelNormAffine returns the per-channel scale gamma·inv and shift
// beta − mean·scale of the forward map y = x·scale + shift.
func voxelNormAffine[T float32 | float64](gamma, beta []T, mean, inv []float64) (scale, shift []float64) {
	c := len(mean)
	scale = make([]float64, c)
	shift = make([]float64, c)
	for j := range c {
		scale[j] = float64(gamma[j]) * inv[j]
		shift[j] = float64(beta[j]) - float64(mean[j]*scale[j])
	}
	return scale, shift
}

// voxelNormY is the forward value of one element, rounded to T. The
// explicit conversion keeps the product rounded (no fused multiply-add),
// so the forward and the ReLU mask of the backward agree bit for bit.
func voxelNormY[T float32 | float64](v T, scale, shift float64) T {
	return T(float64(float64(v)*scale) + shift)
}

// voxelNormForward sets y = VoxelNorm(x), or max(0, VoxelNorm(x)) with
// relu (the ReLU of the rounded value, as ops.ReLU would see it).
func voxelNormForward[T float32 | float64](x, gamma, beta, y []T, n, c int, eps float64, relu bool) {
	mean, inv := voxelNormStats(x, n, c, eps)
	scale, shift := voxelNormAffine(gamma, beta, mean, inv)
	normChunks(n, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			xr, yr := x[i*c:i*c+c], y[i*c:i*c+c]
			for j, v := range xr {
				t := voxelNormY(v, scale[j], shift[j])
				if relu && !(t > 0) {
					t = 0
				}
				yr[j] = t
			}
		}
	})
}

// voxelNormBackward computes, with x̂ = (x − mean)·inv,
//
//	dbeta[c]  = Σ_i dy[i, c]
//	dgamma[c] = Σ_i dy[i, c] · x̂[i, c]
//	dx[i, c]  = gamma[c] · inv[c] · (dy[i, c] − (dbeta[c] + x̂[i, c]·dgamma[c]) / N)
//
// A nil dx, dgamma or dbeta is not computed; the statistics are only
// computed when dx or dgamma is wanted (or for the mask).
//
// A non-nil beta fuses a ReLU after the normalisation: dy is replaced by
// dy·[y > 0] with y the forward's value (voxelNormY, the same bits), which
// is exactly what ReLU's gradient would hand to VoxelNorm's.
func voxelNormBackward[T float32 | float64](x, gamma, beta, dy, dx, dgamma, dbeta []T, n, c int, eps float64) {
	if beta == nil && dx == nil && dgamma == nil {
		sb := normColumnSums(n, c, func(i int, acc []float64) {
			for j, d := range dy[i*c : i*c+c] {
				acc[j] += float64(d)
			}
		})
		for j := range c {
			dbeta[j] = T(sb[j])
		}
		return
	}
	mean, inv := voxelNormStats(x, n, c, eps)
	var scale, shift []float64
	if beta != nil {
		scale, shift = voxelNormAffine(gamma, beta, mean, inv)
	}
	relu := beta != nil
	// One pass for both sums: columns [0, c) hold Σdy, [c, 2c) Σdy·x̂.
	sums := normColumnSums(n, 2*c, func(i int, acc []float64) {
		xr, dr := x[i*c:i*c+c], dy[i*c:i*c+c]
		for j := range c {
			d := float64(dr[j])
			if relu && !(voxelNormY(xr[j], scale[j], shift[j]) > 0) {
				d = 0
			}
			acc[j] += d
			acc[c+j] += d * (float64(xr[j]) - mean[j]) * inv[j]
		}
	})
	sb, sg := sums[:c], sums[c:]
	for j := range c {
		if dgamma != nil {
			dgamma[j] = T(sg[j])
		}
		if dbeta != nil {
			dbeta[j] = T(sb[j])
		}
	}
	if dx == nil || n == 0 {
		return
	}
	fn := float64(n)
	normChunks(n, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			xr, dr, gr := x[i*c:i*c+c], dy[i*c:i*c+c], dx[i*c:i*c+c]
			for j := range c {
				d := float64(dr[j])
				if relu && !(voxelNormY(xr[j], scale[j], shift[j]) > 0) {
					d = 0
				}
				xh := (float64(xr[j]) - mean[j]) * inv[j]
				gr[j] = T(float64(gamma[j]) * inv[j] * (d - (sb[j]+xh*sg[j])/fn))
			}
		}
	})
}

// normAddGrad adds g to the gradient held by node n's dual value, in place.
func normAddGrad(n *gorgonia.Node, g gorgonia.Value) error {
	cur, err := n.Grad()
	if err != nil {
		return fmt.Errorf("ops: no gradient slot for %s: %w", n.Name(), err)
	}
	if cur.Shape().TotalSize() == 0 && g.Shape().TotalSize() == 0 {
		return nil
	}
	ct, ok := cur.(tensor.Tensor)
	if !ok {
		return fmt.Errorf("%w: gradient of %s is %T, not a tensor", sparse.ErrDType, n.Name(), cur)
	}
	gt, ok := g.(tensor.Tensor)
	if !ok {
		return fmt.Errorf("%w: gradient for %s is %T, not a tensor", sparse.ErrDType, n.Name(), g)
	}
	_, err = tensor.Add(ct, gt, tensor.UseUnsafe())
	return err
}
