//go:build !linux

package device

import "unsafe"

// reserve falls back to ordinary Go memory where the no-access reservation
// is not implemented: handles stay unique, but host access to a device
// tensor is not caught.
func reserve() (base, size uintptr, keep []byte, protected bool, err error) {
	keep = make([]byte, slotSpan)
	// The size is nominal: claimed lengths may run past keep, which is
	// harmless as long as nothing dereferences them.
	return uintptr(unsafe.Pointer(unsafe.SliceData(keep))), ^uintptr(0) >> 2, keep, false, nil
}
