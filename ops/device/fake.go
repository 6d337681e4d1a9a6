package device

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// Fake is a device backend that runs on the CPU: it implements Memory and
// NN with Go code over its own buffers, which nothing but its methods can
// read. It exists to test the device path without a GPU: a graph that
// trains on a Fake device keeps every tensor in device storage, so any
// host access to tensor data faults (see Protected), every host↔device
// copy is counted, and float16/bfloat16 storage is emulated by rounding
// every stored value (arithmetic in float32 or float64, as on the GPU).
// Convolutions run the CPU engine of package sparse on float32 copies of
// the operands and round the result to the operands' dtype.
//
// New allocations are filled with NaN, so an element a kernel forgets to
// write shows up. A capacity (WithCapacity) makes allocations beyond it
// fail with ErrOutOfMemory.
type Fake struct {
	name     string
	capacity int64

	mu     sync.Mutex
	inUse  int64
	peak   int64
	allocs int64
}

// FakeOption configures a Fake device.
type FakeOption func(*Fake)

// WithCapacity limits the fake device's memory to bytes (0: unlimited).
func WithCapacity(bytes int64) FakeOption { return func(f *Fake) { f.capacity = bytes } }

var fakeCount atomic.Int64

// NewFake returns a fake device backend.
func NewFake(opts ...FakeOption) *Fake {
	f := &Fake{name: fmt.Sprintf("fake:%d", fakeCount.Add(1)-1)}
	for _, o := range opts {
		o(f)
	}
	return f
}

// fakeBuf is the storage of a Fake device: float dtypes keep float32
// values rounded to the dtype, Int32 keeps int32 values.
type fakeBuf struct {
	f     *Fake
	dt    sparse.DType
	n     int
	f32   []float32
	i32   []int32
	freed atomic.Bool
}

// DType implements sparse.Storage.
func (b *fakeBuf) DType() sparse.DType { return b.dt }

// Len implements sparse.Storage.
func (b *fakeBuf) Len() int { return b.n }

// String implements fmt.Stringer for fakeBuf.
func (b *fakeBuf) String() string {
	return fmt.Sprintf("fake buffer{%v × %d on %s}", b.dt, b.n, b.f.name)
}

// FakeStats reports a fake device's memory use in bytes.
type FakeStats struct {
	InUse, Peak, Allocs int64
}

// Stats returns the memory statistics.
func (f *Fake) Stats() FakeStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return FakeStats{InUse: f.inUse, Peak: f.peak, Allocs: f.allocs}
}

// Name implements sparse.Engine.
func (f *Fake) Name() string { return f.name }

// Owns implements sparse.Engine.
func (f *Fake) Owns(m sparse.Matrix) bool {
	b, ok := m.Data.(*fakeBuf)
	return ok && b != nil && b.f == f
}

// buf returns m's buffer after checking ownership, liveness and shape.
func (f *Fake) buf(m sparse.Matrix, arg string) (*fakeBuf, error) {
	b, ok := m.Data.(*fakeBuf)
	if !ok || b == nil {
		return nil, fmt.Errorf("%w: %s: %s holds %T", ErrNotDevice, f.name, arg, m.Data)
	}
	if b.f != f {
		return nil, fmt.Errorf("%w: %s is a buffer of %s, not of %s", ErrMixed, arg, b.f.name, f.name)
	}
	if b.freed.Load() {
		return nil, fmt.Errorf("%w: %s: %s", ErrReleased, f.name, arg)
	}
	if m.Rows < 0 || m.Cols < 0 || m.Rows*m.Cols != b.n {
		return nil, fmt.Errorf("%w: %s: %s is [%d, %d] but its buffer holds %d elements", sparse.ErrShape, f.name, arg, m.Rows, m.Cols, b.n)
	}
	return b, nil
}

// floatBuf is buf for float operands.
func (f *Fake) floatBuf(m sparse.Matrix, arg string) (*fakeBuf, error) {
	b, err := f.buf(m, arg)
	if err != nil {
		return nil, err
	}
	if b.dt == sparse.Int32 {
		return nil, fmt.Errorf("%w: %s: %s is int32, want a float dtype", sparse.ErrDType, f.name, arg)
	}
	return b, nil
}

func (f *Fake) newBuf(dt sparse.DType, n int) (*fakeBuf, error) {
	switch dt {
	case sparse.Float32, sparse.Float16, sparse.BFloat16, sparse.Int32:
	default:
		return nil, fmt.Errorf("%w: %v cannot live on %s (Float32, Float16, BFloat16, Int32)", sparse.ErrDType, dt, f.name)
	}
	if n < 0 {
		return nil, fmt.Errorf("%w: %s: buffer of %d elements", sparse.ErrShape, f.name, n)
	}
	bytes := int64(n) * int64(dt.Size())
	f.mu.Lock()
	if f.capacity > 0 && f.inUse+bytes > f.capacity {
		inUse := f.inUse
		f.mu.Unlock()
		return nil, fmt.Errorf("%w: allocating %d bytes (%d × %v) on %s: %d bytes in use of %d", ErrOutOfMemory, bytes, n, dt, f.name, inUse, f.capacity)
	}
	f.inUse += bytes
	f.peak = max(f.peak, f.inUse)
	f.allocs++
	f.mu.Unlock()
	b := &fakeBuf{f: f, dt: dt, n: n}
	if dt == sparse.Int32 {
		b.i32 = make([]int32, n)
		for i := range b.i32 {
			b.i32[i] = math.MinInt32 // poison
		}
	} else {
		b.f32 = make([]float32, n)
		nan := float32(math.NaN())
		for i := range b.f32 {
			b.f32[i] = nan // poison
		}
	}
	return b, nil
}

// Alloc implements Memory.
func (f *Fake) Alloc(dt sparse.DType, rows, cols int) (sparse.Matrix, error) {
	if rows < 0 || cols < 0 {
		return sparse.Matrix{}, fmt.Errorf("%w: %s: Alloc [%d, %d]", sparse.ErrShape, f.name, rows, cols)
	}
	b, err := f.newBuf(dt, rows*cols)
	if err != nil {
		return sparse.Matrix{}, err
	}
	return sparse.Matrix{Rows: rows, Cols: cols, Data: b}, nil
}

// Free implements Memory.
func (f *Fake) Free(ms ...sparse.Matrix) {
	for _, m := range ms {
		b, ok := m.Data.(*fakeBuf)
		if !ok || b == nil || b.f != f || !b.freed.CompareAndSwap(false, true) {
			continue
		}
		f.mu.Lock()
		f.inUse -= int64(b.n) * int64(b.dt.Size())
		f.mu.Unlock()
		b.f32, b.i32 = nil, nil
	}
}

// ToDeviceAs implements Memory.
func (f *Fake) ToDeviceAs(host sparse.Matrix, dt sparse.DType) (sparse.Matrix, error) {
	if err := host.Validate(); err != nil {
		return sparse.Matrix{}, fmt.Errorf("%s: ToDeviceAs: %w", f.name, err)
	}
	if _, ok := host.Data.(sparse.Storage); ok {
		return sparse.Matrix{}, fmt.Errorf("%w: %s: ToDeviceAs of device data %T", sparse.ErrDType, f.name, host.Data)
	}
	out, err := f.Alloc(dt, host.Rows, host.Cols)
	if err != nil {
		return sparse.Matrix{}, err
	}
	b := out.Data.(*fakeBuf)
	switch h := host.Data.(type) {
	case []int32:
		if dt != sparse.Int32 {
			f.Free(out)
			return sparse.Matrix{}, fmt.Errorf("%w: %s: int32 host data cannot become %v", sparse.ErrDType, f.name, dt)
		}
		copy(b.i32, h)
	case []float32:
		if dt == sparse.Int32 {
			f.Free(out)
			return sparse.Matrix{}, fmt.Errorf("%w: %s: float host data cannot become int32", sparse.ErrDType, f.name)
		}
		for i, v := range h {
			b.f32[i] = RoundTo(dt, v)
		}
	case []float64:
		if dt == sparse.Int32 {
			f.Free(out)
			return sparse.Matrix{}, fmt.Errorf("%w: %s: float host data cannot become int32", sparse.ErrDType, f.name)
		}
		for i, v := range h {
			b.f32[i] = RoundTo(dt, float32(v))
		}
	}
	return out, nil
}

// ToHost implements Memory.
func (f *Fake) ToHost(m sparse.Matrix) (sparse.Matrix, error) {
	b, err := f.buf(m, "matrix")
	if err != nil {
		return sparse.Matrix{}, err
	}
	if b.dt == sparse.Int32 {
		return sparse.Matrix{Rows: m.Rows, Cols: m.Cols, Data: append(make([]int32, 0, b.n), b.i32...)}, nil
	}
	return sparse.Matrix{Rows: m.Rows, Cols: m.Cols, Data: append(make([]float32, 0, b.n), b.f32...)}, nil
}

// Fill implements Memory.
func (f *Fake) Fill(m sparse.Matrix, v float32) error {
	b, err := f.floatBuf(m, "matrix")
	if err != nil {
		return err
	}
	r := RoundTo(b.dt, v)
	for i := range b.f32 {
		b.f32[i] = r
	}
	return nil
}

// Synchronize implements Memory (the fake device is synchronous).
func (f *Fake) Synchronize() error { return nil }

// hostF32 returns a float32 host matrix with b's values (a copy).
func (b *fakeBuf) hostF32(rows, cols int) sparse.Matrix {
	return sparse.Matrix{Rows: rows, Cols: cols, Data: append(make([]float32, 0, b.n), b.f32...)}
}

// result stores a host float32 result as a new buffer of dtype dt.
func (f *Fake) result(h sparse.Matrix, dt sparse.DType) (sparse.Matrix, error) {
	out, err := f.Alloc(dt, h.Rows, h.Cols)
	if err != nil {
		return sparse.Matrix{}, err
	}
	b := out.Data.(*fakeBuf)
	for i, v := range h.F32() {
		b.f32[i] = RoundTo(dt, v)
	}
	return out, nil
}

func (f *Fake) sameDType(op string, bs ...*fakeBuf) error {
	for _, b := range bs[1:] {
		if b != nil && b.dt != bs[0].dt {
			return fmt.Errorf("%w: %s: %s: operands are %v and %v", sparse.ErrDType, f.name, op, bs[0].dt, b.dt)
		}
	}
	return nil
}

// ConvForward implements sparse.ConvEngine: the CPU engine on float32
// copies, the result rounded to x's dtype (which w and bias must share).
func (f *Fake) ConvForward(m *kmap.Map, x, w, bias sparse.Matrix, opt sparse.ConvOptions) (sparse.Matrix, error) {
	xb, err := f.floatBuf(x, "x")
	if err != nil {
		return sparse.Matrix{}, err
	}
	wb, err := f.floatBuf(w, "weight")
	if err != nil {
		return sparse.Matrix{}, err
	}
	var hb sparse.Matrix
	var bb *fakeBuf
	if !bias.IsZero() {
		if bb, err = f.floatBuf(bias, "bias"); err != nil {
			return sparse.Matrix{}, err
		}
		hb = bb.hostF32(bias.Rows, bias.Cols)
	}
	if err := f.sameDType("ConvForward", xb, wb, bb); err != nil {
		return sparse.Matrix{}, err
	}
	y, err := sparse.Conv(m, xb.hostF32(x.Rows, x.Cols), wb.hostF32(w.Rows, w.Cols), hb, opt)
	if err != nil {
		return sparse.Matrix{}, err
	}
	return f.result(y, xb.dt)
}

// ConvInputGrad implements sparse.ConvEngine.
func (f *Fake) ConvInputGrad(m *kmap.Map, dy, w sparse.Matrix, opt sparse.ConvOptions) (sparse.Matrix, error) {
	db, err := f.floatBuf(dy, "dy")
	if err != nil {
		return sparse.Matrix{}, err
	}
	wb, err := f.floatBuf(w, "weight")
	if err != nil {
		return sparse.Matrix{}, err
	}
	if err := f.sameDType("ConvInputGrad", db, wb); err != nil {
		return sparse.Matrix{}, err
	}
	dx, err := sparse.ConvInputGrad(m, db.hostF32(dy.Rows, dy.Cols), wb.hostF32(w.Rows, w.Cols), opt)
	if err != nil {
		return sparse.Matrix{}, err
	}
	return f.result(dx, db.dt)
}

// ConvWeightGrad implements sparse.ConvEngine. Like the CUDA engine it
// returns the weight gradient of float16/bfloat16 inputs in float32 (the
// float32 sums, not rounded to the inputs' dtype) unless
// opt.NarrowWeightGrad is set; float32 inputs give float32.
func (f *Fake) ConvWeightGrad(m *kmap.Map, x, dy sparse.Matrix, opt sparse.ConvOptions) (sparse.Matrix, error) {
	xb, err := f.floatBuf(x, "x")
	if err != nil {
		return sparse.Matrix{}, err
	}
	db, err := f.floatBuf(dy, "dy")
	if err != nil {
		return sparse.Matrix{}, err
	}
	if err := f.sameDType("ConvWeightGrad", xb, db); err != nil {
		return sparse.Matrix{}, err
	}
	dw, err := sparse.ConvWeightGrad(m, xb.hostF32(x.Rows, x.Cols), db.hostF32(dy.Rows, dy.Cols), opt)
	if err != nil {
		return sparse.Matrix{}, err
	}
	return f.result(dw, sparse.WeightGradDType(xb.dt, opt.NarrowWeightGrad))
}

// BiasGrad implements sparse.ConvEngine; like the CUDA engine's, the
// result is float32 (the float32 column sums) for every float dtype of dy.
func (f *Fake) BiasGrad(dy sparse.Matrix) (sparse.Matrix, error) {
	db, err := f.floatBuf(dy, "dy")
	if err != nil {
		return sparse.Matrix{}, err
	}
	g, err := sparse.BiasGrad(db.hostF32(dy.Rows, dy.Cols))
	if err != nil {
		return sparse.Matrix{}, err
	}
	return f.result(g, sparse.Float32)
}

// store writes v rounded to b's dtype at i.
func (b *fakeBuf) store(i int, v float32) { b.f32[i] = RoundTo(b.dt, v) }

// Copy implements NN.
func (f *Fake) Copy(dst, src sparse.Matrix) error {
	d, err := f.buf(dst, "dst")
	if err != nil {
		return err
	}
	s, err := f.buf(src, "src")
	if err != nil {
		return err
	}
	if d.n != s.n {
		return fmt.Errorf("%w: %s: Copy of %d elements into %d", sparse.ErrShape, f.name, s.n, d.n)
	}
	if (d.dt == sparse.Int32) != (s.dt == sparse.Int32) {
		return fmt.Errorf("%w: %s: Copy from %v to %v", sparse.ErrDType, f.name, s.dt, d.dt)
	}
	if d.dt == sparse.Int32 {
		copy(d.i32, s.i32)
		return nil
	}
	for i, v := range s.f32 {
		d.store(i, v)
	}
	return nil
}

// CopyCols implements NN.
func (f *Fake) CopyCols(dst sparse.Matrix, dstCol int, src sparse.Matrix, srcCol, cols int) error {
	d, err := f.floatBuf(dst, "dst")
	if err != nil {
		return err
	}
	s, err := f.floatBuf(src, "src")
	if err != nil {
		return err
	}
	if err := checkCopyCols(dst, dstCol, src, srcCol, cols); err != nil {
		return fmt.Errorf("%s: %w", f.name, err)
	}
	for r := range dst.Rows {
		for j := range cols {
			d.store(r*dst.Cols+dstCol+j, s.f32[r*src.Cols+srcCol+j])
		}
	}
	return nil
}

// checkCopyCols validates the column ranges of CopyCols.
func checkCopyCols(dst sparse.Matrix, dstCol int, src sparse.Matrix, srcCol, cols int) error {
	if dst.Rows != src.Rows || cols < 0 || dstCol < 0 || srcCol < 0 || dstCol+cols > dst.Cols || srcCol+cols > src.Cols {
		return fmt.Errorf("%w: CopyCols of columns [%d, %d) of a %s matrix into columns [%d, %d) of a %s matrix",
			sparse.ErrShape, srcCol, srcCol+cols, src.Shape(), dstCol, dstCol+cols, dst.Shape())
	}
	return nil
}

// sameLen returns the float buffers of ms after checking they all hold
// the same number of elements.
func (f *Fake) sameLen(op string, names []string, ms ...sparse.Matrix) ([]*fakeBuf, error) {
	bs := make([]*fakeBuf, len(ms))
	for i, m := range ms {
		b, err := f.floatBuf(m, names[i])
		if err != nil {
			return nil, err
		}
		if i > 0 && b.n != bs[0].n {
			return nil, fmt.Errorf("%w: %s: %s: %s has %d elements, %s %d", sparse.ErrShape, f.name, op, names[i], b.n, names[0], bs[0].n)
		}
		bs[i] = b
	}
	return bs, nil
}

// Add implements NN.
func (f *Fake) Add(dst, a, b sparse.Matrix) error {
	bs, err := f.sameLen("Add", []string{"dst", "a", "b"}, dst, a, b)
	if err != nil {
		return err
	}
	for i := range bs[0].f32 {
		bs[0].store(i, bs[1].f32[i]+bs[2].f32[i])
	}
	return nil
}

// ReLU implements NN.
func (f *Fake) ReLU(dst, x sparse.Matrix) error {
	bs, err := f.sameLen("ReLU", []string{"dst", "x"}, dst, x)
	if err != nil {
		return err
	}
	for i, v := range bs[1].f32 {
		if !(v > 0) {
			v = 0
		}
		bs[0].store(i, v)
	}
	return nil
}

// ReLUGrad implements NN.
func (f *Fake) ReLUGrad(dx, x, dy sparse.Matrix) error {
	bs, err := f.sameLen("ReLUGrad", []string{"dx", "x", "dy"}, dx, x, dy)
	if err != nil {
		return err
	}
	for i, v := range bs[1].f32 {
		g := bs[2].f32[i]
		if !(v > 0) {
			g = 0
		}
		bs[0].store(i, g)
	}
	return nil
}

// vecBuf returns the buffer of a [1, c] Float32 matrix.
func (f *Fake) vecBuf(m sparse.Matrix, arg string, c int, f32 bool) (*fakeBuf, error) {
	b, err := f.floatBuf(m, arg)
	if err != nil {
		return nil, err
	}
	if m.Rows != 1 || m.Cols != c {
		return nil, fmt.Errorf("%w: %s: %s is %s, want [1, %d]", sparse.ErrShape, f.name, arg, m.Shape(), c)
	}
	if f32 && b.dt != sparse.Float32 {
		return nil, fmt.Errorf("%w: %s: %s is %v, want float32", sparse.ErrDType, f.name, arg, b.dt)
	}
	return b, nil
}

// NormStats implements NN.
func (f *Fake) NormStats(mean, inv, x sparse.Matrix, eps float64) error {
	xb, err := f.floatBuf(x, "x")
	if err != nil {
		return err
	}
	n, c := x.Rows, x.Cols
	mb, err := f.vecBuf(mean, "mean", c, true)
	if err != nil {
		return err
	}
	ib, err := f.vecBuf(inv, "inv", c, true)
	if err != nil {
		return err
	}
	s := make([]float64, c)
	q := make([]float64, c)
	for i := range n {
		for j := range c {
			v := float64(xb.f32[i*c+j])
			s[j] += v
			q[j] += v * v
		}
	}
	for j := range c {
		mu, vr := 0.0, 0.0
		if n > 0 {
			mu = s[j] / float64(n)
			vr = max(q[j]/float64(n)-mu*mu, 0)
		}
		mb.f32[j] = float32(mu)
		ib.f32[j] = float32(1 / math.Sqrt(vr+eps))
	}
	return nil
}

// normAffine returns the forward value x·sc + sh of NormForward with
// sc = gamma·inv and sh = beta − mean·sc, in float32 with every operation
// rounded (the explicit conversions forbid fused multiply-adds, as the
// kernels' __fmul_rn/__fadd_rn do).
func normAffine(x, gamma, beta, mean, inv float32) float32 {
	sc := float32(gamma * inv)
	sh := beta - float32(mean*sc)
	return float32(x*sc) + sh
}

// NormForward implements NN.
func (f *Fake) NormForward(y, x, gamma, beta, mean, inv sparse.Matrix) error {
	return f.normForward("NormForward", false, y, x, gamma, beta, mean, inv)
}

// NormForwardReLU implements NN.
func (f *Fake) NormForwardReLU(y, x, gamma, beta, mean, inv sparse.Matrix) error {
	return f.normForward("NormForwardReLU", true, y, x, gamma, beta, mean, inv)
}

func (f *Fake) normForward(op string, relu bool, y, x, gamma, beta, mean, inv sparse.Matrix) error {
	bs, err := f.sameLen(op, []string{"y", "x"}, y, x)
	if err != nil {
		return err
	}
	c := x.Cols
	if y.Cols != c {
		return fmt.Errorf("%w: %s: %s: y is %s, x %s", sparse.ErrShape, f.name, op, y.Shape(), x.Shape())
	}
	vs := make([]*fakeBuf, 4)
	for k, m := range []sparse.Matrix{gamma, beta, mean, inv} {
		if vs[k], err = f.vecBuf(m, [...]string{"gamma", "beta", "mean", "inv"}[k], c, k >= 2); err != nil {
			return err
		}
	}
	for i := range x.Rows {
		for j := range c {
			v := normAffine(bs[1].f32[i*c+j], vs[0].f32[j], vs[1].f32[j], vs[2].f32[j], vs[3].f32[j])
			if relu && !(v > 0) {
				v = 0
			}
			bs[0].store(i*c+j, v)
		}
	}
	return nil
}

// NormBackward implements NN.
func (f *Fake) NormBackward(dx, dgamma, dbeta, x, gamma, dy, mean, inv sparse.Matrix) error {
	return f.normBackward("NormBackward", dx, dgamma, dbeta, x, gamma, sparse.Matrix{}, dy, mean, inv)
}

// NormBackwardReLU implements NN.
func (f *Fake) NormBackwardReLU(dx, dgamma, dbeta, x, gamma, beta, dy, mean, inv sparse.Matrix) error {
	if beta.IsZero() {
		return fmt.Errorf("%w: %s: NormBackwardReLU: beta is the zero Matrix", sparse.ErrShape, f.name)
	}
	return f.normBackward("NormBackwardReLU", dx, dgamma, dbeta, x, gamma, beta, dy, mean, inv)
}

// normBackward is NormBackward, with the ReLU mask of NormForwardReLU
// applied to dy unless beta is the zero Matrix.
func (f *Fake) normBackward(op string, dx, dgamma, dbeta, x, gamma, beta, dy, mean, inv sparse.Matrix) error {
	bs, err := f.sameLen(op, []string{"x", "dy"}, x, dy)
	if err != nil {
		return err
	}
	n, c := x.Rows, x.Cols
	if dy.Cols != c {
		return fmt.Errorf("%w: %s: %s: dy is %s, x %s", sparse.ErrShape, f.name, op, dy.Shape(), x.Shape())
	}
	var dxb *fakeBuf
	if !dx.IsZero() {
		if dxb, err = f.floatBuf(dx, "dx"); err != nil {
			return err
		}
		if dx.Rows != n || dx.Cols != c {
			return fmt.Errorf("%w: %s: %s: dx is %s, x %s", sparse.ErrShape, f.name, op, dx.Shape(), x.Shape())
		}
	}
	vs := make([]*fakeBuf, 5)
	for k, m := range []sparse.Matrix{dgamma, dbeta, gamma, mean, inv} {
		if vs[k], err = f.vecBuf(m, [...]string{"dgamma", "dbeta", "gamma", "mean", "inv"}[k], c, k != 2); err != nil {
			return err
		}
	}
	var bb *fakeBuf
	if !beta.IsZero() {
		if bb, err = f.vecBuf(beta, "beta", c, false); err != nil {
			return err
		}
	}
	xb, db := bs[0], bs[1]
	// grad returns dy[i, j], or 0 where the fused ReLU blocked it.
	grad := func(i, j int) float32 {
		if bb != nil && !(normAffine(xb.f32[i*c+j], vs[2].f32[j], bb.f32[j], vs[3].f32[j], vs[4].f32[j]) > 0) {
			return 0
		}
		return db.f32[i*c+j]
	}
	sg := make([]float64, c)
	sb := make([]float64, c)
	for i := range n {
		for j := range c {
			d := float64(grad(i, j))
			xh := (float64(xb.f32[i*c+j]) - float64(vs[3].f32[j])) * float64(vs[4].f32[j])
			sb[j] += d
			sg[j] += d * xh
		}
	}
	for j := range c {
		vs[0].f32[j], vs[1].f32[j] = float32(sg[j]), float32(sb[j])
	}
	if dxb == nil || n == 0 {
		return nil
	}
	fn := float32(n)
	for i := range n {
		for j := range c {
			mu, iv, g := vs[3].f32[j], vs[4].f32[j], vs[2].f32[j]
			xh := float32((xb.f32[i*c+j] - mu) * iv)
			corr := (float32(sb[j]) + float32(xh*float32(sg[j]))) / fn
			dxb.store(i*c+j, float32(g*iv)*(grad(i, j)-corr))
		}
	}
	return nil
}

// xentArgs checks the operands of the cross-entropy kernels.
func (f *Fake) xentArgs(logits, labels, weights sparse.Matrix) (z, l, w *fakeBuf, err error) {
	if z, err = f.floatBuf(logits, "logits"); err != nil {
		return
	}
	if l, err = f.buf(labels, "labels"); err != nil {
		return
	}
	if l.dt != sparse.Int32 || labels.Rows*labels.Cols != logits.Rows {
		return nil, nil, nil, fmt.Errorf("%w: %s: labels are %s %v, want [%d, 1] int32", sparse.ErrShape, f.name, labels.Shape(), l.dt, logits.Rows)
	}
	if !weights.IsZero() {
		if w, err = f.vecBuf(weights, "class weights", logits.Cols, true); err != nil {
			return
		}
	}
	return z, l, w, nil
}

// xentWeightOf is the weight of a row with label l: 0 outside [0, k)
// (−1 marks an ignored row; callers validate labels), else w[l] or 1.
func xentWeightOf(w *fakeBuf, l int32, k int) float64 {
	if l < 0 || int(l) >= k {
		return 0
	}
	if w == nil {
		return 1
	}
	return float64(w.f32[l])
}

// XentForward implements NN.
func (f *Fake) XentForward(loss, logits, labels, weights sparse.Matrix, scale float32) error {
	z, l, w, err := f.xentArgs(logits, labels, weights)
	if err != nil {
		return err
	}
	lb, err := f.vecBuf(loss, "loss", 1, true)
	if err != nil {
		return err
	}
	k := logits.Cols
	sum := 0.0
	for i := range logits.Rows {
		li := l.i32[i]
		wt := xentWeightOf(w, li, k)
		if wt == 0 {
			continue
		}
		row := z.f32[i*k : i*k+k]
		m, lse := rowLSE(row)
		sum += wt * (m + lse - float64(row[li]))
	}
	lb.f32[0] = float32(sum * float64(scale))
	return nil
}

// rowLSE returns the maximum of row and log Σ exp(row − max).
func rowLSE(row []float32) (m, lse float64) {
	m = math.Inf(-1)
	for _, v := range row {
		m = max(m, float64(v))
	}
	s := 0.0
	for _, v := range row {
		s += math.Exp(float64(v) - m)
	}
	return m, math.Log(s)
}

// XentBackward implements NN.
func (f *Fake) XentBackward(dz, logits, labels, weights sparse.Matrix, scale float32) error {
	z, l, w, err := f.xentArgs(logits, labels, weights)
	if err != nil {
		return err
	}
	db, err := f.floatBuf(dz, "dz")
	if err != nil {
		return err
	}
	if dz.Rows != logits.Rows || dz.Cols != logits.Cols {
		return fmt.Errorf("%w: %s: dz is %s, logits %s", sparse.ErrShape, f.name, dz.Shape(), logits.Shape())
	}
	k := logits.Cols
	for i := range logits.Rows {
		li := l.i32[i]
		wt := xentWeightOf(w, li, k)
		row := z.f32[i*k : i*k+k]
		if wt == 0 {
			for j := range row {
				db.store(i*k+j, 0)
			}
			continue
		}
		m, lse := rowLSE(row)
		s := float64(scale) * wt
		for j, v := range row {
			p := math.Exp(float64(v) - m - lse)
			if j == int(li) {
				p--
			}
			db.store(i*k+j, float32(s*p))
		}
	}
	return nil
}

// AdamStep implements NN.
func (f *Fake) AdamStep(w, g, m, v sparse.Matrix, lr, beta1, beta2, eps, corr1, corr2, gradScale, l2 float32) error {
	bs, err := f.sameLen("AdamStep", []string{"w", "g", "m", "v"}, w, g, m, v)
	if err != nil {
		return err
	}
	for k, i := range []int{0, 2, 3} {
		if bs[i].dt != sparse.Float32 {
			return fmt.Errorf("%w: %s: AdamStep: %s is %v, want float32", sparse.ErrDType, f.name, [...]string{"w", "m", "v"}[k], bs[i].dt)
		}
	}
	wb, gb, mb, vb := bs[0], bs[1], bs[2], bs[3]
	for i := range wb.f32 {
		wi := wb.f32[i]
		gi := gb.f32[i]*gradScale + l2*wi
		mi := beta1*mb.f32[i] + (1-beta1)*gi
		vi := beta2*vb.f32[i] + (1-beta2)*(gi*gi)
		mb.f32[i], vb.f32[i] = mi, vi
		wb.f32[i] = wi + (-lr*(mi*corr1))/(float32(math.Sqrt(float64(vi*corr2)))+eps)
	}
	return nil
}

// AdamSteps implements NN: every operand is checked before any parameter
// is updated, then each is updated as by AdamStep.
func (f *Fake) AdamSteps(ws, gs, ms, vs []sparse.Matrix, lr, beta1, beta2, eps, corr1, corr2, gradScale, l2 float32) error {
	if len(gs) != len(ws) || len(ms) != len(ws) || len(vs) != len(ws) {
		return fmt.Errorf("%w: %s: AdamSteps of %d parameters, %d gradients, %d and %d moments", sparse.ErrShape, f.name, len(ws), len(gs), len(ms), len(vs))
	}
	for i := range ws {
		bs, err := f.sameLen("AdamSteps", []string{"w", "g", "m", "v"}, ws[i], gs[i], ms[i], vs[i])
		if err != nil {
			return fmt.Errorf("parameter %d: %w", i, err)
		}
		for k, j := range []int{0, 2, 3} {
			if bs[j].dt != sparse.Float32 {
				return fmt.Errorf("%w: %s: AdamSteps: parameter %d: %s is %v, want float32", sparse.ErrDType, f.name, i, [...]string{"w", "m", "v"}[k], bs[j].dt)
			}
		}
	}
	for i := range ws {
		if err := f.AdamStep(ws[i], gs[i], ms[i], vs[i], lr, beta1, beta2, eps, corr1, corr2, gradScale, l2); err != nil {
			return fmt.Errorf("parameter %d: %w", i, err)
		}
	}
	return nil
}

// NonFinite implements NN.
func (f *Fake) NonFinite(flag sparse.Matrix, ms ...sparse.Matrix) error {
	fb, err := f.vecBuf(flag, "flag", 1, true)
	if err != nil {
		return err
	}
	for k, m := range ms {
		b, err := f.floatBuf(m, fmt.Sprintf("matrix %d", k))
		if err != nil {
			return err
		}
		for _, v := range b.f32 {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				fb.f32[0] = 1
				break
			}
		}
	}
	return nil
}

// ArgmaxRows implements NN.
func (f *Fake) ArgmaxRows(dst, x sparse.Matrix) error {
	xb, err := f.floatBuf(x, "x")
	if err != nil {
		return err
	}
	db, err := f.buf(dst, "dst")
	if err != nil {
		return err
	}
	if db.dt != sparse.Int32 || db.n != x.Rows {
		return fmt.Errorf("%w: %s: ArgmaxRows into %s %v, want [%d, 1] int32", sparse.ErrShape, f.name, dst.Shape(), db.dt, x.Rows)
	}
	k := x.Cols
	for i := range x.Rows {
		best := 0
		for j := 1; j < k; j++ {
			if xb.f32[i*k+j] > xb.f32[i*k+best] {
				best = j
			}
		}
		db.i32[i] = int32(best)
	}
	return nil
}

var (
	_ Memory = (*Fake)(nil)
	_ NN     = (*Fake)(nil)
)

// host copies a float buffer to a float32 host matrix of the same shape.
func (f *Fake) host(m sparse.Matrix, arg string) (sparse.Matrix, *fakeBuf, error) {
	b, err := f.floatBuf(m, arg)
	if err != nil {
		return sparse.Matrix{}, nil, err
	}
	return b.hostF32(m.Rows, m.Cols), b, nil
}

// PoolForward implements sparse.PoolEngine with the CPU primitives.
func (f *Fake) PoolForward(m *kmap.Map, x sparse.Matrix, mode sparse.PoolMode) (y, argmax sparse.Matrix, err error) {
	hx, xb, err := f.host(x, "x")
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	hy, ha, err := sparse.Pool(m, hx, mode)
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	if y, err = f.result(hy, xb.dt); err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	if !ha.IsZero() {
		if argmax, err = f.ToDeviceAs(ha, sparse.Int32); err != nil {
			f.Free(y)
			return sparse.Matrix{}, sparse.Matrix{}, err
		}
	}
	return y, argmax, nil
}

// PoolGrad implements sparse.PoolEngine with the CPU primitives.
func (f *Fake) PoolGrad(m *kmap.Map, dy, argmax sparse.Matrix, mode sparse.PoolMode) (sparse.Matrix, error) {
	hd, db, err := f.host(dy, "dy")
	if err != nil {
		return sparse.Matrix{}, err
	}
	var ha sparse.Matrix
	if !argmax.IsZero() {
		ab, err := f.buf(argmax, "argmax")
		if err != nil {
			return sparse.Matrix{}, err
		}
		ha = sparse.Matrix{Rows: argmax.Rows, Cols: argmax.Cols, Data: append([]int32(nil), ab.i32...)}
	}
	dx, err := sparse.PoolGrad(m, hd, ha, mode)
	if err != nil {
		return sparse.Matrix{}, err
	}
	return f.result(dx, db.dt)
}

// GridSampleForward implements sparse.SampleEngine with the CPU
// primitives.
func (f *Fake) GridSampleForward(p *sparse.SamplePlan, feats sparse.Matrix) (sparse.Matrix, error) {
	hf, fb, err := f.host(feats, "feats")
	if err != nil {
		return sparse.Matrix{}, err
	}
	out, err := sparse.GridSample(p, hf)
	if err != nil {
		return sparse.Matrix{}, err
	}
	return f.result(out, fb.dt)
}

// GridSampleGrad implements sparse.SampleEngine with the CPU primitives.
func (f *Fake) GridSampleGrad(p *sparse.SamplePlan, feats, dy sparse.Matrix) (dFeats, dPoints sparse.Matrix, err error) {
	hd, db, err := f.host(dy, "dy")
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	var hf sparse.Matrix
	if !feats.IsZero() {
		if hf, _, err = f.host(feats, "feats"); err != nil {
			return sparse.Matrix{}, sparse.Matrix{}, err
		}
	}
	hdf, hdp, err := sparse.GridSampleGrad(p, hf, hd)
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	if dFeats, err = f.result(hdf, db.dt); err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	if !hdp.IsZero() {
		if dPoints, err = f.result(hdp, sparse.Float32); err != nil {
			f.Free(dFeats)
			return sparse.Matrix{}, sparse.Matrix{}, err
		}
	}
	return dFeats, dPoints, nil
}

var (
	_ sparse.PoolEngine   = (*Fake)(nil)
	_ sparse.SampleEngine = (*Fake)(nil)
)
