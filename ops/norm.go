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
func VoxelNorm(x, gamma, beta *gorgonia.Node, eps float64) (*gorgonia.Node, error) {
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
	return gorgonia.ApplyOp(voxelNormOp{eps: eps}, x, gamma, beta)
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

// voxelNormOp is the forward op of VoxelNorm: (x, gamma, beta) → y.
type voxelNormOp struct{ eps float64 }

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
		return voxelNormDevice(op.eps, in[0], in[1], in[2], n, c)
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
		voxelNormForward(x, g, b, y, n, c, op.eps)
		return normDense(y, n, c), nil
	case []float32:
		g, b, err := normData[float32](in[1], in[2])
		if err != nil {
			return nil, err
		}
		y := make([]float32, n*c)
		voxelNormForward(x, g, b, y, n, c, op.eps)
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
func (op voxelNormOp) String() string   { return fmt.Sprintf("VoxelNorm{eps=%g}", op.eps) }

func (voxelNormOp) DiffWRT(n int) []bool { return allTrue(n) }

// SymDiff returns the gradients of x, gamma and beta as three applications
// of voxelNormGradOp to (x, gamma, grad).
func (op voxelNormOp) SymDiff(in gorgonia.Nodes, _, grad *gorgonia.Node) (gorgonia.Nodes, error) {
	if err := checkArity("ops.VoxelNorm", 3, len(in)); err != nil {
		return nil, err
	}
	out := make(gorgonia.Nodes, 3)
	for w := range out {
		var err error
		if out[w], err = gorgonia.ApplyOp(voxelNormGradOp{eps: op.eps, wrt: w}, in[0], in[1], grad); err != nil {
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
	grads, err := voxelNormGrads(op.eps, in[0].Value(), in[1].Value(), dy, [3]bool{true, true, true})
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

// voxelNormGradOp computes one gradient of VoxelNorm from (x, gamma, dy):
// wrt 0 → dx [N, C], 1 → dgamma [C], 2 → dbeta [C].
type voxelNormGradOp struct {
	eps float64
	wrt int
}

var _ gorgonia.Op = voxelNormGradOp{}

func (voxelNormGradOp) Arity() int { return 3 }

func (op voxelNormGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	m := gorgonia.TensorType{Dims: 2, Of: a}
	v := gorgonia.TensorType{Dims: 1, Of: a}
	if op.wrt == 0 {
		return hm.NewFnType(m, v, m, m)
	}
	return hm.NewFnType(m, v, m, v)
}

func (op voxelNormGradOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	s, err := inputShapes("ops.VoxelNormGrad", 3, in)
	if err != nil {
		return nil, err
	}
	_, c, err := normShapes("VoxelNormGrad", s[0], s[1])
	if err != nil {
		return nil, err
	}
	if !s[2].Eq(s[0]) {
		return nil, &sparse.ShapeError{Op: "VoxelNormGrad", Arg: "dy", Want: fmt.Sprint(s[0]), Got: fmt.Sprint(s[2])}
	}
	if op.wrt == 0 {
		return s[0].Clone(), nil
	}
	return tensor.Shape{c}, nil
}

func (op voxelNormGradOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	if err := checkArity("ops.VoxelNormGrad", 3, len(in)); err != nil {
		return nil, err
	}
	if op.wrt < 0 || op.wrt > 2 {
		return nil, fmt.Errorf("%w: VoxelNorm gradient: input %d", sparse.ErrShape, op.wrt)
	}
	if onDevice(in...) {
		return voxelNormGradDevice(op.eps, op.wrt, in[0], in[1], in[2])
	}
	var want [3]bool
	want[op.wrt] = true
	grads, err := voxelNormGrads(op.eps, in[0], in[1], in[2], want)
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
	return fmt.Sprintf("VoxelNormGrad{eps=%g, wrt=%d}", op.eps, op.wrt)
}

// voxelNormGrads returns those of dx, dgamma and dbeta that want asks
// for, as dense tensors (nil for the others).
func voxelNormGrads(eps float64, xv, gv, dyv gorgonia.Value, want [3]bool) ([3]*tensor.Dense, error) {
	var out [3]*tensor.Dense
	n, c, err := normShapes("VoxelNormGrad", xv.Shape(), gv.Shape())
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
		return voxelNormGradsOf(x, gv, dyv, n, c, eps, want)
	case []float32:
		return voxelNormGradsOf(x, gv, dyv, n, c, eps, want)
	}
	return out, fmt.Errorf("%w: VoxelNormGrad: x holds %T", sparse.ErrDType, xv.Data())
}

func voxelNormGradsOf[T float32 | float64](x []T, gv, dyv gorgonia.Value, n, c int, eps float64, want [3]bool) ([3]*tensor.Dense, error) {
	var out [3]*tensor.Dense
	g, dy, err := normData[T](gv, dyv)
	if err != nil {
		return out, err
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
	voxelNormBackward(x, g, dy, dx, dg, db, n, c, eps)
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

func voxelNormForward[T float32 | float64](x, gamma, beta, y []T, n, c int, eps float64) {
	mean, inv := voxelNormStats(x, n, c, eps)
	scale := make([]float64, c)
	shift := make([]float64, c)
	for j := range c {
		scale[j] = float64(gamma[j]) * inv[j]
		shift[j] = float64(beta[j]) - mean[j]*scale[j]
	}
	normChunks(n, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			xr, yr := x[i*c:i*c+c], y[i*c:i*c+c]
			for j, v := range xr {
				yr[j] = T(float64(v)*scale[j] + shift[j])
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
// computed when dx or dgamma is wanted.
func voxelNormBackward[T float32 | float64](x, gamma, dy, dx, dgamma, dbeta []T, n, c int, eps float64) {
	if dx == nil && dgamma == nil {
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
	// One pass for both sums: columns [0, c) hold Σdy, [c, 2c) Σdy·x̂.
	sums := normColumnSums(n, 2*c, func(i int, acc []float64) {
		xr, dr := x[i*c:i*c+c], dy[i*c:i*c+c]
		for j := range c {
			d := float64(dr[j])
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
				xh := (float64(xr[j]) - mean[j]) * inv[j]
				gr[j] = T(float64(gamma[j]) * inv[j] * (float64(dr[j]) - (sb[j]+xh*sg[j])/fn))
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
