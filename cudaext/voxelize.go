//go:build cudaext

package cudaext

// Voxelisation on the GPU (kernels/voxelize.cu) with the semantics of
// sparse.Voxelize: same voxels, order, point → voxel index, counts and
// float64-accumulated mean features.

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// voxOpts mirrors fgv::Opts.
type voxOpts struct {
	Size, Origin [3]float64
	Ext          extArg
	Given, Drop  int32
}

func (a *voxOpts) argBytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(a)), unsafe.Sizeof(*a))
}

// Voxelization is the device result of Engine.Voxelize (see
// sparse.Voxelization): every matrix is on the device.
type Voxelization struct {
	// Coords holds the M distinct voxels [M, 4] Int32, sorted by
	// (batch, x, y, z).
	Coords sparse.Matrix
	// Feats holds the mean features [M, C] (the dtype of the input
	// features), or the zero Matrix without features.
	Feats sparse.Matrix
	// Index is every point's voxel row [P, 1] Int32, −1 for dropped points.
	Index sparse.Matrix
	// Counts is the number of points of every voxel [M, 1] Int32.
	Counts sparse.Matrix
	// Extent is the grid of the voxels (given or derived).
	Extent grid.Extent
}

// Free releases the result's device matrices.
func (v *Voxelization) Free() {
	for _, m := range []sparse.Matrix{v.Coords, v.Feats, v.Index, v.Counts} {
		if b, ok := m.Data.(*Buffer); ok {
			b.Free()
		}
	}
}

// Voxelize groups points ([P, 3] Float32, device or host []float32) into
// voxels and mean-pools their features (device [P, C] Float32, Float16 or
// BFloat16, or the zero Matrix), as sparse.Voxelize does, on the GPU. The
// batch index of every point comes from batch ([P, 1] Int32, device or
// host), or from opt.Batch when batch is the zero Matrix, else it is 0.
// Errors are sparse.Voxelize's, naming the first offending point.
func (e *Engine) Voxelize(points, feats, batch sparse.Matrix, opt sparse.VoxelizeOptions) (*Voxelization, error) {
	const op = "Voxelize"
	if points.Cols != 3 && !(points.Rows == 0 && points.Cols == 0) {
		return nil, fmt.Errorf("%w: cudaext: %s: points are %s, want [P, 3]", sparse.ErrShape, op, points.Shape())
	}
	p := points.Rows
	if p > math.MaxInt32-1 {
		return nil, fmt.Errorf("%w: cudaext: %s: %d points exceed 32-bit indices", sparse.ErrIndexOverflow, op, p)
	}
	if err := checkVoxOpts(op, &opt); err != nil {
		return nil, err
	}
	var fb *Buffer
	if !feats.IsZero() {
		var err error
		if fb, err = e.buffer(feats, "feats"); err != nil {
			return nil, fmt.Errorf("cudaext: %s: %w", op, err)
		}
		if feats.Rows != p {
			return nil, &sparse.ShapeError{Op: op, Arg: "feats", Want: fmt.Sprintf("[%d, C]", p), Got: feats.Shape()}
		}
		if _, err := meanKernel(fb.dtype); err != nil {
			return nil, err
		}
	}
	if batch.IsZero() && opt.Batch != nil {
		batch = sparse.Matrix{Rows: len(opt.Batch), Cols: 1, Data: opt.Batch}
	}
	if !batch.IsZero() && (batch.Rows != p || batch.Cols != 1) {
		return nil, fmt.Errorf("%w: cudaext: %s: %d batch indices (%s) for %d points", sparse.ErrShape, op, batch.Rows*batch.Cols, batch.Shape(), p)
	}
	res := &Voxelization{}
	err := e.d.do(func() error {
		return e.voxelize(op, points, fb, feats.Cols, batch, opt, res)
	})
	if err != nil {
		res.Free()
		return nil, err
	}
	return res, nil
}

func checkVoxOpts(op string, opt *sparse.VoxelizeOptions) error {
	for a := range 3 {
		if s := opt.VoxelSize[a]; !(s > 0) || math.IsInf(s, 0) {
			return fmt.Errorf("%w: cudaext: %s: voxel size %v must be positive and finite on every axis", sparse.ErrOutOfRange, op, opt.VoxelSize)
		}
		if o := opt.Origin[a]; math.IsNaN(o) || math.IsInf(o, 0) {
			return fmt.Errorf("%w: cudaext: %s: origin %v must be finite", sparse.ErrOutOfRange, op, opt.Origin)
		}
	}
	if opt.Extent != (grid.Extent{}) {
		if err := opt.Extent.Validate(); err != nil {
			return fmt.Errorf("cudaext: %s: %w", op, err)
		}
	}
	return nil
}

func meanKernel(dt sparse.DType) (string, error) {
	if s, ok := floatSuffix(dt); ok {
		return "vox_mean_" + s, nil
	}
	return "", fmt.Errorf("%w: cudaext: Voxelize pools Float32, Float16 or BFloat16 features, got %v", sparse.ErrDType, dt)
}

// floatsOn returns a [R, C] Float32 matrix (device, or host []float32) as
// a device array. Worker only.
func (e *Engine) floatsOn(op, arg string, m sparse.Matrix) (deviceCoords, error) {
	if h, ok := m.Data.([]float32); ok {
		if m.Rows < 0 || len(h) != m.Rows*m.Cols {
			return deviceCoords{}, fmt.Errorf("%w: cudaext: %s: %s is %s with %d elements", sparse.ErrShape, op, arg, m.Shape(), len(h))
		}
		if len(h) == 0 {
			return deviceCoords{ptr: e.d.zeroPage}, nil
		}
		tmp, err := e.d.allocTemp(int64(len(h)) * 4)
		if err != nil {
			return deviceCoords{}, err
		}
		if err := uploadTo(e.d, tmp.ptr, h); err != nil {
			e.d.freeTemp(tmp)
			return deviceCoords{}, err
		}
		return deviceCoords{ptr: tmp.ptr, n: m.Rows, tmp: tmp}, nil
	}
	b, err := e.buffer(m, arg)
	if err != nil {
		return deviceCoords{}, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	if b.dtype != sparse.Float32 {
		return deviceCoords{}, fmt.Errorf("%w: cudaext: %s: %s is %v, want Float32", sparse.ErrDType, op, arg, b.dtype)
	}
	return deviceCoords{ptr: e.d.addr(b.ptr), n: m.Rows}, nil
}

// voxelize is Voxelize on the worker.
func (e *Engine) voxelize(op string, points sparse.Matrix, fb *Buffer, C int, batch sparse.Matrix, opt sparse.VoxelizeOptions, res *Voxelization) error {
	d := e.d
	pts, err := e.floatsOn(op, "points", points)
	if err != nil {
		return err
	}
	defer pts.release(d)
	P := int64(points.Rows)
	bptr := devPtr(0)
	if !batch.IsZero() {
		bc, err := e.indexOn(op, batch)
		if err != nil {
			return err
		}
		defer bc.release(d)
		bptr = bc.ptr
	}
	given := opt.Extent != (grid.Extent{})
	o := &voxOpts{Size: opt.VoxelSize, Origin: opt.Origin}
	if given {
		o.Ext, o.Given = *extOf(opt.Extent), 1
	}
	if opt.DropOutside {
		o.Drop = 1
	}

	// Pass 1: validate, find the largest kept coordinates.
	hi, err := d.allocTemp(16)
	if err != nil {
		return err
	}
	defer d.freeTemp(hi)
	if err := d.fillI32(hi.ptr, -1, 4); err != nil {
		return err
	}
	st, err := d.statusOf(func(status devPtr) error {
		if P == 0 {
			return nil
		}
		g, b := d.elementwise(P)
		return d.launch("vox_check", g, b, 0, pts.ptr, bptr, P, o, status, hi.ptr)
	})
	if err != nil {
		return err
	}
	if st[stFlags]&flagRange != 0 {
		return e.voxelError(op, pts.ptr, bptr, int64(st[stBadRow]), &opt, given)
	}
	h, err := download[int32](d, hi.ptr, 4)
	if err != nil {
		return err
	}
	ext := opt.Extent
	if !given {
		ext = grid.Extent{Batch: 1, X: 1, Y: 1, Z: 1}
		if h[0] >= 0 {
			ext = grid.Extent{Batch: int(h[0]) + 1, X: int(h[1]) + 1, Y: int(h[2]) + 1, Z: int(h[3]) + 1}
		}
		if err := ext.Validate(); err != nil {
			return fmt.Errorf("cudaext: %s: derived grid: %w", op, err)
		}
	}
	res.Extent = ext
	o.Ext = *extOf(ext)

	// Pass 2: keys (dropped points: sentinel = number of sites, sorted
	// last), stable sort, runs.
	sites := ext.Sites()
	sentinel := sites
	nbits := bitLen(sentinel)
	newI32 := func(n int) (*Buffer, error) { return d.newBuffer(sparse.Int32, n) }
	if res.Index.Data, err = newI32(int(P)); err != nil {
		return err
	}
	res.Index.Rows, res.Index.Cols = int(P), 1
	if P == 0 {
		return e.voxEmpty(res, fb, C)
	}
	keys, err := d.allocTemp(8 * P)
	if err != nil {
		return err
	}
	defer d.freeTemp(keys)
	order, err := d.allocTemp(4 * P)
	if err != nil {
		return err
	}
	defer d.freeTemp(order)
	g, b := d.elementwise(P)
	if err := d.launch("vox_keys", g, b, 0, pts.ptr, bptr, P, o, sentinel, keys.ptr); err != nil {
		return err
	}
	if err := d.radixSort(keys.ptr, order.ptr, P, true, nbits, true); err != nil {
		return err
	}
	flags, err := d.allocTemp(4 * (P + 1))
	if err != nil {
		return err
	}
	defer d.freeTemp(flags)
	if err := d.launch("sort_unique_flags_u64", g, b, 0, keys.ptr, P, sentinel, flags.ptr); err != nil {
		return err
	}
	total := flags.ptr + devPtr(4*P)
	if err := d.scan(scanI32, flags.ptr, flags.ptr, P, total); err != nil {
		return err
	}
	mm, err := download[int32](d, total, 1)
	if err != nil {
		return err
	}
	M := int(mm[0])
	if M == 0 {
		if err := d.fillI32(res.Index.Data.(*Buffer).ptr, -1, P); err != nil {
			return err
		}
		return e.voxEmpty(res, fb, C)
	}
	coords, err := newI32(4 * M)
	if err != nil {
		return err
	}
	res.Coords = sparse.Matrix{Rows: M, Cols: 4, Data: coords}
	counts, err := newI32(M)
	if err != nil {
		return err
	}
	res.Counts = sparse.Matrix{Rows: M, Cols: 1, Data: counts}
	starts, err := d.allocTemp(4 * int64(M+1))
	if err != nil {
		return err
	}
	defer d.freeTemp(starts)
	index := res.Index.Data.(*Buffer)
	if err := d.fillI32(index.ptr, -1, P); err != nil {
		return err
	}
	if err := d.launch("vox_assign", g, b, 0, keys.ptr, order.ptr, flags.ptr, P, sentinel, extOf(ext), index.ptr, starts.ptr, coords.ptr); err != nil {
		return err
	}
	gm, bm := d.elementwise(int64(M))
	if err := d.launch("vox_counts", gm, bm, 0, starts.ptr, int64(M), counts.ptr); err != nil {
		return err
	}
	if fb == nil {
		return nil
	}
	name, _ := meanKernel(fb.dtype)
	out, err := e.newOutput(fb.dtype, M*C)
	if err != nil {
		return err
	}
	res.Feats = sparse.Matrix{Rows: M, Cols: C, Data: out}
	if M*C == 0 {
		return nil
	}
	gf, bf := d.elementwise(int64(M) * int64(C))
	return d.launch(name, gf, bf, 0, fb.ptr, int64(C), order.ptr, starts.ptr, int64(M), out.ptr)
}

// voxEmpty fills the results of a voxelisation without voxels.
func (e *Engine) voxEmpty(res *Voxelization, fb *Buffer, C int) error {
	d := e.d
	c, err := d.newBuffer(sparse.Int32, 0)
	if err != nil {
		return err
	}
	res.Coords = sparse.Matrix{Rows: 0, Cols: 4, Data: c}
	n, err := d.newBuffer(sparse.Int32, 0)
	if err != nil {
		return err
	}
	res.Counts = sparse.Matrix{Rows: 0, Cols: 1, Data: n}
	if fb != nil {
		f, err := d.newBuffer(fb.dtype, 0)
		if err != nil {
			return err
		}
		res.Feats = sparse.Matrix{Rows: 0, Cols: C, Data: f}
	}
	return nil
}

// voxelError rebuilds sparse.Voxelize's message for the first bad point.
func (e *Engine) voxelError(op string, pts, bptr devPtr, i int64, opt *sparse.VoxelizeOptions, given bool) error {
	d := e.d
	pt, err := download[float32](d, pts+devPtr(12*i), 3)
	if err != nil {
		return err
	}
	b := int32(0)
	if bptr != 0 {
		bb, err := download[int32](d, bptr+devPtr(4*i), 1)
		if err != nil {
			return err
		}
		b = bb[0]
	}
	msg := voxelReason(pt, b, i, opt, given)
	return fmt.Errorf("%w: cudaext: %s: %s", sparse.ErrOutOfRange, op, msg)
}

// voxelReason mirrors the messages of sparse.Voxelize for a bad point.
func voxelReason(pt []float32, b int32, i int64, opt *sparse.VoxelizeOptions, given bool) string {
	if b < 0 {
		return fmt.Sprintf("point %d has negative batch index %d", i, b)
	}
	for a := range 3 {
		x := float64(pt[a])
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Sprintf("point %d (%v, %v, %v) is not finite", i, pt[0], pt[1], pt[2])
		}
	}
	where := "has a negative voxel coordinate or one past 2^31 − 1"
	if given {
		where = fmt.Sprintf("is outside %v", opt.Extent)
	}
	return fmt.Sprintf("point %d (%v, %v, %v) in batch %d falls in a voxel that %s (set DropOutside to drop such points)", i, pt[0], pt[1], pt[2], b, where)
}
