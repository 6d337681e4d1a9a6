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

// asmKernels lists the assembly kernels this CPU can run, fastest first.
func asmKernels32() []microKernel[float32] {
	var ks []microKernel[float32]
	if cpu.X86.HasAVX512F {
		ks = append(ks, asmKernel("avx512-12x32", 12, 32, sgemmAVX512))
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, asmKernel("avx2-6x16", 6, 16, sgemmAVX2))
	}
	return ks
}

func asmKernels64() []microKernel[float64] {
	var ks []microKernel[float64]
	if cpu.X86.HasAVX512F {
		ks = append(ks, asmKernel("avx512-12x16", 12, 16, dgemmAVX512))
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, asmKernel("avx2-6x8", 6, 8, dgemmAVX2))
	}
	return ks
}

func init() {
	if ks := asmKernels32(); len(ks) > 0 {
		kernel32 = ks[0]
	}
	if ks := asmKernels64(); len(ks) > 0 {
		kernel64 = ks[0]
	}
}
