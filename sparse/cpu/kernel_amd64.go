//go:build amd64 && !purego

package cpu

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// The assembly micro-kernels (kernel_amd64.s). Each computes one mr×nr
// block with the contract of kernelFunc; rs, ks, ldb and the entries of
// coff are in elements. k must be positive.

//go:noescape
func sgemmAVX512(k int, a *float32, rs, ks int, b *float32, ldb int, c *float32, coff *int)

//go:noescape
func dgemmAVX512(k int, a *float64, rs, ks int, b *float64, ldb int, c *float64, coff *int)

//go:noescape
func sgemmAVX512N(k int, a *float32, rs, ks int, b *float32, ldb int, c *float32, coff *int)

//go:noescape
func dgemmAVX512N(k int, a *float64, rs, ks int, b *float64, ldb int, c *float64, coff *int)

//go:noescape
func sgemmAVX2(k int, a *float32, rs, ks int, b *float32, ldb int, c *float32, coff *int)

//go:noescape
func dgemmAVX2(k int, a *float64, rs, ks int, b *float64, ldb int, c *float64, coff *int)

// asmKernel wraps an assembly kernel with the bounds checks that keep it
// memory safe.
func asmKernel[T Float](name string, mr, nr int, f func(k int, a *T, rs, ks int, b *T, ldb int, c *T, coff *int)) microKernel[T] {
	return microKernel[T]{name: name, mr: mr, nr: nr, fn: func(k int, a []T, rs, ks int, b []T, ldb int, c []T, coff []int) {
		if k <= 0 {
			return
		}
		checkKernelArgs(mr, nr, k, a, rs, ks, b, ldb, c, coff)
		f(k, unsafe.SliceData(a), rs, ks, unsafe.SliceData(b), ldb, unsafe.SliceData(c), unsafe.SliceData(coff))
	}}
}

// asmKernels32 lists the float32 assembly kernels this CPU can run,
// fastest first.
func asmKernels32() []microKernel[float32] {
	var ks []microKernel[float32]
	if cpu.X86.HasAVX512F {
		ks = append(ks, asmKernel("avx512-12x32", 12, 32, sgemmAVX512), asmKernel("avx512-12x16", 12, 16, sgemmAVX512N))
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, asmKernel("avx2-6x16", 6, 16, sgemmAVX2))
	}
	return ks
}

// asmKernels64 lists the float64 assembly kernels this CPU can run,
// fastest first.
func asmKernels64() []microKernel[float64] {
	var ks []microKernel[float64]
	if cpu.X86.HasAVX512F {
		ks = append(ks, asmKernel("avx512-12x16", 12, 16, dgemmAVX512), asmKernel("avx512-12x8", 12, 8, dgemmAVX512N))
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, asmKernel("avx2-6x8", 6, 8, dgemmAVX2))
	}
	return ks
}

func init() {
	switch {
	case cpu.X86.HasAVX512F:
		k32, k64 := asmKernels32(), asmKernels64()
		kernels32 = kernelSet[float32]{wide: k32[0], narrow: k32[1]}
		kernels64 = kernelSet[float64]{wide: k64[0], narrow: k64[1]}
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		k32, k64 := asmKernels32(), asmKernels64()
		kernels32 = kernelSet[float32]{wide: k32[0], narrow: k32[0]}
		kernels64 = kernelSet[float64]{wide: k64[0], narrow: k64[0]}
	}
}

//go:noescape
func gather32AVX512(dst unsafe.Pointer, dstStride int, src unsafe.Pointer, srcStride int, idx *int32, n, width int)

// haveGatherAsm reports whether gatherAsm uses the assembly row gather.
var haveGatherAsm = cpu.X86.HasAVX512F

// setGather turns the assembly row gather on or off (tests).
func setGather(on bool) { haveGatherAsm = on }

// gatherAsm runs the assembly row gather if the CPU has it (see
// gatherRows, which has checked the bounds) and reports whether it did.
func gatherAsm[T Float](dst []T, dstStride int, src []T, srcStride int, idx []int32, width int) bool {
	if !haveGatherAsm {
		return false
	}
	u := int(unsafe.Sizeof(dst[0])) / 4 // 4-byte units per element
	gather32AVX512(unsafe.Pointer(unsafe.SliceData(dst)), dstStride*u, unsafe.Pointer(unsafe.SliceData(src)), srcStride*u, unsafe.SliceData(idx), len(idx), width*u)
	return true
}
