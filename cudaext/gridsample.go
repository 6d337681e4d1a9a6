//go:build cudaext

package cudaext

// Grid sampling on the GPU (kernels/gridsample.cu), with the semantics of
// sparse.NewSamplePlan, sparse.GridSample and sparse.GridSampleGrad.
//
// A SamplePlan lives on the device: corner rows idx [M, K] int32 and final
// weights w [M, K] float64 (K = 8 trilinear, 1 nearest), plus the query
// points for the point gradient. Engine.NewSamplePlan builds one from
// device coordinates and points (GPU hash table, float64 arithmetic equal
// to the host plan's bit for bit); host plans (*sparse.SamplePlan, used by
// the package-level sparse.GridSample on device features) are uploaded once
// and cached until the host plan is garbage collected.
//
// The feature gradient gathers through a reverse CSR (corner entries
// grouped by feature row, built by a stable radix sort of the rows, so each
// row's entries ascend in m·K + k as on the host): one thread per
// (row, channel) sums in that order — deterministic, no atomics.

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"weak"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

var _ sparse.SampleEngine = (*Engine)(nil)

// SamplePlan is a grid-sample plan on the device of one engine (see
// sparse.SamplePlan for the semantics). It is immutable and safe for
// concurrent use; Free releases it early (the garbage collector is the
// fallback).
type SamplePlan struct {
	e        *Engine
	mode     sparse.SampleMode
	m, n, k  int
	perBatch int
	ext      grid.Extent
	idx      *Buffer // [M·K] Int32
	w        *Buffer // [M·K] float64
	pts      *Buffer // [M·3] Float32 or float64 (trilinear only)

	revMu   sync.Mutex
	revSeg  *Buffer // [N+1] Int32
	revEnt  *Buffer // [M·K] Int32 (the first revSeg[N] are entries)
	haveRev bool
}

// Mode returns the sampling mode.
func (p *SamplePlan) Mode() sparse.SampleMode { return p.mode }

// Queries returns the number of query points M.
func (p *SamplePlan) Queries() int { return p.m }

// Voxels returns the number of feature rows N.
func (p *SamplePlan) Voxels() int { return p.n }

// Corners returns the number of corners per query: 8 trilinear, 1 nearest.
func (p *SamplePlan) Corners() int { return p.k }

// Free releases the plan's device memory.
func (p *SamplePlan) Free() {
	for _, b := range []*Buffer{p.idx, p.w, p.pts, p.revSeg, p.revEnt} {
		b.Free()
	}
}

// Host downloads the plan's corner rows [M·K] and weights [M·K], comparable
// with sparse.SamplePlan's Indices and Weights.
func (p *SamplePlan) Host() (idx []int32, w []float64, err error) {
	err = p.e.d.do(func() error {
		if err := p.live(); err != nil {
			return err
		}
		if idx, err = download[int32](p.e.d, p.idx.ptr, p.m*p.k); err != nil {
			return err
		}
		w, err = download[float64](p.e.d, p.w.ptr, p.m*p.k)
		return err
	})
	return idx, w, err
}

func (p *SamplePlan) live() error {
	if p.idx.freed.Load() || p.w.freed.Load() {
		return fmt.Errorf("%w: cudaext: SamplePlan used after Free", ErrFreed)
	}
	return nil
}

func modeCorners(mode sparse.SampleMode) int {
	if mode == sparse.Nearest {
		return 1
	}
	return 8
}

// NewSamplePlan plans sampling the sparse voxel grid coords ([N, 4] Int32,
// device or host; inside ext, no duplicates) at the query points [B·L, 3]
// (device Float32, or host float32/float64), L = perBatch and B =
// ext.Batch, as sparse.NewSamplePlan does, on the GPU. Errors are
// sparse.NewSamplePlan's (shapes, range, duplicates, non-finite points),
// naming the first offending row or point.
func (e *Engine) NewSamplePlan(coords sparse.Matrix, ext grid.Extent, points sparse.Matrix, perBatch int, mode sparse.SampleMode) (*SamplePlan, error) {
	const op = "NewSamplePlan"
	if err := mode.Valid(); err != nil {
		return nil, err
	}
	if err := ext.Validate(); err != nil {
		return nil, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	if points.Cols != 3 && !(points.Rows == 0 && points.Cols == 0) {
		return nil, &sparse.ShapeError{Op: op, Arg: "points", Want: "[M, 3]", Got: points.Shape()}
	}
	M := points.Rows
	if perBatch < 0 || (M > 0 && perBatch == 0) {
		return nil, fmt.Errorf("%w: cudaext: %s: %d points per batch", sparse.ErrShape, op, perBatch)
	}
	if M > 0 && (M%perBatch != 0 || M/perBatch != ext.Batch) {
		return nil, fmt.Errorf("%w: cudaext: %s: %d points are not %d batches of %d (the extent's batch count)", sparse.ErrShape, op, M, ext.Batch, perBatch)
	}
	if int64(M)*8 > math.MaxInt32 {
		return nil, fmt.Errorf("%w: cudaext: %s: %d points overflow 32-bit corner indices", sparse.ErrIndexOverflow, op, M)
	}
	K := modeCorners(mode)
	p := &SamplePlan{e: e, mode: mode, m: M, k: K, perBatch: perBatch, ext: ext}
	err := e.d.do(func() error {
		d := e.d
		c, err := e.coordsOn(op, coords)
		if err != nil {
			return err
		}
		defer c.release(d)
		p.n = c.n
		pts, f64, err := e.pointsOn(op, points)
		if err != nil {
			return err
		}
		defer pts.release(d)
		if err := d.checkPoints(op, pts.ptr, int64(M), f64); err != nil {
			return err
		}
		t, err := d.hashCoords(c.ptr, int64(c.n), ext, 0, false, op+": ")
		if err != nil {
			return err
		}
		defer d.freeTable(t)
		if err := p.alloc(d, f64); err != nil {
			return err
		}
		if M == 0 {
			return nil
		}
		if p.pts != nil {
			if err := memcpyDtoD(p.pts.ptr, pts.ptr, int64(M)*3*int64(p.pts.dtype.Size()), d.stream); err != nil {
				return err
			}
		}
		suf := "f32"
		if f64 {
			suf = "f64"
		}
		name := "gs_plan_trilinear_" + suf
		if mode == sparse.Nearest {
			name = "gs_plan_nearest_" + suf
		}
		g, b := d.elementwise(int64(M))
		return d.launch(name, g, b, 0, pts.ptr, int64(M), int64(max(perBatch, 1)), extOf(ext), t.arg(), p.idx.ptr, p.w.ptr)
	})
	if err != nil {
		p.Free()
		return nil, err
	}
	return p, nil
}

// alloc allocates the plan's tables. Worker only.
func (p *SamplePlan) alloc(d *Device, f64 bool) error {
	var err error
	if p.idx, err = d.newBuffer(sparse.Int32, p.m*p.k); err != nil {
		return err
	}
	if p.w, err = d.newBuffer(sparse.Float64, p.m*p.k); err != nil {
		return err
	}
	if p.mode == sparse.Trilinear {
		dt := sparse.Float32
		if f64 {
			dt = sparse.Float64
		}
		if p.pts, err = d.newBuffer(dt, 3*p.m); err != nil {
			return err
		}
	}
	return nil
}

// pointsOn returns the points [M, 3] as a device array and whether they
// are float64 (host float64 points are uploaded as they are). Worker only.
func (e *Engine) pointsOn(op string, m sparse.Matrix) (deviceCoords, bool, error) {
	if h, ok := m.Data.([]float64); ok {
		if len(h) != 3*m.Rows {
			return deviceCoords{}, false, fmt.Errorf("%w: cudaext: %s: points are %s with %d elements", sparse.ErrShape, op, m.Shape(), len(h))
		}
		if len(h) == 0 {
			return deviceCoords{ptr: e.d.zeroPage}, true, nil
		}
		tmp, err := e.d.allocTemp(int64(len(h)) * 8)
		if err != nil {
			return deviceCoords{}, false, err
		}
		if err := uploadTo(e.d, tmp.ptr, h); err != nil {
			e.d.freeTemp(tmp)
			return deviceCoords{}, false, err
		}
		return deviceCoords{ptr: tmp.ptr, n: m.Rows, tmp: tmp}, true, nil
	}
	c, err := e.floatsOn(op, "points", m)
	return c, false, err
}

// checkPoints reports the first non-finite coordinate of n points.
func (d *Device) checkPoints(op string, pts devPtr, n int64, f64 bool) error {
	if n == 0 {
		return nil
	}
	suf := "f32"
	if f64 {
		suf = "f64"
	}
	st, err := d.statusOf(func(status devPtr) error {
		g, b := d.elementwise(3 * n)
		return d.launch("gs_check_"+suf, g, b, 0, pts, 3*n, status)
	})
	if err != nil {
		return err
	}
	if st[stFlags]&flagAux == 0 {
		return nil
	}
	j := int64(st[stAux])
	var v float64
	if f64 {
		x, err := download[float64](d, pts+devPtr(8*j), 1)
		if err != nil {
			return err
		}
		v = x[0]
	} else {
		x, err := download[float32](d, pts+devPtr(4*j), 1)
		if err != nil {
			return err
		}
		v = float64(x[0])
	}
	return fmt.Errorf("%w: cudaext: %s: point %d has coordinate %c = %v", sparse.ErrNotFinite, op, j/3, "xyz"[j%3], v)
}

// hostPlans caches the device copies of host plans.
var hostPlans struct {
	mu sync.Mutex
	m  map[hostPlanKey]*SamplePlan
}

type hostPlanKey struct {
	e *Engine
	p weak.Pointer[sparse.SamplePlan]
}

// planFor returns the device copy of the host plan hp, uploading it on
// first use. Worker only.
func (e *Engine) planFor(hp *sparse.SamplePlan) (*SamplePlan, error) {
	key := hostPlanKey{e, weak.Make(hp)}
	hostPlans.mu.Lock()
	p := hostPlans.m[key]
	hostPlans.mu.Unlock()
	if p != nil {
		return p, nil
	}
	d := e.d
	p = &SamplePlan{e: e, mode: hp.Mode(), m: hp.Queries(), n: hp.Voxels(), k: hp.Corners(), perBatch: hp.PerBatch()}
	if err := p.alloc(d, true); err != nil {
		p.Free()
		return nil, err
	}
	if err := uploadTo(d, p.idx.ptr, hp.Indices()); err != nil {
		p.Free()
		return nil, err
	}
	if err := uploadTo(d, p.w.ptr, hp.Weights()); err != nil {
		p.Free()
		return nil, err
	}
	if p.pts != nil {
		if err := uploadTo(d, p.pts.ptr, hp.Points()); err != nil {
			p.Free()
			return nil, err
		}
	}
	hostPlans.mu.Lock()
	if hostPlans.m == nil {
		hostPlans.m = map[hostPlanKey]*SamplePlan{}
	}
	hostPlans.m[key] = p
	hostPlans.mu.Unlock()
	runtime.AddCleanup(hp, func(k hostPlanKey) {
		hostPlans.mu.Lock()
		delete(hostPlans.m, k)
		hostPlans.mu.Unlock()
	}, key)
	return p, nil
}

// GridSampleForward implements sparse.SampleEngine for a host plan and
// device features: out [M, C] = Σ_k W[m, k]·feats[Idx[m, k]].
func (e *Engine) GridSampleForward(hp *sparse.SamplePlan, feats sparse.Matrix) (sparse.Matrix, error) {
	if hp == nil {
		return sparse.Matrix{}, fmt.Errorf("%w: cudaext: GridSample: nil plan", sparse.ErrShape)
	}
	var out sparse.Matrix
	err := e.d.do(func() error {
		p, err := e.planFor(hp)
		if err != nil {
			return err
		}
		out, err = e.sample(p, feats)
		return err
	})
	return out, err
}

// GridSampleGrad implements sparse.SampleEngine for a host plan and device
// data: dFeats [N, C] and, when feats is not the zero Matrix, dPoints
// [M, 3] as a device Float32 matrix (the device has no float64 matrices).
func (e *Engine) GridSampleGrad(hp *sparse.SamplePlan, feats, dy sparse.Matrix) (dFeats, dPoints sparse.Matrix, err error) {
	if hp == nil {
		return sparse.Matrix{}, sparse.Matrix{}, fmt.Errorf("%w: cudaext: GridSampleGrad: nil plan", sparse.ErrShape)
	}
	err = e.d.do(func() error {
		p, err := e.planFor(hp)
		if err != nil {
			return err
		}
		dFeats, dPoints, err = e.sampleGrad(p, feats, dy)
		return err
	})
	return dFeats, dPoints, err
}

// Sample samples feats [N, C] (Float32, Float16 or BFloat16 on the plan's
// device) at the plan's points: [M, C] of feats' dtype.
func (p *SamplePlan) Sample(feats sparse.Matrix) (sparse.Matrix, error) {
	var out sparse.Matrix
	err := p.e.d.do(func() (err error) {
		out, err = p.e.sample(p, feats)
		return err
	})
	return out, err
}

// Grad returns the gradients of Sample given dy [M, C]: dFeats [N, C] and,
// unless feats is the zero Matrix, dPoints [M, 3] Float32 (zero for
// nearest sampling); see sparse.GridSampleGrad.
func (p *SamplePlan) Grad(feats, dy sparse.Matrix) (dFeats, dPoints sparse.Matrix, err error) {
	err = p.e.d.do(func() (err error) {
		dFeats, dPoints, err = p.e.sampleGrad(p, feats, dy)
		return err
	})
	return dFeats, dPoints, err
}

func sampleSuffix(dt sparse.DType) (string, error) {
	s, err := poolSuffix(dt)
	if err != nil {
		return "", fmt.Errorf("%w: cudaext: grid sampling of %v data", sparse.ErrDType, dt)
	}
	return s, nil
}

// sample is the forward pass. Worker only.
func (e *Engine) sample(p *SamplePlan, feats sparse.Matrix) (sparse.Matrix, error) {
	if err := p.live(); err != nil {
		return sparse.Matrix{}, err
	}
	fb, err := e.buffer(feats, "feats")
	if err != nil {
		return sparse.Matrix{}, err
	}
	if feats.Rows != p.n {
		return sparse.Matrix{}, &sparse.ShapeError{Op: "GridSample", Arg: "feats", Want: fmt.Sprintf("[%d, C]", p.n), Got: feats.Shape()}
	}
	suf, err := sampleSuffix(fb.dtype)
	if err != nil {
		return sparse.Matrix{}, err
	}
	C := feats.Cols
	out, err := e.newOutput(fb.dtype, p.m*C)
	if err != nil {
		return sparse.Matrix{}, err
	}
	if total := int64(p.m) * int64(C); total > 0 {
		g, b := e.d.elementwise(total)
		if err := e.d.launch("gs_fwd_"+suf, g, b, 0, e.d.addr(fb.ptr), int64(C), p.idx.ptr, p.w.ptr, int64(p.m), int32(p.k), out.ptr); err != nil {
			out.Free()
			return sparse.Matrix{}, err
		}
	}
	return sparse.Matrix{Rows: p.m, Cols: C, Data: out}, nil
}

// reverse builds (once) the reverse CSR of the plan. Worker only.
func (p *SamplePlan) reverse(d *Device) error {
	p.revMu.Lock()
	defer p.revMu.Unlock()
	if p.haveRev {
		return nil
	}
	mk := int64(p.m) * int64(p.k)
	seg, err := d.newBuffer(sparse.Int32, p.n+1)
	if err != nil {
		return err
	}
	ent, err := d.newBuffer(sparse.Int32, int(mk))
	if err != nil {
		seg.Free()
		return err
	}
	fail := func(err error) error {
		seg.Free()
		ent.Free()
		return err
	}
	N := uint32(p.n)
	if mk == 0 {
		if err := d.fillI32(seg.ptr, 0, int64(p.n+1)); err != nil {
			return fail(err)
		}
	} else {
		keys, err := d.allocTemp(mk * 4)
		if err != nil {
			return fail(err)
		}
		defer d.freeTemp(keys)
		g, b := d.elementwise(mk)
		if err := d.launch("gs_rev_keys", g, b, 0, p.idx.ptr, mk, N, keys.ptr); err != nil {
			return fail(err)
		}
		if err := d.radixSort(keys.ptr, ent.ptr, mk, false, bitLen(uint64(N)), true); err != nil {
			return fail(err)
		}
		g, b = d.elementwise(mk + 1)
		if err := d.launch("gs_rev_seg", g, b, 0, keys.ptr, mk, N, seg.ptr); err != nil {
			return fail(err)
		}
	}
	p.revSeg, p.revEnt, p.haveRev = seg, ent, true
	return nil
}

// sampleGrad is the backward pass. Worker only.
func (e *Engine) sampleGrad(p *SamplePlan, feats, dy sparse.Matrix) (sparse.Matrix, sparse.Matrix, error) {
	d := e.d
	if err := p.live(); err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	db, err := e.buffer(dy, "dy")
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	if dy.Rows != p.m {
		return sparse.Matrix{}, sparse.Matrix{}, &sparse.ShapeError{Op: "GridSampleGrad", Arg: "dy", Want: fmt.Sprintf("[%d, C]", p.m), Got: dy.Shape()}
	}
	suf, err := sampleSuffix(db.dtype)
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	C := dy.Cols
	var fb *Buffer
	if !feats.IsZero() {
		if fb, err = e.buffer(feats, "feats"); err != nil {
			return sparse.Matrix{}, sparse.Matrix{}, err
		}
		if feats.Rows != p.n || feats.Cols != C || fb.dtype != db.dtype {
			return sparse.Matrix{}, sparse.Matrix{}, fmt.Errorf("%w: cudaext: GridSampleGrad: feats is %v %s, want %v [%d, %d]", sparse.ErrShape, fb.dtype, feats.Shape(), db.dtype, p.n, C)
		}
	}
	if err := p.reverse(d); err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	df, err := e.newOutput(db.dtype, p.n*C)
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	if total := int64(p.n) * int64(C); total > 0 {
		g, b := d.elementwise(total)
		if err := d.launch("gs_feat_grad_"+suf, g, b, 0, d.addr(db.ptr), int64(C), p.revSeg.ptr, d.addr(p.revEnt.ptr), d.addr(p.w.ptr), int32(p.k), int64(p.n), df.ptr); err != nil {
			df.Free()
			return sparse.Matrix{}, sparse.Matrix{}, err
		}
	}
	dFeats := sparse.Matrix{Rows: p.n, Cols: C, Data: df}
	if fb == nil {
		return dFeats, sparse.Matrix{}, nil
	}
	dp, err := e.newOutput(sparse.Float32, 3*p.m)
	if err != nil {
		df.Free()
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	dPoints := sparse.Matrix{Rows: p.m, Cols: 3, Data: dp}
	if p.m == 0 {
		return dFeats, dPoints, nil
	}
	if p.mode == sparse.Nearest {
		if err := d.fill(dp, 0); err != nil {
			df.Free()
			dp.Free()
			return sparse.Matrix{}, sparse.Matrix{}, err
		}
		return dFeats, dPoints, nil
	}
	ps := "f32"
	if p.pts.dtype == sparse.Float64 {
		ps = "f64"
	}
	g, b := d.elementwise(int64(p.m))
	if err := d.launch("gs_point_grad_"+ps+"_"+suf, g, b, 0, p.pts.ptr, d.addr(fb.ptr), d.addr(db.ptr), int64(C), p.idx.ptr, p.w.ptr, int64(p.m), dp.ptr); err != nil {
		df.Free()
		dp.Free()
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	return dFeats, dPoints, nil
}
