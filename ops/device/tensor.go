package device

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/flexgemm-go/flexgemm/sparse"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// entry is one device tensor: its handle and its storage.
type entry struct {
	d        *Device
	addr     uintptr
	m        sparse.Matrix // the storage as an [n, 1] matrix
	step     *Step         // owning step; nil: persistent
	released atomic.Bool
}

// registry maps handles to entries.
var registry = struct {
	sync.RWMutex
	m map[uintptr]*entry
}{m: map[uintptr]*entry{}}

// release frees the storage and the handle (once).
func (e *entry) release() {
	if !e.released.CompareAndSwap(false, true) {
		return
	}
	registry.Lock()
	delete(registry.m, e.addr)
	registry.Unlock()
	handles.put(e.addr)
	e.d.mem.Free(e.m)
}

// Step owns the device memory allocated while it is open: every tensor
// made by an op, upload or allocation of its device between BeginStep
// and End is released by End, except those passed to Keep. Parameters
// and optimiser state are made outside steps and persist.
type Step struct {
	d       *Device
	tensors map[*entry]struct{}
	raw     map[sparse.Storage]sparse.Matrix
	start   Transfers
	ended   bool
	id      uint64
}

var stepIDs atomic.Uint64

// StepID returns a process-unique identifier of the open step of d, or 0
// when none is open: a cache of device data made inside a step is valid
// while StepID returns the same value.
func (d *Device) StepID() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.step == nil {
		return 0
	}
	return d.step.id
}

// BeginStep opens a step. Only one step per device may be open.
func (d *Device) BeginStep() (*Step, error) {
	s := &Step{d: d, tensors: map[*entry]struct{}{}, raw: map[sparse.Storage]sparse.Matrix{}, start: d.Transfers(), id: stepIDs.Add(1)}
	if d.host {
		return s, nil
	}
	if err := d.check(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.step != nil {
		return nil, fmt.Errorf("%w: %s: a step is already open", ErrStep, d.name)
	}
	d.step = s
	return s, nil
}

// End releases the step's device memory. Tensors of the step become
// unusable (ErrReleased). Ending twice is an error.
func (s *Step) End() error {
	d := s.d
	if d.host {
		if s.ended {
			return fmt.Errorf("%w: step ended twice", ErrStep)
		}
		s.ended = true
		return nil
	}
	d.mu.Lock()
	if s.ended {
		d.mu.Unlock()
		return fmt.Errorf("%w: %s: step ended twice", ErrStep, d.name)
	}
	s.ended = true
	if d.step == s {
		d.step = nil
	}
	d.mu.Unlock()
	s.release()
	return nil
}

func (s *Step) release() {
	for e := range s.tensors {
		e.release()
	}
	raw := make([]sparse.Matrix, 0, len(s.raw))
	for _, m := range s.raw {
		raw = append(raw, m)
	}
	s.tensors, s.raw = nil, nil
	s.d.mem.Free(raw...)
}

// Transfers returns the bytes copied since the step began.
func (s *Step) Transfers() Transfers { return s.d.Transfers().Sub(s.start) }

// Device returns the step's device.
func (s *Step) Device() *Device { return s.d }

// inaccessible is an engine whose only purpose is to mark a Dense as not
// natively accessible when passed to tensor.WithEngine: gorgonia.org/
// tensor's standard engine then refuses to compute on it.
type inaccessible struct{}

func (inaccessible) AllocAccessible() bool { return false }
func (inaccessible) Alloc(int64) (tensor.Memory, error) {
	return nil, fmt.Errorf("%w: marker engine", ErrUnsupported)
}
func (inaccessible) Free(tensor.Memory, int64) error { return nil }
func (inaccessible) Memset(tensor.Memory, interface{}) error {
	return fmt.Errorf("%w: marker engine", ErrUnsupported)
}
func (inaccessible) Memclr(tensor.Memory) {}
func (inaccessible) Memcpy(tensor.Memory, tensor.Memory) error {
	return fmt.Errorf("%w: marker engine", ErrUnsupported)
}
func (inaccessible) Accessible(tensor.Memory) (tensor.Memory, error) {
	return nil, fmt.Errorf("%w: device memory is not accessible from the host", ErrUnsupported)
}
func (inaccessible) WorksWith(tensor.DataOrder) bool { return true }

// denseDType is the Gorgonia dtype of device storage: Float32 for every
// float storage (the graph is a float32 graph whatever the storage
// precision), Int32 for Int32.
func denseDType(dt sparse.DType) tensor.Dtype {
	if dt == sparse.Int32 {
		return tensor.Int32
	}
	return tensor.Float32
}

// Wrap makes a device tensor of the given shape over the device matrix m
// (storage of this device holding exactly shape's number of elements),
// without copying. The tensor belongs to the open step, if any, else it
// persists until Free or Close. Its Gorgonia dtype is Float32 for every
// float storage (mixed precision keeps the graph float32) and Int32 for
// Int32 storage.
func (d *Device) Wrap(m sparse.Matrix, shape ...int) (*tensor.Dense, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	if !d.mem.Owns(m) {
		return nil, fmt.Errorf("%w: %s: Wrap of %T", ErrNotDevice, d.name, m.Data)
	}
	st := storageOf(m)
	n := st.Len()
	if len(shape) == 0 || tensor.Shape(shape).TotalSize() != n {
		return nil, fmt.Errorf("%w: %s: %d elements cannot have shape %v", sparse.ErrShape, d.name, n, shape)
	}
	bytes := uintptr(n) * 4
	addr, err := handles.get(bytes)
	if err != nil {
		return nil, err
	}
	e := &entry{d: d, addr: addr, m: sparse.Matrix{Rows: n, Cols: 1, Data: st}}
	t := tensor.New(tensor.WithShape(shape...), tensor.Of(denseDType(st.DType())),
		tensor.WithEngine(inaccessible{}), tensor.WithEngine(d.eng), tensor.FromMemory(addr, bytes))
	registry.Lock()
	registry.m[addr] = e
	registry.Unlock()
	d.mu.Lock()
	if d.step != nil {
		e.step = d.step
		d.step.tensors[e] = struct{}{}
		delete(d.step.raw, st)
	} else {
		d.live[e] = struct{}{}
	}
	d.mu.Unlock()
	return t, nil
}

// inHandleRange reports whether addr is a device-tensor handle (live or
// not).
func inHandleRange(addr uintptr) bool {
	base := handles.start.Load()
	return base != 0 && addr >= base && addr < base+slotSpan
}

// lookup returns the entry of a device tensor; (nil, nil) for values that
// are not device tensors, an error for released tensors and views of
// device tensors.
func lookup(v any) (*entry, error) {
	t, ok := v.(*tensor.Dense)
	if !ok || t == nil || t.Shape().IsScalar() {
		return nil, nil
	}
	addr := dataAddr(t)
	if !inHandleRange(addr) {
		return nil, nil
	}
	registry.RLock()
	e := registry.m[addr]
	registry.RUnlock()
	switch {
	case t.IsView() || (e == nil && (addr-handles.base)%slotBytes != 0):
		return nil, fmt.Errorf("%w: a view or slice of a device tensor (materialise it on the device instead)", ErrUnsupported)
	case e == nil || e.released.Load():
		return nil, fmt.Errorf("%w: tensor %v was freed or its step has ended", ErrReleased, t.Shape())
	}
	return e, nil
}

// IsDevice reports whether v is a device tensor (of any device, live or
// released).
func IsDevice(v gorgonia.Value) bool {
	t, ok := v.(*tensor.Dense)
	return ok && t != nil && !t.Shape().IsScalar() && inHandleRange(dataAddr(t))
}

// rawField is the index path of tensor.Dense's array.Header.Raw field.
var rawField = func() []int {
	f, ok := reflect.TypeOf(tensor.Dense{}).FieldByName("Raw")
	if !ok || f.Type.Kind() != reflect.Slice {
		panic("device: gorgonia.org/tensor.Dense has no Raw slice field")
	}
	return f.Index
}()

// dataAddr returns the address of t's memory. Unlike t.Uintptr it works
// for tensors with no elements (whose byte slice is empty).
func dataAddr(t *tensor.Dense) uintptr {
	if t.MemSize() > 0 {
		return t.Uintptr()
	}
	return reflect.ValueOf(t).Elem().FieldByIndex(rawField).Pointer()
}

// Of returns the device of a device tensor; an error for released
// tensors, views, and values that are not device tensors.
func Of(v gorgonia.Value) (*Device, error) {
	e, err := lookup(v)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return nil, fmt.Errorf("%w: %T", ErrNotDevice, v)
	}
	return e.d, nil
}

// MatrixOf views the device tensor v as a [rows, cols] device matrix
// (rows·cols must be its number of elements) and returns its device.
func MatrixOf(v gorgonia.Value, rows, cols int) (sparse.Matrix, *Device, error) {
	e, err := lookup(v)
	if err != nil {
		return sparse.Matrix{}, nil, err
	}
	if e == nil {
		return sparse.Matrix{}, nil, fmt.Errorf("%w: %T", ErrNotDevice, v)
	}
	if e.d.closed.Load() {
		return sparse.Matrix{}, nil, fmt.Errorf("%w: %s", ErrClosed, e.d.name)
	}
	if rows < 0 || cols < 0 || rows*cols != e.m.Rows {
		return sparse.Matrix{}, nil, fmt.Errorf("%w: a device tensor of %d elements viewed as [%d, %d]", sparse.ErrShape, e.m.Rows, rows, cols)
	}
	return sparse.Matrix{Rows: rows, Cols: cols, Data: e.m.Data}, e.d, nil
}

// StorageDType returns the storage dtype of a device tensor.
func StorageDType(v gorgonia.Value) (sparse.DType, error) {
	e, err := lookup(v)
	if err != nil {
		return 0, err
	}
	if e == nil {
		return 0, fmt.Errorf("%w: %T", ErrNotDevice, v)
	}
	return storageOf(e.m).DType(), nil
}

// Owner returns the open device whose backend owns the device matrix m,
// or nil.
func Owner(m sparse.Matrix) *Device {
	if _, ok := m.Data.(sparse.Storage); !ok {
		return nil
	}
	for _, e := range sparse.Engines() {
		if p, ok := e.(convProxy); ok && p.Owns(m) {
			return p.d
		}
	}
	return nil
}

// Free releases a device tensor now. Using it afterwards is an error
// (ErrReleased); freeing twice is a no-op.
func (d *Device) Free(t *tensor.Dense) error {
	if d.host {
		return nil
	}
	e, err := lookup(t)
	if err != nil {
		if IsDevice(t) {
			return nil // already released
		}
		return err
	}
	if e == nil {
		return fmt.Errorf("%w: Free of a host tensor", ErrNotDevice)
	}
	if e.d != d {
		return fmt.Errorf("%w: Free on %s of a tensor of %s", ErrMixed, d.name, e.d.name)
	}
	d.freeEntry(e)
	return nil
}

// freeEntry forgets and releases a tensor.
func (d *Device) freeEntry(e *entry) {
	d.mu.Lock()
	if e.step != nil {
		delete(e.step.tensors, e)
	} else {
		delete(d.live, e)
	}
	d.mu.Unlock()
	e.release()
}

// Keep moves a tensor of the open step to the persistent tensors (freed
// by Free or Close), e.g. to keep a result beyond the step.
func (d *Device) Keep(t *tensor.Dense) error {
	if d.host {
		return nil
	}
	e, err := lookup(t)
	if err != nil {
		return err
	}
	if e == nil {
		return fmt.Errorf("%w: Keep of a host tensor", ErrNotDevice)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.step != nil {
		delete(e.step.tensors, e)
		e.step = nil
		d.live[e] = struct{}{}
	}
	return nil
}

// ToDevice copies a host float32/float64 tensor to the device as Float32
// storage (parameters: purpose Params). On the host device it returns t.
func (d *Device) ToDevice(t *tensor.Dense) (*tensor.Dense, error) {
	return d.ToDeviceAs(t, sparse.Float32, Params)
}

// Input copies a host tensor of a batch (features) to the device in the
// activation dtype, counted as Inputs. On the host device it returns t.
func (d *Device) Input(t *tensor.Dense) (*tensor.Dense, error) {
	return d.ToDeviceAs(t, d.act, Inputs)
}

// ToDeviceAs copies a host tensor (float32, float64 or int32) to the
// device with storage dtype dt, counting the bytes under purpose p. A
// float64 tensor becomes a Float32-typed device tensor. On the host
// device it returns t.
func (d *Device) ToDeviceAs(t *tensor.Dense, dt sparse.DType, p Purpose) (*tensor.Dense, error) {
	if d.host {
		return t, nil
	}
	if t == nil {
		return nil, fmt.Errorf("%w: ToDevice of a nil tensor", ErrNotDevice)
	}
	if IsDevice(t) {
		return nil, fmt.Errorf("%w: %s: ToDevice of a tensor already on a device", ErrMixed, d.name)
	}
	h, err := hostMatrix(t)
	if err != nil {
		return nil, err
	}
	m, err := d.Upload(h, dt, p)
	if err != nil {
		return nil, err
	}
	out, err := d.Wrap(m, t.Shape().Clone()...)
	if err != nil {
		d.Release(m)
		return nil, err
	}
	return out, nil
}

// hostMatrix views a host tensor's data as an [n, 1] matrix (copying a
// view).
func hostMatrix(t *tensor.Dense) (sparse.Matrix, error) {
	if t.IsView() {
		t = t.Materialize().(*tensor.Dense)
	}
	n := t.Shape().TotalSize()
	if t.Shape().IsScalar() {
		return sparse.Matrix{}, fmt.Errorf("%w: a scalar cannot be a device tensor", sparse.ErrShape)
	}
	if n == 0 {
		switch t.Dtype() {
		case tensor.Float32, tensor.Float64:
			return sparse.Matrix{Rows: 0, Cols: 1, Data: []float32{}}, nil
		case tensor.Int32:
			return sparse.Matrix{Rows: 0, Cols: 1, Data: []int32{}}, nil
		}
	}
	switch s := t.Data().(type) {
	case []float32:
		return sparse.Matrix{Rows: n, Cols: 1, Data: s[:n]}, nil
	case []float64:
		return sparse.Matrix{Rows: n, Cols: 1, Data: s[:n]}, nil
	case []int32:
		return sparse.Matrix{Rows: n, Cols: 1, Data: s[:n]}, nil
	}
	return sparse.Matrix{}, fmt.Errorf("%w: a %v tensor cannot go to the device (float32, float64, int32)", sparse.ErrDType, t.Dtype())
}

// ToHost copies a device tensor to a new host tensor of the same shape
// (float32, or int32 for Int32 storage), counting the bytes under purpose
// p. Host values are returned as they are.
func (d *Device) ToHost(v gorgonia.Value, p Purpose) (*tensor.Dense, error) {
	e, err := lookup(v)
	if err != nil {
		return nil, err
	}
	if e == nil {
		t, ok := v.(*tensor.Dense)
		if !ok {
			return nil, fmt.Errorf("%w: ToHost of %T", ErrNotDevice, v)
		}
		return t, nil
	}
	if e.d != d {
		return nil, fmt.Errorf("%w: ToHost on %s of a tensor of %s", ErrMixed, d.name, e.d.name)
	}
	h, err := d.Download(e.m, p)
	if err != nil {
		return nil, err
	}
	shape := v.Shape().Clone()
	if h.Rows == 0 {
		return tensor.New(tensor.Of(denseDType(storageOf(e.m).DType())), tensor.WithShape(shape...)), nil
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(h.Data)), nil
}

// Zeros returns a device tensor of zeros with storage dtype dt (a host
// float32 tensor on the host device).
func (d *Device) Zeros(dt sparse.DType, shape ...int) (*tensor.Dense, error) {
	if d.host {
		return tensor.New(tensor.Of(denseDType(dt)), tensor.WithShape(shape...)), nil
	}
	n := tensor.Shape(shape).TotalSize()
	m, err := d.Alloc(dt, n, 1)
	if err != nil {
		return nil, err
	}
	if dt != sparse.Int32 {
		err = d.Run("fill", func(NN) error { return d.mem.Fill(m, 0) })
	} else if n > 0 {
		err = fmt.Errorf("%w: Zeros of int32 storage", ErrUnsupported)
	}
	if err != nil {
		d.Release(m)
		return nil, err
	}
	return d.Wrap(m, shape...)
}

// Empty returns an uninitialised device tensor with storage dtype dt.
func (d *Device) Empty(dt sparse.DType, shape ...int) (*tensor.Dense, sparse.Matrix, error) {
	if d.host {
		return nil, sparse.Matrix{}, fmt.Errorf("%w: Empty on the host device", ErrNotDevice)
	}
	n := tensor.Shape(shape).TotalSize()
	m, err := d.Alloc(dt, n, 1)
	if err != nil {
		return nil, sparse.Matrix{}, err
	}
	t, err := d.Wrap(m, shape...)
	if err != nil {
		d.Release(m)
		return nil, sparse.Matrix{}, err
	}
	return t, m, nil
}

// LiveTensors returns the number of persistent tensors and of tensors of
// the open step (for tests and leak checks).
func (d *Device) LiveTensors() (persistent, step int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.step != nil {
		step = len(d.step.tensors) + len(d.step.raw)
	}
	return len(d.live), step
}
