//go:build cudaext

package cudaext

/*
#include <cuda.h>
#include <stdlib.h>
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"
)

// printTimeline prints to stderr the stamps of the timeline probe
// (gather_ws.cuh, FG_TIMELINE; built by kernels/ceiling.sh and loaded
// through FLEXGEMM_KERNEL_IMAGE) that module m holds from its last
// launches, one line a stamp: "fgtl <block> <P|C> <i> <event> <cycles>",
// block 0 the grid's first and 1 its middle one, P producer thread 0, C
// consumer warp 0, cycles the SM's clock64. The embedded modules have no
// probe, and for them it does nothing.
func printTimeline(m C.CUmodule, s C.CUstream) {
	var p C.CUdeviceptr
	var n C.size_t
	name := C.CString("_ZN2fg9fg_tl_bufE")
	defer C.free(unsafe.Pointer(name))
	if C.cuModuleGetGlobal(&p, &n, m, name) != C.CUDA_SUCCESS || n == 0 {
		return
	}
	buf := make([]int64, int(n)/8)
	if err := memcpyDtoH(unsafe.Pointer(&buf[0]), devPtr(p), int64(n), s); err != nil {
		fmt.Fprintln(os.Stderr, "fgtl: copy:", err)
		return
	}
	for _, l := range timelineLines(buf) {
		fmt.Fprintln(os.Stderr, l)
	}
}
