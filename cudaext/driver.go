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
#include <string.h>

static CUresult fg_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s, void **params) {
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, params, NULL);
}

// fg_launch_ex launches f through cuLaunchKernelEx with one attribute:
// with coop, as a cooperative grid (every block resident at once, or the
// launch fails with CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE); otherwise
// with programmatic stream serialization: its blocks may start before the
// kernel ahead of it in stream s has finished (the kernel must wait for it
// first: pdl.cuh).
static CUresult fg_launch_ex(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s, void **params, int coop) {
	CUlaunchAttribute attr;
	memset(&attr, 0, sizeof attr);
	if (coop) {
		attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
		attr.value.cooperative = 1;
	} else {
		attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
		attr.value.programmaticStreamSerializationAllowed = 1;
	}
	CUlaunchConfig cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.gridDimX = gx; cfg.gridDimY = gy; cfg.gridDimZ = gz;
	cfg.blockDimX = bx; cfg.blockDimY = by; cfg.blockDimZ = bz;
	cfg.sharedMemBytes = smem;
	cfg.hStream = s;
	cfg.attrs = &attr;
	cfg.numAttrs = 1;
	return cuLaunchKernelEx(&cfg, f, params, NULL);
}

static CUresult fg_module_load(CUmodule *m, const void *image, char *log, size_t logsize) {
	CUjit_option opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *vals[2] = {log, (void *)logsize};
	return cuModuleLoadDataEx(m, image, 2, opts, vals);
}

// cuTensorMapEncodeTiled (driver 12.0+), looked up at run time: the
// headers this is built with (CUDA 11.8) do not declare it.
typedef CUresult (*fg_encode_tiled_fn)(void *map, int dtype, cuuint32_t rank, void *addr, const cuuint64_t *dims,
	const cuuint64_t *strides, const cuuint32_t *box, const cuuint32_t *estrides, int interleave, int swizzle,
	int l2promotion, int oobfill);
static fg_encode_tiled_fn fg_encode_tiled = NULL;

// fg_tensor_map_3d writes into out (128 bytes) the tensor map of a 3-D
// array of elem-byte elements at addr (dims d0 innermost, byte strides s1,
// s2 of dims 1, 2) with boxes b0 × b1 × b2, the 128-byte swizzle, zeros out
// of bounds. CUDA_ERROR_NOT_FOUND: the driver has no tensor maps.
static CUresult fg_tensor_map_3d(void *out, CUdeviceptr addr, int elem, cuuint64_t d0, cuuint64_t d1, cuuint64_t d2,
		cuuint64_t s1, cuuint64_t s2, cuuint32_t b0, cuuint32_t b1, cuuint32_t b2) {
	if (fg_encode_tiled == NULL) {
		void *fn = NULL;
		CUresult r = cuGetProcAddress("cuTensorMapEncodeTiled", &fn, 12000, 0);
		if (r != CUDA_SUCCESS) return r;
		if (fn == NULL) return CUDA_ERROR_NOT_FOUND;
		fg_encode_tiled = (fg_encode_tiled_fn)fn;
	}
	cuuint64_t dims[3] = {d0, d1, d2}, strides[2] = {s1, s2};
	cuuint32_t box[3] = {b0, b1, b2}, estrides[3] = {1, 1, 1};
	unsigned long long map[16] __attribute__((aligned(64)));
	// Data type UINT16 (1) or UINT32 (2): the copies move bits; interleave
	// none (0), swizzle 128 B (3), L2 promotion 128 B (2), zero fill (0).
	CUresult r = fg_encode_tiled(map, elem == 2 ? 1 : 2, 3, (void *)addr, dims, strides, box, estrides, 0, 3, 2, 0);
	if (r == CUDA_SUCCESS) memcpy(out, map, sizeof map);
	return r;
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
	cuErrCoopTooBig  = int(C.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)
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
		SmemPerSM:     attr(C.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
		SmemReserved:  attr(C.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK),
		L2Bytes:       attr(C.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
		TotalMem:      int64(total),
		DriverVersion: driverVersion(),
		PCIBusID: fmt.Sprintf("%x:%x:%x.0", attr(C.CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID), attr(C.CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
			attr(C.CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)),
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

// streamWaitEvent makes the work queued on s after this call wait for the
// work before the last record of e (no host wait).
func streamWaitEvent(s C.CUstream, e C.CUevent) error {
	return cuOK(C.cuStreamWaitEvent(s, e, 0), "cuStreamWaitEvent")
}

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

// funcMaxActiveBlocks returns how many blocks of f, of threads threads and
// smem bytes of dynamic shared memory, one SM holds at once.
func funcMaxActiveBlocks(f C.CUfunction, threads, smem int) (int, error) {
	var n C.int
	err := cuOK(C.cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, C.int(threads), C.size_t(smem)),
		"cuOccupancyMaxActiveBlocksPerMultiprocessor")
	return int(n), err
}

func funcStaticSmem(f C.CUfunction) int {
	var v C.int
	C.cuFuncGetAttribute(&v, C.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f)
	return int(v)
}

func funcMaxThreads(f C.CUfunction) int {
	var v C.int
	C.cuFuncGetAttribute(&v, C.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f)
	return int(v)
}

// tensorMap3D encodes the TMA descriptor of a 3-D array of elem-byte
// elements at addr: dims (innermost first), byte strides of dims 1 and 2,
// box extents; 128-byte swizzle, zeros out of bounds.
func tensorMap3D(out *[16]uint64, addr devPtr, elem int, dims [3]int64, strides [2]int64, box [3]int) error {
	return cuOK(C.fg_tensor_map_3d(unsafe.Pointer(out), addr, C.int(elem), C.cuuint64_t(dims[0]), C.cuuint64_t(dims[1]),
		C.cuuint64_t(dims[2]), C.cuuint64_t(strides[0]), C.cuuint64_t(strides[1]), C.cuuint32_t(box[0]),
		C.cuuint32_t(box[1]), C.cuuint32_t(box[2])), "cuTensorMapEncodeTiled")
}

// launchKernel queues kernel f on stream s; with pdl, through
// cuLaunchKernelEx with programmatic stream serialization (f must open
// with fg_await_prior_grid, kernels.KernelWaits); with coop, as a
// cooperative grid (pdl is then ignored).
func launchKernel(f C.CUfunction, grid, block dim3, smem int, s C.CUstream, params unsafe.Pointer, pdl, coop bool) error {
	if pdl || coop {
		c := C.int(0)
		if coop {
			c = 1
		}
		return cuOK(C.fg_launch_ex(f, C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z), C.uint(block.X), C.uint(block.Y),
			C.uint(block.Z), C.uint(smem), s, (*unsafe.Pointer)(params), c), "cuLaunchKernelEx")
	}
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

// memcpyDtoHAsync starts a copy into page-locked host memory (memAllocHost)
// behind the stream's work and returns without waiting for it.
func memcpyDtoHAsync(dst unsafe.Pointer, src devPtr, bytes int64, s C.CUstream) error {
	return cuOK(C.cuMemcpyDtoHAsync(dst, src, C.size_t(bytes), s), "cuMemcpyDtoHAsync")
}

// memAllocHost returns bytes of page-locked host memory, which copies fill
// without the host waiting for them.
func memAllocHost(bytes int64) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := cuOK(C.cuMemAllocHost(&p, C.size_t(bytes)), "cuMemAllocHost")
	return p, err
}

func memFreeHost(p unsafe.Pointer) error { return cuOK(C.cuMemFreeHost(p), "cuMemFreeHost") }

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

// eventCreateOrdering creates an event without timing, for ordering one
// stream after another (streamWaitEvent): cheaper to record and wait on.
func eventCreateOrdering() (C.CUevent, error) {
	var e C.CUevent
	err := cuOK(C.cuEventCreate(&e, C.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
	return e, err
}

func eventRecord(e C.CUevent, s C.CUstream) error {
	return cuOK(C.cuEventRecord(e, s), "cuEventRecord")
}

func eventSync(e C.CUevent) error { return cuOK(C.cuEventSynchronize(e), "cuEventSynchronize") }

// eventDone reports whether the device has passed the work recorded
// before e (cuEventQuery), without waiting.
func eventDone(e C.CUevent) (bool, error) {
	r := C.cuEventQuery(e)
	if r == C.CUDA_ERROR_NOT_READY {
		return false, nil
	}
	return r == C.CUDA_SUCCESS, cuOK(r, "cuEventQuery")
}

func eventElapsed(start, end C.CUevent) (float32, error) {
	var ms C.float
	err := cuOK(C.cuEventElapsedTime(&ms, start, end), "cuEventElapsedTime")
	return float32(ms), err
}

func eventDestroy(e C.CUevent) error { return cuOK(C.cuEventDestroy(e), "cuEventDestroy") }

// cMalloc returns zeroed C memory (for kernel argument staging).
func cMalloc(bytes int) unsafe.Pointer { return C.calloc(C.size_t(bytes), 1) }

func cFree(p unsafe.Pointer) { C.free(p) }
