package cudaext

import (
	"errors"
	"fmt"
)

// Sentinel errors of the CUDA engine. Functions wrap them with %w and a
// message naming the offending value.
var (
	// ErrNoDevice reports that no usable CUDA GPU (or driver) is present,
	// or that the ordinal passed to Open does not exist.
	ErrNoDevice = errors.New("cudaext: no CUDA device")
	// ErrOutOfMemory reports a device allocation that failed even after
	// the allocator released its cache.
	ErrOutOfMemory = errors.New("cudaext: out of device memory")
	// ErrClosed reports use of an engine after Close.
	ErrClosed = errors.New("cudaext: engine closed")
	// ErrForeign reports a matrix whose data this engine does not own
	// (host data, or a buffer of another device).
	ErrForeign = errors.New("cudaext: data not owned by this engine")
	// ErrFreed reports use of a buffer after Free.
	ErrFreed = errors.New("cudaext: buffer already freed")
	// ErrLaunch reports a kernel that could not be found or launched.
	ErrLaunch = errors.New("cudaext: kernel launch failed")
	// ErrReleased reports use of a kernel map built on the device whose
	// tables ReleaseMap (or Close) dropped before they were ever loaded to
	// the host.
	ErrReleased = errors.New("cudaext: kernel map tables released")
)

// DriverError is a failed CUDA driver call.
type DriverError struct {
	Code int    // CUresult
	Op   string // the driver function, e.g. "cuMemAlloc"
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Msg  string // the driver's description
}

// Error implements the error interface for DriverError.
func (e *DriverError) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("cudaext: %s: %s (%s)", e.Op, e.Name, e.Msg)
	}
	return fmt.Sprintf("cudaext: %s: %s", e.Op, e.Name)
}

// DeviceInfo describes an opened GPU.
type DeviceInfo struct {
	Ordinal       int
	Name          string
	Major, Minor  int   // compute capability
	SMs           int   // multiprocessors
	MaxSmemBlock  int   // opt-in shared memory per block, bytes
	SmemPerSM     int   // shared memory per multiprocessor, bytes
	SmemReserved  int   // shared memory the system reserves per block, bytes
	L2Bytes       int   // L2 cache size
	TotalMem      int64 // device memory, bytes
	DriverVersion int   // e.g. 13000
	// PCIBusID is the device's PCI address, domain:bus:device.function in
	// hexadecimal (e.g. "0:1b:0.0"), a form NVML's
	// nvmlDeviceGetHandleByPciBusId accepts.
	PCIBusID string
}

// MemStats reports the caching allocator of a device. Bytes are the
// rounded sizes the allocator hands out.
type MemStats struct {
	InUse        int64 // bytes held by live buffers and tables
	Cached       int64 // bytes kept for reuse
	PeakInUse    int64 // maximum of InUse since Open or ResetPeak
	PeakReserved int64 // maximum of InUse + Cached
	DriverAllocs int64 // cuMemAlloc calls
	CacheHits    int64 // allocations served from the cache
}
