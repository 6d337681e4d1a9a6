//go:build cudaext

package cudaext

// The CUDA driver API calls the engine needs, bound directly with cgo.
//
// gorgonia.org/cu is not used: its package init calls cuInit and exits the
// process when no GPU is present (so merely linking it kills CPU-only
// programs), its Function.Launch copies only 8 bytes per kernel parameter,
// and it lacks cuFuncSetAttribute. Here nothing runs at import time; cuInit
// is called by Open, which reports a missing GPU as an error. The binary
// still needs libcuda.so.1 (the NVIDIA driver library) to start.

/*
#cgo LDFLAGS: -lcuda
#cgo linux LDFLAGS: -L/usr/local/cuda/lib64 -L/usr/local/cuda/lib64/stubs -L/usr/lib/x86_64-linux-gnu
#cgo linux CFLAGS: -I/usr/local/cuda/include -I/usr/include
#include <cuda.h>
#include <stdlib.h>

static CUresult fg_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s, void **params) {
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, params, NULL);
}

static CUresult fg_module_load(CUmodule *m, const void *image, char *log, size_t logsize) {
	CUjit_option opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *vals[2] = {log, (void *)logsize};
	return cuModuleLoadDataEx(m, image, 2, opts, vals);
}

static const char *fg_error_name(CUresult r) {
	const char *s = NULL;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == NULL) return "CUDA_ERROR_UNKNOWN_CODE";
	return s;
}

static const char *fg_error_string(CUresult r) {
	const char *s = NULL;
	if (cuGetErrorString(r, &s) != CUDA_SUCCESS || s == NULL) return "";
	return s;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// cuOK converts a CUresult into nil or a *DriverError naming the call.
func cuOK(r C.CUresult, op string) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return &DriverError{Code: int(r), Op: op, Name: C.GoString(C.fg_error_name(r)), Msg: C.GoString(C.fg_error_string(r))}
}

// Driver result codes the engine reacts to.
const (
	cuErrOutOfMemory = int(C.CUDA_ERROR_OUT_OF_MEMORY)
	cuErrNoDevice    = int(C.CUDA_ERROR_NO_DEVICE)
	cuErrNotFound    = int(C.CUDA_ERROR_NOT_FOUND)
)

type (
	devPtr     = C.CUdeviceptr
	cuDevice   = C.CUdevice
	cuContext  = C.CUcontext
	cuStream   = C.CUstream
	cuModule   = C.CUmodule
	cuFunction = C.CUfunction
	cuEvent    = C.CUevent
)

func driverInit() error { return cuOK(C.cuInit(0), "cuInit") }

func driverVersion() int {
	var v C.int
	if C.cuDriverGetVersion(&v) != C.CUDA_SUCCESS {
		return -1
	}
	return int(v)
}

func deviceCount() (int, error) {
	var n C.int
	if err := cuOK(C.cuDeviceGetCount(&n), "cuDeviceGetCount"); err != nil {
		return 0, err
	}
	return int(n), nil
}

// deviceProps reads the properties of device ordinal.
func deviceProps(ordinal int) (C.CUdevice, DeviceInfo, error) {
	var dev C.CUdevice
	if err := cuOK(C.cuDeviceGet(&dev, C.int(ordinal)), "cuDeviceGet"); err != nil {
		return dev, DeviceInfo{}, err
	}
	var buf [256]C.char
	if err := cuOK(C.cuDeviceGetName(&buf[0], C.int(len(buf)), dev), "cuDeviceGetName"); err != nil {
		return dev, DeviceInfo{}, err
	}
	attr := func(a C.CUdevice_attribute) int {
		var v C.int
		C.cuDeviceGetAttribute(&v, a, dev)
		return int(v)
	}
	var total C.size_t
	if err := cuOK(C.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem"); err != nil {
		return dev, DeviceInfo{}, err
	}
	info := DeviceInfo{
		Ordinal:       ordinal,
		Name:          C.GoString(&buf[0]),
		Major:         attr(C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
		Minor:         attr(C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
		SMs:           attr(C.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
		MaxSmemBlock:  attr(C.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
		L2Bytes:       attr(C.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
		TotalMem:      int64(total),
		DriverVersion: driverVersion(),
	}
	return dev, info, nil
}

func primaryCtxRetain(dev C.CUdevice) (C.CUcontext, error) {
	var ctx C.CUcontext
	err := cuOK(C.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain")
	return ctx, err
}

func primaryCtxRelease(dev C.CUdevice) error {
	return cuOK(C.cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease")
}

func ctxSetCurrent(ctx C.CUcontext) error { return cuOK(C.cuCtxSetCurrent(ctx), "cuCtxSetCurrent") }

func streamCreate() (C.CUstream, error) {
	var s C.CUstream
	err := cuOK(C.cuStreamCreate(&s, C.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
	return s, err
}

func streamSync(s C.CUstream) error { return cuOK(C.cuStreamSynchronize(s), "cuStreamSynchronize") }

func streamDestroy(s C.CUstream) error { return cuOK(C.cuStreamDestroy(s), "cuStreamDestroy") }

// moduleLoad loads a fatbin/cubin/PTX image; the JIT error log is part of
// the error.
func moduleLoad(image []byte) (C.CUmodule, error) {
	var m C.CUmodule
	if len(image) == 0 {
		return m, fmt.Errorf("cudaext: empty module image")
	}
	// Copy into C memory: the driver wants an aligned, stable image.
	cimg := C.malloc(C.size_t(len(image)))
	defer C.free(cimg)
	copy(unsafe.Slice((*byte)(cimg), len(image)), image)
	const logSize = 8192
	log := (*C.char)(C.calloc(logSize, 1))
	defer C.free(unsafe.Pointer(log))
	if err := cuOK(C.fg_module_load(&m, cimg, log, logSize), "cuModuleLoadDataEx"); err != nil {
		if s := C.GoString(log); s != "" {
			return m, fmt.Errorf("%w: %s", err, s)
		}
		return m, err
	}
	return m, nil
}

func moduleUnload(m C.CUmodule) error { return cuOK(C.cuModuleUnload(m), "cuModuleUnload") }

// moduleFunction returns the kernel named name, or ok = false if the module
// has none.
func moduleFunction(m C.CUmodule, name string) (C.CUfunction, bool, error) {
	var f C.CUfunction
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	err := cuOK(C.cuModuleGetFunction(&f, m, cname), "cuModuleGetFunction")
	if de, isDE := err.(*DriverError); isDE && de.Code == cuErrNotFound {
		return f, false, nil
	}
	return f, err == nil, err
}

func funcSetMaxDynamicSmem(f C.CUfunction, bytes int) error {
	return cuOK(C.cuFuncSetAttribute(f, C.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, C.int(bytes)),
		"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
}

func funcMaxThreads(f C.CUfunction) int {
	var v C.int
	C.cuFuncGetAttribute(&v, C.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f)
	return int(v)
}

func launchKernel(f C.CUfunction, grid, block dim3, smem int, s C.CUstream, params unsafe.Pointer) error {
	return cuOK(C.fg_launch(f, C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z), C.uint(block.X), C.uint(block.Y),
		C.uint(block.Z), C.uint(smem), s, (*unsafe.Pointer)(params)), "cuLaunchKernel")
}

func memAlloc(bytes int64) (devPtr, error) {
	var p devPtr
	err := cuOK(C.cuMemAlloc(&p, C.size_t(bytes)), "cuMemAlloc")
	return p, err
}

func memFree(p devPtr) error { return cuOK(C.cuMemFree(p), "cuMemFree") }

func memInfo() (free, total int64, err error) {
	var f, t C.size_t
	err = cuOK(C.cuMemGetInfo(&f, &t), "cuMemGetInfo")
	return int64(f), int64(t), err
}

// memcpyHtoD copies len(src) bytes from host memory; it returns once the
// host buffer may be reused (pageable memory is staged before the call
// returns).
func memcpyHtoD(dst devPtr, src unsafe.Pointer, bytes int64, s C.CUstream) error {
	if bytes == 0 {
		return nil
	}
	return cuOK(C.cuMemcpyHtoDAsync(dst, src, C.size_t(bytes), s), "cuMemcpyHtoDAsync")
}

// memcpyDtoH copies into host memory and waits for the copy.
func memcpyDtoH(dst unsafe.Pointer, src devPtr, bytes int64, s C.CUstream) error {
	if bytes == 0 {
		return nil
	}
	if err := cuOK(C.cuMemcpyDtoHAsync(dst, src, C.size_t(bytes), s), "cuMemcpyDtoHAsync"); err != nil {
		return err
	}
	return streamSync(s)
}

func memcpyDtoD(dst, src devPtr, bytes int64, s C.CUstream) error {
	if bytes == 0 {
		return nil
	}
	return cuOK(C.cuMemcpyDtoDAsync(dst, src, C.size_t(bytes), s), "cuMemcpyDtoDAsync")
}

func memsetD32(dst devPtr, v uint32, n int64, s C.CUstream) error {
	if n == 0 {
		return nil
	}
	return cuOK(C.cuMemsetD32Async(dst, C.uint(v), C.size_t(n), s), "cuMemsetD32Async")
}

func memsetD16(dst devPtr, v uint16, n int64, s C.CUstream) error {
	if n == 0 {
		return nil
	}
	return cuOK(C.cuMemsetD16Async(dst, C.ushort(v), C.size_t(n), s), "cuMemsetD16Async")
}

func memsetD8(dst devPtr, v uint8, n int64, s C.CUstream) error {
	if n == 0 {
		return nil
	}
	return cuOK(C.cuMemsetD8Async(dst, C.uchar(v), C.size_t(n), s), "cuMemsetD8Async")
}

// Events, used for timing.

func eventCreate() (C.CUevent, error) {
	var e C.CUevent
	err := cuOK(C.cuEventCreate(&e, C.CU_EVENT_DEFAULT), "cuEventCreate")
	return e, err
}

func eventRecord(e C.CUevent, s C.CUstream) error {
	return cuOK(C.cuEventRecord(e, s), "cuEventRecord")
}

func eventSync(e C.CUevent) error { return cuOK(C.cuEventSynchronize(e), "cuEventSynchronize") }

func eventElapsed(start, end C.CUevent) (float32, error) {
	var ms C.float
	err := cuOK(C.cuEventElapsedTime(&ms, start, end), "cuEventElapsedTime")
	return float32(ms), err
}

func eventDestroy(e C.CUevent) error { return cuOK(C.cuEventDestroy(e), "cuEventDestroy") }

// cMalloc returns zeroed C memory (for kernel argument staging).
func cMalloc(bytes int) unsafe.Pointer { return C.calloc(C.size_t(bytes), 1) }

func cFree(p unsafe.Pointer) { C.free(p) }
