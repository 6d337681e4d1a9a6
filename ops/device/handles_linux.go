//go:build linux

package device

import (
	"fmt"
	"syscall"
	"unsafe"
)

// reserve maps a large range of address space with no access rights and
// no backing store: touching it from the host faults.
func reserve() (base, size uintptr, keep []byte, protected bool, err error) {
	for _, want := range []uint64{1 << 40, 1 << 37, 1 << 34, 1 << 30} {
		if want > uint64(^uint(0)>>1) {
			continue // 32-bit address space
		}
		sz := int(want)
		b, e := syscall.Mmap(-1, 0, sz, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
		if e == nil {
			return uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(sz), b, true, nil
		}
		err = e
	}
	return 0, 0, nil, false, fmt.Errorf("%w: reserving address space: %v", ErrHandles, err)
}
