package device

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Device tensors are *tensor.Dense values whose memory pointer is a
// handle: an address inside a range of virtual memory this package
// reserves without any access rights (see reserve). The registry maps a
// handle to the device storage. Gorgonia and gorgonia.org/tensor see an
// ordinary manually managed Dense; any code that dereferences it on the
// host faults at once (on Linux), for every backend alike, instead of
// reading device addresses or stale memory.

const (
	slotBytes = 256     // distance between handles
	slotCount = 1 << 20 // live device tensors at most
	slotSpan  = slotBytes * slotCount
)

// handleSpace hands out handle addresses. Freed slots are reused.
type handleSpace struct {
	once      sync.Once
	err       error
	base      uintptr
	size      uintptr
	protected bool // host access faults
	keep      []byte
	start     atomic.Uintptr // base, published once the range is reserved

	mu   sync.Mutex
	next uintptr   // slots never handed out start here
	free []uintptr // freed slots
}

var handles handleSpace

func (h *handleSpace) init() error {
	h.once.Do(func() {
		h.base, h.size, h.keep, h.protected, h.err = reserve()
		if h.err == nil && h.size <= slotSpan {
			h.err = fmt.Errorf("%w: reserved only %d bytes of address space for tensor handles", ErrHandles, h.size)
		}
		if h.err == nil {
			h.start.Store(h.base)
		}
	})
	return h.err
}

// get returns a new handle for a tensor claiming bytes bytes.
func (h *handleSpace) get(bytes uintptr) (uintptr, error) {
	if err := h.init(); err != nil {
		return 0, err
	}
	if bytes > h.size-slotSpan {
		return 0, fmt.Errorf("%w: a tensor of %d bytes exceeds the %d-byte handle range", ErrHandles, bytes, h.size-slotSpan)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var slot uintptr
	switch {
	case len(h.free) > 0:
		slot = h.free[len(h.free)-1]
		h.free = h.free[:len(h.free)-1]
	case h.next < slotCount:
		slot = h.next
		h.next++
	default:
		return 0, fmt.Errorf("%w: more than %d device tensors alive at once", ErrHandles, slotCount)
	}
	return h.base + slot*slotBytes, nil
}

// put returns a handle for reuse.
func (h *handleSpace) put(addr uintptr) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.free = append(h.free, (addr-h.base)/slotBytes)
}

// Protected reports whether host access to device tensors faults (true on
// Linux, where the handle range is reserved with no access rights).
func Protected() bool {
	if handles.init() != nil {
		return false
	}
	return handles.protected
}
