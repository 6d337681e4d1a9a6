package device

import (
	"fmt"
	"unsafe"

	"github.com/flexgemm-go/flexgemm/sparse"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Engine is the gorgonia.org/tensor engine of a Device, to be given to
// Gorgonia's VM with gorgonia.WithEngine (see Device.VMOpt). The
// TapeMachine sets the VM's engine on every value it handles, and
// gorgonia.org/tensor dispatches the arithmetic of Gorgonia's built-in
// ops to it. For host tensors it is Gorgonia's standard engine. For
// device tensors it provides:
//
//   - Add (a + b, also with WithReuse, WithIncr and UseUnsafe): the
//     operation gorgonia.Grad inserts to sum the gradients of a node with
//     several consumers (a skip connection), and gorgonia.Add itself;
//   - Alloc, Memcpy, Memset and Memclr on device memory, so that Clone —
//     and with it gorgonia.Read of a device node — yields a device tensor.
//
// Every other operation of the standard engine refuses device tensors
// with an error ("natively inaccessible"), since their memory is not
// readable on the host. Built-in Gorgonia ops that read tensor data
// directly (slicing, gorgonia.Concat's gradient, printing values) cannot
// work on device tensors; the ops of package ops (ReLU, ConcatChannels,
// VoxelNorm, SoftmaxCrossEntropy, the convolutions) replace the built-ins
// a sparse network needs.
type Engine struct {
	gorgonia.StandardEngine
	d *Device
}

// Engine returns the device's tensor engine (Gorgonia's standard engine
// for the host device).
func (d *Device) Engine() tensor.Engine {
	if d.host {
		return gorgonia.StandardEngine{}
	}
	return d.eng
}

// VMOpt returns the option that makes a Gorgonia VM use the device's
// engine: gorgonia.NewTapeMachine(g, d.VMOpt()).
func (d *Device) VMOpt() gorgonia.VMOpt { return gorgonia.WithEngine(d.Engine()) }

// NonStdAlloc marks the engine as allocating its own memory, so that
// tensors created with it (clones of device tensors) live on the device.
func (e *Engine) NonStdAlloc() {}

// devMem is the tensor.Memory of an allocation made by Alloc.
type devMem struct {
	addr, size uintptr
}

func (m devMem) Uintptr() uintptr { return m.addr }
func (m devMem) MemSize() uintptr { return m.size }

// Alloc allocates size bytes of Float32 device storage (in the open step,
// if any) and returns its handle memory.
func (e *Engine) Alloc(size int64) (tensor.Memory, error) {
	d := e.d
	if size < 0 || size%4 != 0 {
		return nil, fmt.Errorf("%w: %s: Alloc of %d bytes (want a multiple of 4)", sparse.ErrShape, d.name, size)
	}
	n := int(size / 4)
	m, err := d.Alloc(sparse.Float32, n, 1)
	if err != nil {
		return nil, err
	}
	t, err := d.Wrap(m, n)
	if err != nil {
		d.Release(m)
		return nil, err
	}
	return devMem{addr: dataAddr(t), size: uintptr(size)}, nil
}

// memEntry returns the entry of device memory, (nil, nil) for host memory.
func memEntry(m tensor.Memory) (*entry, error) {
	addr := m.Uintptr()
	if !inHandleRange(addr) {
		return nil, nil
	}
	registry.RLock()
	e := registry.m[addr]
	registry.RUnlock()
	if e == nil || e.released.Load() {
		return nil, fmt.Errorf("%w: device memory at handle %#x", ErrReleased, addr)
	}
	return e, nil
}

// Free releases device memory; host memory is left to the Go GC.
func (e *Engine) Free(mem tensor.Memory, size int64) error {
	en, err := memEntry(mem)
	if en == nil || err != nil {
		return err
	}
	en.d.freeEntry(en)
	return nil
}

// Memset sets every element of device memory to val (a float).
func (e *Engine) Memset(mem tensor.Memory, val interface{}) error {
	en, err := memEntry(mem)
	if err != nil {
		return err
	}
	if en == nil {
		return e.StandardEngine.Memset(mem, val)
	}
	var v float32
	switch x := val.(type) {
	case float32:
		v = x
	case float64:
		v = float32(x)
	default:
		return fmt.Errorf("%w: %s: Memset with %T", sparse.ErrDType, en.d.name, val)
	}
	return en.d.Run("fill", func(NN) error { return en.d.mem.Fill(en.m, v) })
}

// Memclr zeroes device memory (float storage).
func (e *Engine) Memclr(mem tensor.Memory) {
	en, err := memEntry(mem)
	if err != nil {
		return
	}
	if en == nil {
		e.StandardEngine.Memclr(mem)
		return
	}
	_ = en.d.Run("fill", func(NN) error { return en.d.mem.Fill(en.m, 0) })
}

// Memcpy copies src into dst. Device to device copies (converting the
// storage dtype) stay on the device; a copy between host and device memory
// is a transfer, counted under Other.
func (e *Engine) Memcpy(dst, src tensor.Memory) error {
	de, err := memEntry(dst)
	if err != nil {
		return err
	}
	se, err := memEntry(src)
	if err != nil {
		return err
	}
	switch {
	case de == nil && se == nil:
		return e.StandardEngine.Memcpy(dst, src)
	case de != nil && se != nil:
		if de.d != se.d {
			return fmt.Errorf("%w: Memcpy from %s to %s", ErrMixed, se.d.name, de.d.name)
		}
		if de.m.Rows != se.m.Rows {
			return fmt.Errorf("%w: Memcpy of %d elements into %d", sparse.ErrShape, se.m.Rows, de.m.Rows)
		}
		return de.d.Run("copy", func(nn NN) error { return nn.Copy(de.m, se.m) })
	case se != nil: // device → host
		h, err := se.d.Download(se.m, Other)
		if err != nil {
			return err
		}
		return copyHost(dst, h)
	default: // host → device: float32 host bytes
		n := int(src.MemSize() / 4)
		if n != de.m.Rows {
			return fmt.Errorf("%w: Memcpy of %d host bytes into %d device elements", sparse.ErrShape, src.MemSize(), de.m.Rows)
		}
		var hs []float32
		if n > 0 {
			hs = append(hs, unsafe.Slice((*float32)(ptrOf(src.Uintptr())), n)...)
		}
		m, err := de.d.Upload(sparse.Matrix{Rows: n, Cols: 1, Data: hs}, sparse.Float32, Other)
		if err != nil {
			return err
		}
		defer de.d.Release(m)
		return de.d.Run("copy", func(nn NN) error { return nn.Copy(de.m, m) })
	}
}

// copyHost writes a downloaded matrix into host memory of the same size.
func copyHost(dst tensor.Memory, h sparse.Matrix) error {
	var src []byte
	switch s := h.Data.(type) {
	case []float32:
		if len(s) > 0 {
			src = unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
		}
	case []int32:
		if len(s) > 0 {
			src = unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
		}
	}
	if uintptr(len(src)) != dst.MemSize() {
		return fmt.Errorf("%w: Memcpy of %d device bytes into %d host bytes", sparse.ErrShape, len(src), dst.MemSize())
	}
	if len(src) > 0 {
		copy(unsafe.Slice((*byte)(ptrOf(dst.Uintptr())), len(src)), src)
	}
	return nil
}

// Accessible returns host memory as it is and refuses device memory.
func (e *Engine) Accessible(mem tensor.Memory) (tensor.Memory, error) {
	if inHandleRange(mem.Uintptr()) {
		return nil, fmt.Errorf("%w: device memory is not accessible from the host; copy it with Device.ToHost", ErrUnsupported)
	}
	return mem, nil
}

// Add computes a + b. For device tensors (both on this engine's device,
// with the same number of elements) it runs the device kernel; the result
// is a new tensor in the wider storage dtype of the two, or WithReuse's
// tensor, or a (UseUnsafe), or, with WithIncr, incr += a + b.
func (e *Engine) Add(a, b tensor.Tensor, opts ...tensor.FuncOpt) (tensor.Tensor, error) {
	ea, err := lookup(a)
	if err != nil {
		return nil, err
	}
	eb, err := lookup(b)
	if err != nil {
		return nil, err
	}
	if ea == nil && eb == nil {
		return e.StandardEngine.Add(a, b, opts...)
	}
	if ea == nil || eb == nil || ea.d != eb.d {
		return nil, fmt.Errorf("%w: Add of %s and %s tensors", ErrMixed, where(ea), where(eb))
	}
	d := ea.d
	if ea.m.Rows != eb.m.Rows {
		return nil, fmt.Errorf("%w: %s: Add of shapes %v and %v", sparse.ErrShape, d.name, a.Shape(), b.Shape())
	}
	fo := tensor.ParseFuncOpts(opts...)
	var dst tensor.Tensor
	var dm sparse.Matrix
	switch {
	case fo.Incr() != nil:
		ie, err := lookup(fo.Incr())
		if err != nil {
			return nil, err
		}
		if ie == nil || ie.d != d || ie.m.Rows != ea.m.Rows {
			return nil, fmt.Errorf("%w: %s: WithIncr tensor is not a device tensor of %d elements", ErrMixed, d.name, ea.m.Rows)
		}
		err = d.Run("add", func(nn NN) error {
			if err := nn.Add(ie.m, ie.m, ea.m); err != nil {
				return err
			}
			return nn.Add(ie.m, ie.m, eb.m)
		})
		return fo.Incr(), err
	case fo.Reuse() != nil:
		re, err := lookup(fo.Reuse())
		if err != nil {
			return nil, err
		}
		if re == nil || re.d != d || re.m.Rows != ea.m.Rows {
			return nil, fmt.Errorf("%w: %s: WithReuse tensor is not a device tensor of %d elements", ErrMixed, d.name, ea.m.Rows)
		}
		dst, dm = fo.Reuse(), re.m
	case !fo.Safe():
		dst, dm = a, ea.m
	default:
		dt := wider(storageOf(ea.m).DType(), storageOf(eb.m).DType())
		t, m, err := d.Empty(dt, a.Shape().Clone()...)
		if err != nil {
			return nil, err
		}
		dst, dm = t, m
	}
	if err := d.Run("add", func(nn NN) error { return nn.Add(dm, ea.m, eb.m) }); err != nil {
		return nil, err
	}
	return dst, nil
}

func where(e *entry) string {
	if e == nil {
		return "host"
	}
	return e.d.name
}

// wider returns the float dtype with more precision of a and b.
func wider(a, b sparse.DType) sparse.DType {
	if a == sparse.Float32 || b == sparse.Float32 {
		return sparse.Float32
	}
	if a == b {
		return a
	}
	return sparse.Float32 // float16 with bfloat16
}

// ptrOf turns the address of host memory that tensor.Memory reports back
// into a pointer (the memory is kept alive by its tensor).
func ptrOf(addr uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&addr)) }

// Concat refuses device tensors with an error that names the replacement:
// gorgonia.Concat's gradient slices tensor views on the host, which device
// tensors do not allow. Host tensors are concatenated by the standard
// engine.
func (e *Engine) Concat(t tensor.Tensor, axis int, others ...tensor.Tensor) (tensor.Tensor, error) {
	for _, x := range append([]tensor.Tensor{t}, others...) {
		if IsDevice(x) {
			return nil, fmt.Errorf("%w: gorgonia.Concat of device tensors (its gradient slices tensor views on the host); use ops.ConcatChannels", ErrUnsupported)
		}
	}
	return e.StandardEngine.Concat(t, axis, others...)
}

// refuse returns an error naming the replacement when any of ts is a
// device tensor, and nil otherwise.
func refuse(what, instead string, ts ...tensor.Tensor) error {
	for _, x := range ts {
		if IsDevice(x) {
			return fmt.Errorf("%w: %s of device tensors; use %s", ErrUnsupported, what, instead)
		}
	}
	return nil
}

// Gte refuses device tensors (gorgonia.Rectify compares with Gte; use
// ops.ReLU) and compares host tensors.
func (e *Engine) Gte(a, b tensor.Tensor, opts ...tensor.FuncOpt) (tensor.Tensor, error) {
	if err := refuse("a comparison (gorgonia.Rectify)", "ops.ReLU", a, b); err != nil {
		return nil, err
	}
	return e.StandardEngine.Gte(a, b, opts...)
}

// GteScalar refuses device tensors (see Gte).
func (e *Engine) GteScalar(a tensor.Tensor, b interface{}, leftTensor bool, opts ...tensor.FuncOpt) (tensor.Tensor, error) {
	if err := refuse("a comparison (gorgonia.Rectify)", "ops.ReLU", a); err != nil {
		return nil, err
	}
	return e.StandardEngine.GteScalar(a, b, leftTensor, opts...)
}
