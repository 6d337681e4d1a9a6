package device

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// Device is one accelerator as seen by Gorgonia graphs: a Memory and NN
// backend, the registry of its tensors, the step that owns temporary
// tensors, transfer counters and an optional profiler. The zero Device is
// not usable; see New, OpenCUDA, OpenFake and Host.
//
// A Device is safe for concurrent use, but steps are per device: one
// training loop per device at a time.
type Device struct {
	name string
	mem  Memory
	nn   NN
	host bool
	act  sparse.DType
	eng  *Engine

	closed atomic.Bool
	up     [numPurposes]atomic.Int64
	down   [numPurposes]atomic.Int64

	mu   sync.Mutex
	step *Step
	live map[*entry]struct{} // persistent tensors

	profiling atomic.Bool
	timer     deviceTimer // nil: the backend cannot time kernels
	timing    atomic.Bool
	depth     atomic.Int32 // nesting of timed operations
	profMu    sync.Mutex
	prof      map[string]*Timing
}

// Option configures a Device.
type Option func(*Device) error

// WithActivations sets the storage dtype of activations (Float32, the
// default, or Float16/BFloat16 for mixed precision): inputs uploaded with
// Device.Input and the results of every op computed from activations are
// stored in it, while parameters, their gradients and the optimiser state
// stay float32.
func WithActivations(dt sparse.DType) Option {
	return func(d *Device) error {
		switch dt {
		case sparse.Float32, sparse.Float16, sparse.BFloat16:
			d.act = dt
			return nil
		}
		return fmt.Errorf("%w: activation dtype %v (want float32, float16 or bfloat16)", sparse.ErrDType, dt)
	}
}

// New makes a Device of a backend. The backend's convolution engine is
// registered with package sparse behind a proxy that times it when
// profiling (and so is asked before the backend itself). A backend has at
// most one open Device: close it before making another (ErrMixed).
func New(mem Memory, nn NN, opts ...Option) (*Device, error) {
	if mem == nil || nn == nil {
		return nil, fmt.Errorf("%w: device.New needs a Memory and an NN backend", ErrNotDevice)
	}
	if err := handles.init(); err != nil {
		return nil, err
	}
	d := &Device{name: mem.Name(), mem: mem, nn: nn, act: sparse.Float32, live: map[*entry]struct{}{}, prof: map[string]*Timing{}}
	for _, o := range opts {
		if err := o(d); err != nil {
			return nil, err
		}
	}
	openMu.Lock()
	defer openMu.Unlock()
	if prev := openDevices[mem]; prev != nil && !prev.closed.Load() {
		return nil, fmt.Errorf("%w: %s already has an open Device; close it first (a backend's tensors must belong to one Device)", ErrMixed, d.name)
	}
	openDevices[mem] = d
	d.eng = &Engine{d: d}
	sparse.Register(convProxy{d})
	return d, nil
}

// openDevices maps each backend to its Device: one Device per backend, so
// that every result a backend returns has one owner.
var (
	openMu      sync.Mutex
	openDevices = map[Memory]*Device{}
)

// OpenFake returns a Device over a new Fake backend.
func OpenFake(opts ...Option) (*Device, error) { return OpenFakeWith(NewFake(), opts...) }

// OpenFakeWith returns a Device over the given Fake backend.
func OpenFakeWith(f *Fake, opts ...Option) (*Device, error) { return New(f, f, opts...) }

var hostDevice = &Device{name: "host", host: true, act: sparse.Float32, prof: map[string]*Timing{}}

// Host returns the host "device": tensors stay ordinary host tensors,
// ToDevice returns its argument, Engine returns Gorgonia's standard
// engine and Adam runs on the CPU. It lets one training loop run on
// either side unchanged.
func Host() *Device { return hostDevice }

// Name returns the backend's name, e.g. "cuda:0", "fake:0" or "host".
func (d *Device) Name() string { return d.name }

// String returns the name.
func (d *Device) String() string { return d.name }

// IsHost reports whether d is the host device.
func (d *Device) IsHost() bool { return d.host }

// Activations returns the storage dtype of activations.
func (d *Device) Activations() sparse.DType { return d.act }

// Memory returns the backend's memory half (nil for the host).
func (d *Device) Memory() Memory { return d.mem }

// Close releases every tensor of the device (persistent ones included)
// and ends an open step. The backend itself is left open.
func (d *Device) Close() error {
	if d.host || d.closed.Swap(true) {
		return nil
	}
	openMu.Lock()
	if openDevices[d.mem] == d {
		delete(openDevices, d.mem)
	}
	openMu.Unlock()
	d.mu.Lock()
	st := d.step
	d.step = nil
	live := d.live
	d.live = map[*entry]struct{}{}
	d.mu.Unlock()
	if st != nil {
		st.release()
	}
	for e := range live {
		e.release()
	}
	return nil
}

func (d *Device) check() error {
	if d.host {
		return fmt.Errorf("%w: the host device has no device memory", ErrNotDevice)
	}
	if d.closed.Load() {
		return fmt.Errorf("%w: %s", ErrClosed, d.name)
	}
	return nil
}

// Purpose classifies host↔device copies for the transfer counters.
type Purpose int

// Purposes of transfers. Inside a training step only Inputs (features and
// labels of the batch), Scalars (loss, overflow flag) and Metrics
// (predictions) are expected; Other counts copies made on a caller's
// explicit request outside those categories, such as ToHost of an
// arbitrary tensor.
const (
	Params Purpose = iota
	Inputs
	Scalars
	Metrics
	Other
	numPurposes
)

// String implements fmt.Stringer for Purpose.
func (p Purpose) String() string {
	switch p {
	case Params:
		return "params"
	case Inputs:
		return "inputs"
	case Scalars:
		return "scalars"
	case Metrics:
		return "metrics"
	case Other:
		return "other"
	}
	return fmt.Sprintf("Purpose(%d)", int(p))
}

// Transfers counts the bytes copied between host and device, by purpose.
// Kernel-map tables uploaded by a backend's convolution engine are not
// included (they are coordinates, copied once per map).
type Transfers struct {
	Up   [numPurposes]int64 // host → device
	Down [numPurposes]int64 // device → host
}

// Total returns all bytes in both directions.
func (t Transfers) Total() int64 {
	var s int64
	for i := range t.Up {
		s += t.Up[i] + t.Down[i]
	}
	return s
}

// Sub returns t − u.
func (t Transfers) Sub(u Transfers) Transfers {
	for i := range t.Up {
		t.Up[i] -= u.Up[i]
		t.Down[i] -= u.Down[i]
	}
	return t
}

// String implements fmt.Stringer for Transfers.
func (t Transfers) String() string {
	var b strings.Builder
	for p := Purpose(0); p < numPurposes; p++ {
		if t.Up[p] == 0 && t.Down[p] == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%v ↑%d ↓%d", p, t.Up[p], t.Down[p])
	}
	if b.Len() == 0 {
		return "no transfers"
	}
	return b.String()
}

// Transfers returns the bytes copied since the device was made.
func (d *Device) Transfers() Transfers {
	var t Transfers
	for i := range t.Up {
		t.Up[i] = d.up[i].Load()
		t.Down[i] = d.down[i].Load()
	}
	return t
}

// hostBytes is the size of a host↔device copy of m: 4 bytes per element
// (float64 host data is converted to float32 before it is copied, narrow
// dtypes are converted on the device).
func hostBytes(m sparse.Matrix) int64 { return int64(m.Rows*m.Cols) * 4 }

// Upload copies a host matrix to the device as dtype dt, counting its
// bytes under purpose p. The result belongs to the open step, if any.
func (d *Device) Upload(host sparse.Matrix, dt sparse.DType, p Purpose) (sparse.Matrix, error) {
	if err := d.check(); err != nil {
		return sparse.Matrix{}, err
	}
	m, err := d.mem.ToDeviceAs(host, dt)
	if err != nil {
		return sparse.Matrix{}, d.wrap("upload", err)
	}
	d.up[p].Add(hostBytes(host))
	d.track(m)
	return m, nil
}

// Download copies a device matrix to the host ([]float32 or []int32),
// counting its bytes under purpose p.
func (d *Device) Download(m sparse.Matrix, p Purpose) (sparse.Matrix, error) {
	if err := d.check(); err != nil {
		return sparse.Matrix{}, err
	}
	h, err := d.mem.ToHost(m)
	if err != nil {
		return sparse.Matrix{}, d.wrap("download", err)
	}
	d.down[p].Add(hostBytes(h))
	return h, nil
}

// Alloc returns an uninitialised device matrix owned by the open step (or
// persistent outside a step; release it with Release).
func (d *Device) Alloc(dt sparse.DType, rows, cols int) (sparse.Matrix, error) {
	if err := d.check(); err != nil {
		return sparse.Matrix{}, err
	}
	m, err := d.mem.Alloc(dt, rows, cols)
	if err != nil {
		return sparse.Matrix{}, d.wrap(fmt.Sprintf("allocating a [%d, %d] %v matrix", rows, cols, dt), err)
	}
	d.track(m)
	return m, nil
}

// Release frees device matrices made by Alloc, Upload or a kernel of this
// device now rather than at the end of the step.
func (d *Device) Release(ms ...sparse.Matrix) {
	if d.host {
		return
	}
	d.mu.Lock()
	for _, m := range ms {
		if d.step != nil {
			delete(d.step.raw, storageOf(m))
		}
	}
	d.mu.Unlock()
	d.mem.Free(ms...)
}

// track makes a raw matrix part of the open step, if any.
func (d *Device) track(m sparse.Matrix) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.step != nil {
		d.step.raw[storageOf(m)] = m
	}
}

func storageOf(m sparse.Matrix) sparse.Storage {
	s, _ := m.Data.(sparse.Storage)
	return s
}

// Owns reports whether m's data is storage of this device.
func (d *Device) Owns(m sparse.Matrix) bool {
	return !d.host && !d.closed.Load() && d.mem.Owns(m)
}

// wrap names the device and the action in an error; out-of-memory errors
// of any backend also wrap ErrOutOfMemory.
func (d *Device) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	if isOOM(err) && !errors.Is(err, ErrOutOfMemory) {
		return fmt.Errorf("%s: %s: %w: %w", d.name, what, ErrOutOfMemory, err)
	}
	return fmt.Errorf("%s: %s: %w", d.name, what, err)
}

// oomChecks lets backends declare their out-of-memory sentinels (the
// CUDA adapter adds cudaext.ErrOutOfMemory).
var oomChecks []error

func isOOM(err error) bool {
	for _, e := range oomChecks {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Run calls f with the device's kernels, timing it under category cat
// when profiling, and wraps its error with the device name and cat.
func (d *Device) Run(cat string, f func(NN) error) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.timed(cat, func() error { return f(d.nn) })
}

func (d *Device) timed(cat string, f func() error) error {
	if d.timing.Load() {
		// Only the outermost operation is a span: a cast inside a
		// convolution counts as convolution time.
		if d.depth.Add(1) > 1 {
			defer d.depth.Add(-1)
			return d.wrap(cat, f())
		}
		defer d.depth.Add(-1)
		if err := d.timer.markTiming(cat); err != nil {
			return d.wrap(cat, err)
		}
		err := f()
		if e := d.timer.markTiming(IdleCategory); e != nil && err == nil {
			err = e
		}
		return d.wrap(cat, err)
	}
	if !d.profiling.Load() {
		return d.wrap(cat, f())
	}
	if err := d.mem.Synchronize(); err != nil {
		return d.wrap(cat, err)
	}
	t0 := time.Now()
	err := f()
	if err == nil {
		err = d.mem.Synchronize()
	}
	el := time.Since(t0)
	d.profMu.Lock()
	t := d.prof[cat]
	if t == nil {
		t = &Timing{}
		d.prof[cat] = t
	}
	t.Calls++
	t.Total += el
	d.profMu.Unlock()
	return d.wrap(cat, err)
}

// Timing is the time spent in one category of device work.
type Timing struct {
	Calls int
	Total time.Duration
}

// SetProfiling turns per-operation timing on or off. While on, every
// device operation waits for the device before and after it, so the
// totals are device time plus launch overhead; leave it off to measure a
// whole step.
func (d *Device) SetProfiling(on bool) { d.profiling.Store(on) }

// Profile returns the time per category since the last ResetProfile.
// Convolutions (forward, input and weight gradients, bias gradients)
// appear under "conv".
func (d *Device) Profile() map[string]Timing {
	d.profMu.Lock()
	defer d.profMu.Unlock()
	out := make(map[string]Timing, len(d.prof))
	for k, v := range d.prof {
		out[k] = *v
	}
	return out
}

// ResetProfile clears the profile.
func (d *Device) ResetProfile() {
	d.profMu.Lock()
	d.prof = map[string]*Timing{}
	d.profMu.Unlock()
}

// FormatProfile renders a profile as lines "category calls total",
// largest first, with a conv / other / total summary.
func FormatProfile(p map[string]Timing) string {
	keys := make([]string, 0, len(p))
	var conv, all time.Duration
	for k, v := range p {
		keys = append(keys, k)
		all += v.Total
		if k == "conv" {
			conv += v.Total
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if p[keys[i]].Total != p[keys[j]].Total {
			return p[keys[i]].Total > p[keys[j]].Total
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%-10s %6d calls %12v\n", k, p[k].Calls, p[k].Total)
	}
	fmt.Fprintf(&b, "conv %v, everything else %v, total %v\n", conv, all-conv, all)
	return b.String()
}

// Synchronize waits for the device.
func (d *Device) Synchronize() error {
	if d.host {
		return nil
	}
	return d.wrap("synchronize", d.mem.Synchronize())
}

// convProxy is the sparse.Engine registered for a device: it owns the
// device's matrices, times convolutions under "conv" and tracks results
// in the open step.
type convProxy struct{ d *Device }

func (p convProxy) Name() string              { return p.d.name }
func (p convProxy) Owns(m sparse.Matrix) bool { return p.d.Owns(m) }

func (p convProxy) result(cat string, f func() (sparse.Matrix, error)) (sparse.Matrix, error) {
	var out sparse.Matrix
	err := p.d.timed(cat, func() error {
		var err error
		out, err = f()
		return err
	})
	if err != nil {
		return sparse.Matrix{}, err
	}
	if !out.IsZero() {
		p.d.track(out)
	}
	return out, nil
}

func (p convProxy) ConvForward(m *kmap.Map, x, w, bias sparse.Matrix, opt sparse.ConvOptions) (sparse.Matrix, error) {
	return p.result("conv", func() (sparse.Matrix, error) { return p.d.mem.ConvForward(m, x, w, bias, opt) })
}

func (p convProxy) ConvInputGrad(m *kmap.Map, dy, w sparse.Matrix, opt sparse.ConvOptions) (sparse.Matrix, error) {
	return p.result("conv", func() (sparse.Matrix, error) { return p.d.mem.ConvInputGrad(m, dy, w, opt) })
}

func (p convProxy) ConvWeightGrad(m *kmap.Map, x, dy sparse.Matrix, opt sparse.ConvOptions) (sparse.Matrix, error) {
	return p.result("conv", func() (sparse.Matrix, error) { return p.d.mem.ConvWeightGrad(m, x, dy, opt) })
}

func (p convProxy) BiasGrad(dy sparse.Matrix) (sparse.Matrix, error) {
	return p.result("conv", func() (sparse.Matrix, error) { return p.d.mem.BiasGrad(dy) })
}

// ConvParamGrads implements sparse.ParamGradEngine (timed under "conv"):
// the backend's one pass where it has one (the CUDA engine), else its
// weight and bias gradients in turn.
func (p convProxy) ConvParamGrads(m *kmap.Map, x, dy sparse.Matrix, opt sparse.ConvOptions) (dw, db sparse.Matrix, err error) {
	pe, ok := p.d.mem.(sparse.ParamGradEngine)
	if !ok {
		if dw, err = p.ConvWeightGrad(m, x, dy, opt); err != nil {
			return sparse.Matrix{}, sparse.Matrix{}, err
		}
		if db, err = p.BiasGrad(dy); err != nil {
			p.d.Release(dw)
			return sparse.Matrix{}, sparse.Matrix{}, err
		}
		return dw, db, nil
	}
	err = p.d.timed("conv", func() error {
		var err error
		dw, db, err = pe.ConvParamGrads(m, x, dy, opt)
		return err
	})
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	p.d.track(dw)
	p.d.track(db)
	return dw, db, nil
}

// PoolForward implements sparse.PoolEngine when the backend does (timed
// under "pool").
func (p convProxy) PoolForward(m *kmap.Map, x sparse.Matrix, mode sparse.PoolMode) (y, argmax sparse.Matrix, err error) {
	pe, ok := p.d.mem.(sparse.PoolEngine)
	if !ok {
		return sparse.Matrix{}, sparse.Matrix{}, fmt.Errorf("%w: %s cannot pool", sparse.ErrNoEngine, p.d.name)
	}
	err = p.d.timed("pool", func() error {
		var err error
		y, argmax, err = pe.PoolForward(m, x, mode)
		return err
	})
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	p.d.track(y)
	if !argmax.IsZero() {
		p.d.track(argmax)
	}
	return y, argmax, nil
}

// PoolGrad implements sparse.PoolEngine when the backend does.
func (p convProxy) PoolGrad(m *kmap.Map, dy, argmax sparse.Matrix, mode sparse.PoolMode) (sparse.Matrix, error) {
	pe, ok := p.d.mem.(sparse.PoolEngine)
	if !ok {
		return sparse.Matrix{}, fmt.Errorf("%w: %s cannot pool", sparse.ErrNoEngine, p.d.name)
	}
	return p.result("pool", func() (sparse.Matrix, error) { return pe.PoolGrad(m, dy, argmax, mode) })
}

// GridSampleForward implements sparse.SampleEngine when the backend does
// (timed under "sample").
func (p convProxy) GridSampleForward(pl *sparse.SamplePlan, feats sparse.Matrix) (sparse.Matrix, error) {
	se, ok := p.d.mem.(sparse.SampleEngine)
	if !ok {
		return sparse.Matrix{}, fmt.Errorf("%w: %s cannot grid-sample", sparse.ErrNoEngine, p.d.name)
	}
	return p.result("sample", func() (sparse.Matrix, error) { return se.GridSampleForward(pl, feats) })
}

// GridSampleGrad implements sparse.SampleEngine when the backend does.
func (p convProxy) GridSampleGrad(pl *sparse.SamplePlan, feats, dy sparse.Matrix) (dFeats, dPoints sparse.Matrix, err error) {
	se, ok := p.d.mem.(sparse.SampleEngine)
	if !ok {
		return sparse.Matrix{}, sparse.Matrix{}, fmt.Errorf("%w: %s cannot grid-sample", sparse.ErrNoEngine, p.d.name)
	}
	err = p.d.timed("sample", func() error {
		var err error
		dFeats, dPoints, err = se.GridSampleGrad(pl, feats, dy)
		return err
	})
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	for _, m := range []sparse.Matrix{dFeats, dPoints} {
		if !m.IsZero() {
			p.d.track(m)
		}
	}
	return dFeats, dPoints, nil
}

// BuildsMaps reports whether kernel maps of coordinates on this device are
// built on the device (sparse.SubmanifoldMapOf, StridedMapOf,
// TransposedMapOf, InverseMapOf): its backend implements sparse.MapEngine.
func (d *Device) BuildsMaps() bool {
	if d.host {
		return false
	}
	_, ok := d.mem.(sparse.MapEngine)
	return ok
}

// mapEngine returns the backend as a sparse.MapEngine.
func (p convProxy) mapEngine(op string) (sparse.MapEngine, error) {
	me, ok := p.d.mem.(sparse.MapEngine)
	if !ok {
		return nil, fmt.Errorf("%w: %s: %s cannot build kernel maps", sparse.ErrNoEngine, op, p.d.name)
	}
	return me, nil
}

// buildMap runs a map build of the backend, timed under "kmap".
func (p convProxy) buildMap(op string, build func(sparse.MapEngine) (*kmap.Map, error)) (*kmap.Map, error) {
	me, err := p.mapEngine(op)
	if err != nil {
		return nil, err
	}
	var m *kmap.Map
	err = p.d.timed("kmap", func() error {
		var err error
		m, err = build(me)
		return err
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// SubmanifoldMap implements sparse.MapEngine when the backend does (timed
// under "kmap"), so sparse.SubmanifoldMapOf of device coordinates builds
// the map on the device.
func (p convProxy) SubmanifoldMap(coords sparse.Matrix, ext sparse.Extent, kernel, dilation [3]int) (*kmap.Map, error) {
	return p.buildMap("SubmanifoldMap", func(me sparse.MapEngine) (*kmap.Map, error) {
		return me.SubmanifoldMap(coords, ext, kernel, dilation)
	})
}

// StridedMap implements sparse.MapEngine when the backend does.
func (p convProxy) StridedMap(coords sparse.Matrix, ext sparse.Extent, conv grid.Conv, outCoords sparse.Matrix) (*kmap.Map, error) {
	return p.buildMap("StridedMap", func(me sparse.MapEngine) (*kmap.Map, error) {
		return me.StridedMap(coords, ext, conv, outCoords)
	})
}

// TransposedMap implements sparse.MapEngine when the backend does.
func (p convProxy) TransposedMap(coords sparse.Matrix, ext sparse.Extent, conv grid.Conv) (*kmap.Map, error) {
	return p.buildMap("TransposedMap", func(me sparse.MapEngine) (*kmap.Map, error) {
		return me.TransposedMap(coords, ext, conv)
	})
}

// InverseMap implements sparse.MapEngine when the backend does.
// (sparse.InverseMapOf asks the engine named by the map's Source, which
// for a map built by the CUDA backend is the backend itself.)
func (p convProxy) InverseMap(m *kmap.Map) (*kmap.Map, error) {
	return p.buildMap("InverseMap", func(me sparse.MapEngine) (*kmap.Map, error) { return me.InverseMap(m) })
}

var (
	_ sparse.ParamGradEngine = convProxy{}
	_ sparse.PoolEngine      = convProxy{}
	_ sparse.SampleEngine    = convProxy{}
	_ sparse.MapEngine       = convProxy{}
)
