//go:build cudaext

package cudaext

import (
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
)

// Engine is the CUDA implementation of sparse.Engine for one GPU. It
// computes on matrices whose Data is a *Buffer of its device; Open
// registers it with package sparse, so sparse.Conv and friends route device
// matrices to it. Its methods are safe for concurrent use (the work is
// serialised by the device's lock; it runs on one stream, but for weight
// and bias gradients, which run on a side stream beside the input gradient
// issued after them: Device.onSide).
type Engine struct {
	d    *Device
	tf32 atomic.Bool
	// noHopper keeps the fixed heuristic off the Hopper gather tiles
	// (SetHopperDefaults, EnvNoHopper).
	noHopper atomic.Bool
	poison   atomic.Bool
	maps     mapCache     // worker only
	src      *tableSource // Source of the maps built here
}

var (
	openMu sync.Mutex
	opened = map[int]*Engine{}
)

// Open opens GPU ordinal (0 = the first), loads the kernel images and
// registers the engine with sparse.Register. Opening an ordinal that is
// already open returns the same engine. A machine without a usable GPU or
// driver gets an error wrapping ErrNoDevice.
func Open(ordinal int) (*Engine, error) {
	openMu.Lock()
	defer openMu.Unlock()
	if e := opened[ordinal]; e != nil && !e.d.closed.Load() {
		return e, nil
	}
	on, err := openSwitchesFromEnv()
	if err != nil {
		return nil, err
	}
	d, err := openDevice(ordinal)
	if err != nil {
		return nil, err
	}
	storeOpenSwitches(on)
	// The 256×128 tiles are there for their swapped twins.
	swappedWide.Store(swappedWide.Load() && d.swapped)
	swappedWide16.Store(swappedWide16.Load() && d.swapped)
	swappedWT.Store(swappedWT.Load() && d.swapped)
	e := &Engine{d: d}
	e.noHopper.Store(os.Getenv(EnvNoHopper) == "1")
	e.src = &tableSource{e: e}
	e.maps.entries = map[mapKey]*mapEntry{}
	opened[ordinal] = e
	sparse.Register(e)
	return e, nil
}

// Close waits for queued work, releases all device memory and the context.
// Buffers of the engine become unusable (ErrClosed).
func (e *Engine) Close() error {
	openMu.Lock()
	if opened[e.d.info.Ordinal] == e {
		delete(opened, e.d.info.Ordinal)
	}
	openMu.Unlock()
	e.d.close()
	return nil
}

// Name returns "cuda:<ordinal>".
func (e *Engine) Name() string { return fmt.Sprintf("cuda:%d", e.d.info.Ordinal) }

// Info describes the GPU.
func (e *Engine) Info() DeviceInfo { return e.d.info }

// Owns reports whether m's data is a buffer of this engine.
func (e *Engine) Owns(m sparse.Matrix) bool {
	b, ok := m.Data.(*Buffer)
	return ok && b != nil && b.dev == e.d
}

// SetTF32 selects the arithmetic of float32 convolutions: false (the
// default) is IEEE float32 FMA, true multiplies on tensor cores with the
// operands reduced to tf32 (FlexGEMM's allow_tf32), about 10 bits of
// mantissa, truncated (mma.sync and wgmma read the top 19 bits of each
// float32 operand).
func (e *Engine) SetTF32(on bool) { e.tf32.Store(on) }

// TF32 reports whether float32 convolutions use tf32 tensor cores.
func (e *Engine) TF32() bool { return e.tf32.Load() }

// SetHopperDefaults says whether the fixed heuristic and the autotuner may
// pick the Hopper tiles (wgmma kernels, compute capability 9.0 only) where
// they suit; true by default, false when FLEXGEMM_NO_HOPPER=1 at Open.
// Options.Tile can force them either way.
func (e *Engine) SetHopperDefaults(on bool) { e.noHopper.Store(!on) }

// HopperTiles reports whether the Hopper gather kernels of the arithmetic
// of dtype dt are loaded (an sm_90 GPU whose driver compiled their PTX);
// with TF32 set, float32 means the tf32 kernels.
func (e *Engine) HopperTiles(dt sparse.DType) bool {
	m, err := e.mathFor(dt)
	return err == nil && e.d.hopperTiles(m)
}

// hopperDefaults reports whether the fixed heuristic offers Hopper tiles
// in arithmetic m.
func (e *Engine) hopperDefaults(m kernels.Math) bool { return !e.noHopper.Load() && e.d.hopperTiles(m) }

// SetPoisonOutputs makes every result buffer start filled with NaN before
// the kernels write it, so an element a kernel forgets to write shows up
// as NaN (for tests; costs one memset per result).
func (e *Engine) SetPoisonOutputs(on bool) { e.poison.Store(on) }

// Synchronize waits for all queued device work and reports asynchronous
// kernel faults.
func (e *Engine) Synchronize() error { return e.d.do(e.d.sync) }

// HostWaits counts, since Open, what made the host wait for the device:
// every wait for the stream or a timer event, and among them the device →
// host copies and their bytes. Convolutions on maps built on this device
// with their derived tables prepared (DeriveTables) wait for nothing, so
// their counts stay unchanged. The per-launch waits of the debugging mode
// FLEXGEMM_CUDA_SYNC=1 are not counted.
type HostWaits struct {
	Waits         int64 // stream or event synchronisations, downloads included
	Downloads     int64 // device → host copies
	DownloadBytes int64 // bytes copied device → host
}

// HostWaits returns the engine's host-wait counters.
func (e *Engine) HostWaits() HostWaits {
	d := e.d
	return HostWaits{Waits: d.waits.Load(), Downloads: d.downloads.Load(), DownloadBytes: d.downloadBytes.Load()}
}

// MemStats returns the allocator statistics.
func (e *Engine) MemStats() MemStats {
	var s MemStats
	_ = e.d.do(func() error { s = e.d.mem.stats; return nil })
	return s
}

// ResetPeak sets the peak statistics to the current usage.
func (e *Engine) ResetPeak() {
	_ = e.d.do(func() error {
		st := &e.d.mem.stats
		st.PeakInUse, st.PeakReserved = st.InUse, st.InUse+st.Cached
		return nil
	})
}

// ReleaseCache gives cached device memory back to the driver.
func (e *Engine) ReleaseCache() error {
	return e.d.do(func() error { e.d.flushCache(); return nil })
}

// buffer returns m's device buffer after checking ownership and liveness.
func (e *Engine) buffer(m sparse.Matrix, arg string) (*Buffer, error) {
	b, ok := m.Data.(*Buffer)
	if !ok || b == nil {
		return nil, fmt.Errorf("%w: %s holds %T", ErrForeign, arg, m.Data)
	}
	if b.dev != e.d {
		return nil, fmt.Errorf("%w: %s is a buffer of %s, not of %s", ErrForeign, arg, b.dev.info.Name, e.Name())
	}
	if b.freed.Load() {
		return nil, fmt.Errorf("%w: %s", ErrFreed, arg)
	}
	if m.Rows < 0 || m.Cols < 0 || m.Rows*m.Cols != b.n {
		return nil, fmt.Errorf("%w: %s is [%d, %d] but its buffer holds %d elements", sparse.ErrShape, arg, m.Rows, m.Cols, b.n)
	}
	return b, nil
}

// Alloc returns an uninitialised device matrix [rows, cols] of dtype dt
// (Float32, Float16, BFloat16 or Int32).
func (e *Engine) Alloc(dt sparse.DType, rows, cols int) (sparse.Matrix, error) {
	if err := deviceDType(dt); err != nil {
		return sparse.Matrix{}, err
	}
	if rows < 0 || cols < 0 {
		return sparse.Matrix{}, fmt.Errorf("%w: Alloc [%d, %d]", sparse.ErrShape, rows, cols)
	}
	var b *Buffer
	err := e.d.do(func() (err error) { b, err = e.d.newBuffer(dt, rows*cols); return })
	if err != nil {
		return sparse.Matrix{}, err
	}
	return sparse.Matrix{Rows: rows, Cols: cols, Data: b}, nil
}

func deviceDType(dt sparse.DType) error {
	switch dt {
	case sparse.Float32, sparse.Float16, sparse.BFloat16, sparse.Int32:
		return nil
	}
	return fmt.Errorf("%w: %v cannot live on the device (Float32, Float16, BFloat16, Int32)", sparse.ErrDType, dt)
}

var _ sparse.MatrixFreer = (*Engine)(nil)

// Free releases a device matrix's buffer (no-op for other data); it
// implements sparse.MatrixFreer.
func (e *Engine) Free(ms ...sparse.Matrix) {
	for _, m := range ms {
		if b, ok := m.Data.(*Buffer); ok && b.dev == e.d {
			b.Free()
		}
	}
}

// ToDevice copies a host matrix to the device keeping its element type:
// []float32 becomes Float32, []int32 Int32, and []float64 is rounded to
// Float32 (the device computes in float32 or narrower).
func (e *Engine) ToDevice(m sparse.Matrix) (sparse.Matrix, error) {
	dt, err := m.DType()
	if err != nil {
		return sparse.Matrix{}, err
	}
	if dt == sparse.Float64 {
		dt = sparse.Float32
	}
	return e.ToDeviceAs(m, dt)
}

// ToDeviceAs copies a host matrix to the device as dtype dt. Float hosts
// may become Float32, Float16 or BFloat16 (converted on the device, round
// to nearest even); []int32 only Int32.
func (e *Engine) ToDeviceAs(m sparse.Matrix, dt sparse.DType) (sparse.Matrix, error) {
	if err := m.Validate(); err != nil {
		return sparse.Matrix{}, fmt.Errorf("cudaext: ToDevice: %w", err)
	}
	if e.Owns(m) {
		return sparse.Matrix{}, fmt.Errorf("%w: ToDevice of a matrix already on %s", sparse.ErrDType, e.Name())
	}
	if err := deviceDType(dt); err != nil {
		return sparse.Matrix{}, err
	}
	var src unsafe.Pointer
	n := m.Rows * m.Cols
	switch h := m.Data.(type) {
	case []int32:
		if dt != sparse.Int32 {
			return sparse.Matrix{}, fmt.Errorf("%w: int32 host data cannot become %v", sparse.ErrDType, dt)
		}
		if n > 0 {
			src = unsafe.Pointer(&h[0])
		}
	case []float32:
		if dt == sparse.Int32 {
			return sparse.Matrix{}, fmt.Errorf("%w: float host data cannot become int32", sparse.ErrDType)
		}
		if n > 0 {
			src = unsafe.Pointer(&h[0])
		}
	case []float64:
		if dt == sparse.Int32 {
			return sparse.Matrix{}, fmt.Errorf("%w: float host data cannot become int32", sparse.ErrDType)
		}
		f := make([]float32, n)
		for i, v := range h {
			f[i] = float32(v)
		}
		if n > 0 {
			src = unsafe.Pointer(&f[0])
		}
	default:
		return sparse.Matrix{}, fmt.Errorf("%w: ToDevice of %T", ErrForeign, m.Data)
	}
	var b *Buffer
	err := e.d.do(func() error {
		var err error
		b, err = e.d.upload(src, n, dt)
		return err
	})
	if err != nil {
		return sparse.Matrix{}, err
	}
	return sparse.Matrix{Rows: m.Rows, Cols: m.Cols, Data: b}, nil
}

// upload copies n elements of host data (float32 for float dtypes, int32
// for Int32) into a new buffer of dtype dt. Worker only.
func (d *Device) upload(src unsafe.Pointer, n int, dt sparse.DType) (*Buffer, error) {
	b, err := d.newBuffer(dt, n)
	if err != nil || n == 0 {
		return b, err
	}
	if dt == sparse.Float32 || dt == sparse.Int32 {
		if err := memcpyHtoD(b.ptr, src, int64(n)*4, d.stream); err != nil {
			b.Free()
			return nil, err
		}
		return b, nil
	}
	tmp, err := d.allocTemp(int64(n) * 4)
	if err != nil {
		b.Free()
		return nil, err
	}
	defer d.freeTemp(tmp)
	if err := memcpyHtoD(tmp.ptr, src, int64(n)*4, d.stream); err != nil {
		b.Free()
		return nil, err
	}
	if err := d.convert(tmp.ptr, sparse.Float32, b.ptr, dt, int64(n)); err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}

// convert converts n elements between float dtypes on the device. Worker
// only.
func (d *Device) convert(src devPtr, from sparse.DType, dst devPtr, to sparse.DType, n int64) error {
	if n == 0 {
		return nil
	}
	if from == to {
		return memcpyDtoD(dst, src, n*int64(from.Size()), d.stream)
	}
	name := map[[2]sparse.DType]string{
		{sparse.Float32, sparse.Float16}:  "spconv_cvt_f32_f16",
		{sparse.Float32, sparse.BFloat16}: "spconv_cvt_f32_bf16",
		{sparse.Float16, sparse.Float32}:  "spconv_cvt_f16_f32",
		{sparse.BFloat16, sparse.Float32}: "spconv_cvt_bf16_f32",
	}[[2]sparse.DType{from, to}]
	if name == "" {
		return fmt.Errorf("%w: no device conversion from %v to %v", sparse.ErrDType, from, to)
	}
	g, b := d.elementwise(n)
	return d.launch(name, g, b, 0, src, dst, n)
}

// ToHost copies a device matrix to the host: Float32, Float16 and BFloat16
// become []float32 (exact), Int32 []int32. It waits for queued work.
func (e *Engine) ToHost(m sparse.Matrix) (sparse.Matrix, error) {
	b, err := e.buffer(m, "matrix")
	if err != nil {
		return sparse.Matrix{}, err
	}
	out := sparse.Matrix{Rows: m.Rows, Cols: m.Cols}
	n := b.n
	err = e.d.do(func() error {
		d := e.d
		if b.dtype == sparse.Int32 {
			h := make([]int32, n)
			out.Data = h
			if n == 0 {
				return d.sync()
			}
			return d.copyToHost(unsafe.Pointer(&h[0]), b.ptr, int64(n)*4)
		}
		h := make([]float32, n)
		out.Data = h
		if n == 0 {
			return d.sync()
		}
		src := b.ptr
		if b.dtype != sparse.Float32 {
			tmp, err := d.allocTemp(int64(n) * 4)
			if err != nil {
				return err
			}
			defer d.freeTemp(tmp)
			if err := d.convert(b.ptr, b.dtype, tmp.ptr, sparse.Float32, int64(n)); err != nil {
				return err
			}
			src = tmp.ptr
		}
		return d.copyToHost(unsafe.Pointer(&h[0]), src, int64(n)*4)
	})
	if err != nil {
		return sparse.Matrix{}, err
	}
	return out, nil
}

// Fill sets every element of a device float matrix to v (rounded to its
// dtype); NaN poisons it.
func (e *Engine) Fill(m sparse.Matrix, v float32) error {
	b, err := e.buffer(m, "matrix")
	if err != nil {
		return err
	}
	return e.d.do(func() error { return e.d.fill(b, v) })
}

// fill is Fill on the worker.
func (d *Device) fill(b *Buffer, v float32) error {
	switch b.dtype {
	case sparse.Float32:
		return memsetD32(b.ptr, math.Float32bits(v), int64(b.n), d.stream)
	case sparse.Float16:
		return memsetD16(b.ptr, Float32ToHalfBits(v), int64(b.n), d.stream)
	case sparse.BFloat16:
		return memsetD16(b.ptr, Float32ToBFloat16Bits(v), int64(b.n), d.stream)
	}
	return fmt.Errorf("%w: Fill of %v", sparse.ErrDType, b.dtype)
}

// newOutput allocates a result buffer, NaN-poisoned when requested.
// Worker only.
func (e *Engine) newOutput(dt sparse.DType, n int) (*Buffer, error) {
	b, err := e.d.newBuffer(dt, n)
	if err != nil {
		return nil, err
	}
	if e.poison.Load() && n > 0 {
		if err := e.d.fill(b, float32(math.NaN())); err != nil {
			b.Free()
			return nil, err
		}
	}
	return b, nil
}

// Timer measures device time with CUDA events around work issued between
// Start and Stop.
type Timer struct {
	e          *Engine
	start, end cuEvent
}

// NewTimer creates a timer (two CUDA events).
func (e *Engine) NewTimer() (*Timer, error) {
	t := &Timer{e: e}
	err := e.d.do(func() (err error) {
		if t.start, err = eventCreate(); err != nil {
			return err
		}
		t.end, err = eventCreate()
		return err
	})
	return t, err
}

// Start records the start event on the device stream.
func (t *Timer) Start() error {
	return t.e.d.do(func() error { return eventRecord(t.start, t.e.d.stream) })
}

// Stop records the end event, waits for it and returns the milliseconds
// between the two events.
func (t *Timer) Stop() (float32, error) {
	var ms float32
	err := t.e.d.do(func() error {
		if err := eventRecord(t.end, t.e.d.stream); err != nil {
			return err
		}
		t.e.d.waits.Add(1)
		if err := eventSync(t.end); err != nil {
			return err
		}
		var err error
		ms, err = eventElapsed(t.start, t.end)
		return err
	})
	return ms, err
}

// Destroy frees the events.
func (t *Timer) Destroy() {
	_ = t.e.d.do(func() error {
		_ = eventDestroy(t.start)
		_ = eventDestroy(t.end)
		return nil
	})
}
