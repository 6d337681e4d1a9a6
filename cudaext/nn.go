//go:build cudaext

package cudaext

// The non-convolution kernels of a sparse network (kernels/nn.cu):
// conversions, column copies, addition, ReLU, VoxelNorm (optionally with
// a fused ReLU), softmax
// cross-entropy, Adam (per parameter or all in one launch), a
// non-finite check and a row argmax. NN implements the device.NN contract of package ops/device (without importing it), so
// a Gorgonia graph can train with every tensor on this engine's GPU.
// Reductions are float64 over fixed row chunks, whose sums are added by a
// fixed partition and tree (the same for any launch):
// deterministic, no atomics.

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/flexgemm-go/flexgemm/sparse"
)

// NN is the kernel set of ops/device.NN on one engine. Its methods are
// safe for concurrent use; work is queued on the engine's stream.
type NN struct{ e *Engine }

// NN returns the engine's non-convolution kernels.
func (e *Engine) NN() *NN { return &NN{e: e} }

// nnCode returns the dtype code of the kernels (0 float32, 1 float16, 2
// bfloat16).
func nnCode(dt sparse.DType) (int32, error) {
	switch dt {
	case sparse.Float32:
		return 0, nil
	case sparse.Float16:
		return 1, nil
	case sparse.BFloat16:
		return 2, nil
	}
	return 0, fmt.Errorf("%w: %v is not a float dtype", sparse.ErrDType, dt)
}

// fbuf returns a float operand's buffer and dtype code.
func (n *NN) fbuf(m sparse.Matrix, arg string) (*Buffer, int32, error) {
	b, err := n.e.buffer(m, arg)
	if err != nil {
		return nil, 0, err
	}
	c, err := nnCode(b.dtype)
	if err != nil {
		return nil, 0, fmt.Errorf("cudaext: %s: %w", arg, err)
	}
	return b, c, nil
}

// vec returns the buffer of a [1, c] Float32 operand.
func (n *NN) vec(m sparse.Matrix, arg string, c int) (*Buffer, error) {
	b, err := n.e.buffer(m, arg)
	if err != nil {
		return nil, err
	}
	if m.Rows != 1 || m.Cols != c {
		return nil, &sparse.ShapeError{Op: "cudaext: NN", Arg: arg, Want: fmt.Sprintf("[1, %d]", c), Got: m.Shape()}
	}
	if b.dtype != sparse.Float32 {
		return nil, fmt.Errorf("%w: cudaext: %s is %v, want float32", sparse.ErrDType, arg, b.dtype)
	}
	return b, nil
}

// same returns the float buffers of ms (named by names) after checking
// that they hold the same number of elements.
func (n *NN) same(op string, names []string, ms ...sparse.Matrix) ([]*Buffer, []int32, error) {
	bs := make([]*Buffer, len(ms))
	cs := make([]int32, len(ms))
	for i, m := range ms {
		b, c, err := n.fbuf(m, names[i])
		if err != nil {
			return nil, nil, err
		}
		if i > 0 && b.n != bs[0].n {
			return nil, nil, fmt.Errorf("%w: cudaext: %s: %s has %d elements, %s %d", sparse.ErrShape, op, names[i], b.n, names[0], bs[0].n)
		}
		bs[i], cs[i] = b, c
	}
	return bs, cs, nil
}

// elementwise launches a grid-stride kernel over count elements on the
// worker; count == 0 launches nothing.
func (n *NN) elementwise(name string, count int, args ...any) error {
	if count == 0 {
		return nil
	}
	d := n.e.d
	return d.do(func() error {
		g, b := d.elementwise(int64(count))
		return d.launch(name, g, b, 0, args...)
	})
}

// Copy sets dst = src element-wise (same number of elements), converting
// between float dtypes; Int32 copies to Int32.
func (n *NN) Copy(dst, src sparse.Matrix) error {
	db, err := n.e.buffer(dst, "dst")
	if err != nil {
		return err
	}
	sb, err := n.e.buffer(src, "src")
	if err != nil {
		return err
	}
	if db.n != sb.n {
		return fmt.Errorf("%w: cudaext: Copy of %d elements into %d", sparse.ErrShape, sb.n, db.n)
	}
	if db.dtype == sparse.Int32 || sb.dtype == sparse.Int32 {
		if db.dtype != sb.dtype {
			return fmt.Errorf("%w: cudaext: Copy from %v to %v", sparse.ErrDType, sb.dtype, db.dtype)
		}
		return n.e.d.do(func() error { return memcpyDtoD(db.ptr, sb.ptr, int64(sb.n)*4, n.e.d.stream) })
	}
	dc, _ := nnCode(db.dtype)
	sc, _ := nnCode(sb.dtype)
	return n.elementwise("nn_copy", sb.n, sb.ptr, sc, db.ptr, dc, int64(sb.n))
}

// CopyCols sets dst[r, dstCol+j] = src[r, srcCol+j] for j < cols.
func (n *NN) CopyCols(dst sparse.Matrix, dstCol int, src sparse.Matrix, srcCol, cols int) error {
	db, dc, err := n.fbuf(dst, "dst")
	if err != nil {
		return err
	}
	sb, sc, err := n.fbuf(src, "src")
	if err != nil {
		return err
	}
	if dst.Rows != src.Rows || cols < 0 || dstCol < 0 || srcCol < 0 || dstCol+cols > dst.Cols || srcCol+cols > src.Cols {
		return fmt.Errorf("%w: cudaext: CopyCols of columns [%d, %d) of a %s matrix into columns [%d, %d) of a %s matrix",
			sparse.ErrShape, srcCol, srcCol+cols, src.Shape(), dstCol, dstCol+cols, dst.Shape())
	}
	return n.elementwise("nn_copy_cols", dst.Rows*cols, sb.ptr, sc, int64(src.Cols), int64(srcCol),
		db.ptr, dc, int64(dst.Cols), int64(dstCol), int64(dst.Rows), int64(cols))
}

// Add sets dst = a + b element-wise (dst may be a or b).
func (n *NN) Add(dst, a, b sparse.Matrix) error {
	bs, cs, err := n.same("Add", []string{"dst", "a", "b"}, dst, a, b)
	if err != nil {
		return err
	}
	return n.elementwise("nn_add", bs[0].n, bs[1].ptr, cs[1], bs[2].ptr, cs[2], bs[0].ptr, cs[0], int64(bs[0].n))
}

// ReLU sets dst = x > 0 ? x : 0.
func (n *NN) ReLU(dst, x sparse.Matrix) error {
	bs, cs, err := n.same("ReLU", []string{"dst", "x"}, dst, x)
	if err != nil {
		return err
	}
	return n.elementwise("nn_relu", bs[0].n, bs[1].ptr, cs[1], bs[0].ptr, cs[0], int64(bs[0].n))
}

// ReLUGrad sets dx = x > 0 ? dy : 0.
func (n *NN) ReLUGrad(dx, x, dy sparse.Matrix) error {
	bs, cs, err := n.same("ReLUGrad", []string{"dx", "x", "dy"}, dx, x, dy)
	if err != nil {
		return err
	}
	return n.elementwise("nn_relu_grad", bs[0].n, bs[1].ptr, cs[1], bs[2].ptr, cs[2], bs[0].ptr, cs[0], int64(bs[0].n))
}

// normChunk returns the rows per chunk of the column reductions: at least
// 256, few enough chunks for the grid's y dimension. It depends on rows
// only, so the summation order is fixed.
func normChunk(rows int) (chunkRows, chunks int64) {
	chunkRows = max(256, (int64(rows)+65534)/65535)
	return chunkRows, (int64(rows) + chunkRows - 1) / chunkRows
}

// columnPartials launches a (32, 8)-block column reduction kernel over
// rows × cols that writes two [chunks, cols] float64 partial arrays into
// tmp. Worker only.
func (n *NN) columnPartials(name string, rows, cols int, args ...any) (part0, part1 rawBuf, chunks int64, err error) {
	d := n.e.d
	chunkRows, chunks := normChunk(rows)
	if part0, err = d.allocTemp(chunks * int64(cols) * 8); err != nil {
		return
	}
	if part1, err = d.allocTemp(chunks * int64(cols) * 8); err != nil {
		d.freeTemp(part0)
		return
	}
	if chunks > 0 && cols > 0 {
		args = append(args, int64(rows), int64(cols), chunkRows, part0.ptr, part1.ptr)
		err = d.launch(name, dim3{X: int((cols + 31) / 32), Y: int(chunks)}, dim3{X: 32, Y: 8}, 0, args...)
	}
	if err != nil {
		d.freeTemp(part0)
		d.freeTemp(part1)
	}
	return
}

// The chunk sums of the column reductions (stage 2) run 32 columns × 32
// chunk lanes per block (nn.cu chunk_sums).
var sumsBlock = dim3{X: 32, Y: 32}

func sumsGrid(cols int) dim3 { return dim3{X: (cols + 31) / 32} }

// NormStats computes the per-channel mean and 1/√(var + eps) of x [N, C]
// into the Float32 [1, C] mean and inv.
func (n *NN) NormStats(mean, inv, x sparse.Matrix, eps float64) error {
	xb, xc, err := n.fbuf(x, "x")
	if err != nil {
		return err
	}
	rows, cols := x.Rows, x.Cols
	mb, err := n.vec(mean, "mean", cols)
	if err != nil {
		return err
	}
	ib, err := n.vec(inv, "inv", cols)
	if err != nil {
		return err
	}
	if !(eps > 0) {
		return fmt.Errorf("%w: cudaext: NormStats eps %v", sparse.ErrOptions, eps)
	}
	if cols == 0 {
		return nil
	}
	d := n.e.d
	return d.do(func() error {
		ps, pq, chunks, err := n.columnPartials("nn_norm_partial", rows, cols, d.addr(xb.ptr), xc)
		if err != nil {
			return err
		}
		defer d.freeTemp(ps)
		defer d.freeTemp(pq)
		return d.launch("nn_norm_stats", sumsGrid(cols), sumsBlock, 0, d.addr(ps.ptr), d.addr(pq.ptr), chunks, int64(rows), int64(cols),
			math.Float64bits(eps), mb.ptr, ib.ptr)
	})
}

// NormForward sets y = (x − mean)·inv·gamma + beta.
func (n *NN) NormForward(y, x, gamma, beta, mean, inv sparse.Matrix) error {
	return n.normForward("NormForward", 0, y, x, gamma, beta, mean, inv)
}

// NormForwardReLU sets y = max(0, (x − mean)·inv·gamma + beta) in one pass
// (the ReLU fused into the store of NormForward).
func (n *NN) NormForwardReLU(y, x, gamma, beta, mean, inv sparse.Matrix) error {
	return n.normForward("NormForwardReLU", 1, y, x, gamma, beta, mean, inv)
}

func (n *NN) normForward(op string, relu int32, y, x, gamma, beta, mean, inv sparse.Matrix) error {
	bs, cs, err := n.same(op, []string{"y", "x"}, y, x)
	if err != nil {
		return err
	}
	cols := x.Cols
	if y.Cols != cols {
		return &sparse.ShapeError{Op: "cudaext: " + op, Arg: "y", Want: x.Shape(), Got: y.Shape()}
	}
	gb, gc, err := n.fbuf(gamma, "gamma")
	if err != nil {
		return err
	}
	bb, bc, err := n.fbuf(beta, "beta")
	if err != nil {
		return err
	}
	if gamma.Rows != 1 || gamma.Cols != cols || beta.Rows != 1 || beta.Cols != cols {
		return &sparse.ShapeError{Op: "cudaext: " + op, Arg: "gamma/beta", Want: fmt.Sprintf("[1, %d]", cols), Got: gamma.Shape() + " " + beta.Shape()}
	}
	mb, err := n.vec(mean, "mean", cols)
	if err != nil {
		return err
	}
	ib, err := n.vec(inv, "inv", cols)
	if err != nil {
		return err
	}
	return n.elementwise("nn_norm_forward", bs[0].n, bs[1].ptr, cs[1], gb.ptr, gc, bb.ptr, bc, mb.ptr, ib.ptr,
		bs[0].ptr, cs[0], int64(x.Rows), int64(cols), relu)
}

// NormBackward computes dbeta = Σ dy, dgamma = Σ dy·x̂ (Float32 [1, C])
// and, unless dx is the zero Matrix, dx = gamma·inv·(dy − (dbeta +
// x̂·dgamma)/N).
func (n *NN) NormBackward(dx, dgamma, dbeta, x, gamma, dy, mean, inv sparse.Matrix) error {
	return n.normBackward("NormBackward", dx, dgamma, dbeta, x, gamma, sparse.Matrix{}, dy, mean, inv)
}

// NormBackwardReLU is NormBackward of VoxelNorm followed by ReLU: dy is
// masked where the forward value (recomputed from x, gamma, beta and the
// statistics as NormForwardReLU computes it) is not positive, inside the
// same three kernels.
func (n *NN) NormBackwardReLU(dx, dgamma, dbeta, x, gamma, beta, dy, mean, inv sparse.Matrix) error {
	if beta.IsZero() {
		return fmt.Errorf("%w: cudaext: NormBackwardReLU: beta is the zero Matrix", sparse.ErrShape)
	}
	return n.normBackward("NormBackwardReLU", dx, dgamma, dbeta, x, gamma, beta, dy, mean, inv)
}

// normBackward runs the three backward kernels, with the ReLU mask unless
// beta is the zero Matrix.
func (n *NN) normBackward(op string, dx, dgamma, dbeta, x, gamma, beta, dy, mean, inv sparse.Matrix) error {
	bs, cs, err := n.same(op, []string{"x", "dy"}, x, dy)
	if err != nil {
		return err
	}
	rows, cols := x.Rows, x.Cols
	if dy.Cols != cols {
		return &sparse.ShapeError{Op: "cudaext: " + op, Arg: "dy", Want: x.Shape(), Got: dy.Shape()}
	}
	var dxb *Buffer
	var dxc int32
	if !dx.IsZero() {
		if dxb, dxc, err = n.fbuf(dx, "dx"); err != nil {
			return err
		}
		if dx.Rows != rows || dx.Cols != cols {
			return &sparse.ShapeError{Op: "cudaext: " + op, Arg: "dx", Want: x.Shape(), Got: dx.Shape()}
		}
	}
	gb, gc, err := n.fbuf(gamma, "gamma")
	if err != nil {
		return err
	}
	if gamma.Rows != 1 || gamma.Cols != cols {
		return &sparse.ShapeError{Op: "cudaext: " + op, Arg: "gamma", Want: fmt.Sprintf("[1, %d]", cols), Got: gamma.Shape()}
	}
	// Without the ReLU the kernels never read beta (null pointer).
	var bptr devPtr
	var bc, relu int32
	if !beta.IsZero() {
		bb, c, err := n.fbuf(beta, "beta")
		if err != nil {
			return err
		}
		if beta.Rows != 1 || beta.Cols != cols {
			return &sparse.ShapeError{Op: "cudaext: " + op, Arg: "beta", Want: fmt.Sprintf("[1, %d]", cols), Got: beta.Shape()}
		}
		bptr, bc, relu = bb.ptr, c, 1
	}
	vs := make([]*Buffer, 4)
	for i, m := range []sparse.Matrix{dgamma, dbeta, mean, inv} {
		if vs[i], err = n.vec(m, [...]string{"dgamma", "dbeta", "mean", "inv"}[i], cols); err != nil {
			return err
		}
	}
	if cols == 0 {
		return nil
	}
	d := n.e.d
	return d.do(func() error {
		pb, pg, chunks, err := n.columnPartials("nn_norm_bwd_partial", rows, cols,
			d.addr(bs[0].ptr), cs[0], d.addr(bs[1].ptr), cs[1], vs[2].ptr, vs[3].ptr, gb.ptr, gc, bptr, bc, relu)
		if err != nil {
			return err
		}
		defer d.freeTemp(pb)
		defer d.freeTemp(pg)
		if err := d.launch("nn_norm_bwd_sums", sumsGrid(cols), sumsBlock, 0, d.addr(pb.ptr), d.addr(pg.ptr), chunks, int64(cols), vs[0].ptr, vs[1].ptr); err != nil {
			return err
		}
		if dxb == nil || rows == 0 {
			return nil
		}
		g, b := d.elementwise(int64(rows) * int64(cols))
		return d.launch("nn_norm_bwd_dx", g, b, 0, bs[0].ptr, cs[0], bs[1].ptr, cs[1], gb.ptr, gc, vs[2].ptr, vs[3].ptr,
			vs[0].ptr, vs[1].ptr, dxb.ptr, dxc, int64(rows), int64(cols), bptr, bc, relu)
	})
}

// xentArgs checks the cross-entropy operands: logits [N, K] float, labels
// N Int32, weights [1, K] Float32 or the zero Matrix (address 0).
func (n *NN) xentArgs(logits, labels, weights sparse.Matrix) (zb *Buffer, zc int32, lb *Buffer, wptr devPtr, err error) {
	if zb, zc, err = n.fbuf(logits, "logits"); err != nil {
		return
	}
	if lb, err = n.e.buffer(labels, "labels"); err != nil {
		return
	}
	if lb.dtype != sparse.Int32 || lb.n != logits.Rows {
		err = fmt.Errorf("%w: cudaext: labels are %s %v, want [%d, 1] int32", sparse.ErrShape, labels.Shape(), lb.dtype, logits.Rows)
		return
	}
	if !weights.IsZero() {
		var wb *Buffer
		if wb, err = n.vec(weights, "class weights", logits.Cols); err != nil {
			return
		}
		wptr = wb.ptr
	}
	return
}

// XentForward sets loss (Float32 [1, 1]) to scale · Σ_i w[l_i]·(lse_i −
// z[i, l_i]) over the counted rows.
func (n *NN) XentForward(loss, logits, labels, weights sparse.Matrix, scale float32) error {
	zb, zc, lb, wp, err := n.xentArgs(logits, labels, weights)
	if err != nil {
		return err
	}
	ob, err := n.vec(loss, "loss", 1)
	if err != nil {
		return err
	}
	rows, k := int64(logits.Rows), int64(logits.Cols)
	const threads, chunkRows = 256, 2048
	chunks := (rows + chunkRows - 1) / chunkRows
	d := n.e.d
	return d.do(func() error {
		part, err := d.allocTemp(chunks * 8)
		if err != nil {
			return err
		}
		defer d.freeTemp(part)
		if chunks > 0 {
			if err := d.launch("nn_xent_partial", dim3{X: int(chunks)}, dim3{X: threads}, 0, d.addr(zb.ptr), zc, d.addr(lb.ptr), wp,
				rows, k, int64(chunkRows), part.ptr); err != nil {
				return err
			}
		}
		return d.launch("nn_xent_final", dim3{X: 1}, dim3{X: 32}, 0, d.addr(part.ptr), chunks, scale, ob.ptr)
	})
}

// XentBackward sets dz = scale·w[l_i]·(softmax(z[i]) − onehot(l_i)) for
// counted rows and 0 for the others.
func (n *NN) XentBackward(dz, logits, labels, weights sparse.Matrix, scale float32) error {
	zb, zc, lb, wp, err := n.xentArgs(logits, labels, weights)
	if err != nil {
		return err
	}
	db, dc, err := n.fbuf(dz, "dz")
	if err != nil {
		return err
	}
	if dz.Rows != logits.Rows || dz.Cols != logits.Cols {
		return &sparse.ShapeError{Op: "cudaext: XentBackward", Arg: "dz", Want: logits.Shape(), Got: dz.Shape()}
	}
	return n.elementwise("nn_xent_backward", logits.Rows, zb.ptr, zc, lb.ptr, wp, int64(logits.Rows), int64(logits.Cols),
		scale, db.ptr, dc)
}

// AdamStep updates w, m and v (Float32) in place from the gradient g (any
// float dtype); see device.NN.
func (n *NN) AdamStep(w, g, m, v sparse.Matrix, lr, beta1, beta2, eps, corr1, corr2, gradScale, l2 float32) error {
	bs, cs, err := n.same("AdamStep", []string{"w", "g", "m", "v"}, w, g, m, v)
	if err != nil {
		return err
	}
	for k, i := range []int{0, 2, 3} {
		if cs[i] != 0 {
			return fmt.Errorf("%w: cudaext: AdamStep: %s is %v, want float32", sparse.ErrDType, [...]string{"w", "m", "v"}[k], bs[i].dtype)
		}
	}
	return n.elementwise("nn_adam", bs[0].n, bs[0].ptr, bs[1].ptr, cs[1], bs[2].ptr, bs[3].ptr, int64(bs[0].n),
		lr, beta1, beta2, eps, corr1, corr2, gradScale, l2)
}

// AdamSteps updates several parameters (ws[i] with gradient gs[i] and
// moments ms[i], vs[i], as for AdamStep) in one launch: the table of
// their buffers is copied to the device (48 bytes per parameter) and one
// grid-stride kernel covers the concatenation of all their elements, with
// the arithmetic of AdamStep.
func (n *NN) AdamSteps(ws, gs, ms, vs []sparse.Matrix, lr, beta1, beta2, eps, corr1, corr2, gradScale, l2 float32) error {
	if len(gs) != len(ws) || len(ms) != len(ws) || len(vs) != len(ws) {
		return fmt.Errorf("%w: cudaext: AdamSteps of %d parameters, %d gradients, %d and %d moments", sparse.ErrShape, len(ws), len(gs), len(ms), len(vs))
	}
	if len(ws) > math.MaxInt32 {
		return fmt.Errorf("%w: cudaext: AdamSteps of %d parameters", sparse.ErrShape, len(ws))
	}
	// Six 8-byte fields per parameter: w, g, m, v, start, gradient dtype
	// code (struct AdamTensor of kernels/nn.cu).
	table := make([]uint64, 0, 6*len(ws))
	var total int64
	for i := range ws {
		bs, cs, err := n.same("AdamSteps", []string{"w", "g", "m", "v"}, ws[i], gs[i], ms[i], vs[i])
		if err != nil {
			return fmt.Errorf("parameter %d: %w", i, err)
		}
		for k, j := range []int{0, 2, 3} {
			if cs[j] != 0 {
				return fmt.Errorf("%w: cudaext: AdamSteps: parameter %d: %s is %v, want float32", sparse.ErrDType, i, [...]string{"w", "m", "v"}[k], bs[j].dtype)
			}
		}
		table = append(table, uint64(bs[0].ptr), uint64(bs[1].ptr), uint64(bs[2].ptr), uint64(bs[3].ptr), uint64(total), uint64(cs[1]))
		total += int64(bs[0].n)
	}
	if total == 0 {
		return nil
	}
	d := n.e.d
	return d.do(func() error {
		tb, err := d.allocTemp(int64(len(table)) * 8)
		if err != nil {
			return err
		}
		defer d.freeTemp(tb)
		if err := memcpyHtoD(tb.ptr, unsafe.Pointer(&table[0]), int64(len(table))*8, d.stream); err != nil {
			return err
		}
		g, b := d.elementwise(total)
		return d.launch("nn_adam_multi", g, b, 0, tb.ptr, int32(len(ws)), total, lr, beta1, beta2, eps, corr1, corr2, gradScale, l2)
	})
}

// NonFinite sets the Float32 [1, 1] flag to 1 if any element of ms is
// infinite or NaN.
func (n *NN) NonFinite(flag sparse.Matrix, ms ...sparse.Matrix) error {
	fb, err := n.vec(flag, "flag", 1)
	if err != nil {
		return err
	}
	for i, m := range ms {
		b, c, err := n.fbuf(m, fmt.Sprintf("matrix %d", i))
		if err != nil {
			return err
		}
		if err := n.elementwise("nn_nonfinite", b.n, b.ptr, c, int64(b.n), fb.ptr); err != nil {
			return err
		}
	}
	return nil
}

// ArgmaxRows sets dst[i] (Int32, N elements) to the column of the largest
// element of row i of x [N, K] (the first on ties).
func (n *NN) ArgmaxRows(dst, x sparse.Matrix) error {
	xb, xc, err := n.fbuf(x, "x")
	if err != nil {
		return err
	}
	db, err := n.e.buffer(dst, "dst")
	if err != nil {
		return err
	}
	if db.dtype != sparse.Int32 || db.n != x.Rows {
		return fmt.Errorf("%w: cudaext: ArgmaxRows into %s %v, want [%d, 1] int32", sparse.ErrShape, dst.Shape(), db.dtype, x.Rows)
	}
	return n.elementwise("nn_argmax_rows", x.Rows, n.e.d.addr(xb.ptr), xc, int64(x.Rows), int64(x.Cols), db.ptr)
}
