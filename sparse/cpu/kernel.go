package cpu

import "fmt"

// Float is the constraint of the element types the kernels handle. It is
// exact (no ~) because the assembly kernels are chosen by type.
type Float interface{ float32 | float64 }

// kernelFunc is a register-blocked GEMM micro-kernel. It computes one
// mr×nr block
//
//	for r < mr, c < nr:
//		C[coff[r] + c] += Σ_{j < k} A[r·rs + j·ks] · B[j·ldb + c]
//
// where the sum over j is accumulated in registers, in order j = 0, 1, …,
// starting from zero, and only then added to C. a, b and c start at the
// block's origin; rs, ks, ldb and coff are in elements. With rs = lda and
// ks = 1 the block of A is row-major (gathered rows of features, forward and
// input gradient); with rs = 1 and ks = lda it is column-major (gathered
// rows read as columns, weight gradient). The caller guarantees every index
// is in range; padding rows point coff at a scratch row.
type kernelFunc[T Float] func(k int, a []T, rs, ks int, b []T, ldb int, c []T, coff []int)

// microKernel is a kernel with its block shape.
type microKernel[T Float] struct {
	name   string
	mr, nr int
	fn     kernelFunc[T]
}

// checkKernelArgs panics (an internal bug, never user input) if a call of
// an unchecked kernel would read or write out of range.
func checkKernelArgs[T Float](mr, nr, k int, a []T, rs, ks int, b []T, ldb int, c []T, coff []int) {
	if k <= 0 {
		return
	}
	if need := (mr-1)*rs + (k-1)*ks + 1; len(a) < need {
		panic(fmt.Sprintf("cpu: kernel reads %d elements of A, has %d", need, len(a)))
	}
	if need := (k-1)*ldb + nr; len(b) < need {
		panic(fmt.Sprintf("cpu: kernel reads %d elements of B, has %d", need, len(b)))
	}
	if len(coff) < mr {
		panic(fmt.Sprintf("cpu: kernel needs %d row offsets, has %d", mr, len(coff)))
	}
	for _, o := range coff[:mr] {
		if o < 0 || o+nr > len(c) {
			panic(fmt.Sprintf("cpu: kernel writes C[%d:%d], has %d", o, o+nr, len(c)))
		}
	}
}

// goKernel is the portable micro-kernel: any even mr, nr a multiple of 4.
// It keeps a 2×4 block of accumulators in registers.
func goKernel[T Float](mr, nr, k int, a []T, rs, ks int, b []T, ldb int, c []T, coff []int) {
	if k <= 0 {
		return
	}
	for r := 0; r < mr; r += 2 {
		a0 := a[r*rs:]
		a1 := a[(r+1)*rs:]
		c0 := c[coff[r]:]
		c1 := c[coff[r+1]:]
		for col := 0; col < nr; col += 4 {
			var s00, s01, s02, s03, s10, s11, s12, s13 T
			bj := b[col:]
			ia := 0
			for j := 0; j < k; j++ {
				bb := bj[j*ldb : j*ldb+4]
				x0, x1 := a0[ia], a1[ia]
				b0, b1, b2, b3 := bb[0], bb[1], bb[2], bb[3]
				s00 += x0 * b0
				s01 += x0 * b1
				s02 += x0 * b2
				s03 += x0 * b3
				s10 += x1 * b0
				s11 += x1 * b1
				s12 += x1 * b2
				s13 += x1 * b3
				ia += ks
			}
			d0 := c0[col : col+4]
			d0[0] += s00
			d0[1] += s01
			d0[2] += s02
			d0[3] += s03
			d1 := c1[col : col+4]
			d1[0] += s10
			d1[1] += s11
			d1[2] += s12
			d1[3] += s13
		}
	}
}

// portableKernel returns the pure-Go kernel with an mr×nr block.
func portableKernel[T Float](mr, nr int) microKernel[T] {
	return microKernel[T]{
		name: fmt.Sprintf("go%dx%d", mr, nr),
		mr:   mr,
		nr:   nr,
		fn: func(k int, a []T, rs, ks int, b []T, ldb int, c []T, coff []int) {
			goKernel(mr, nr, k, a, rs, ks, b, ldb, c, coff)
		},
	}
}

// Block shape of the portable kernel when no assembly kernel is available.
const (
	goMR = 4
	goNR = 8
)

// kernelSet is the kernels used for one element type: wide for most
// problems, narrow (a smaller nr) for outputs narrow enough that it pads
// less.
type kernelSet[T Float] struct {
	wide, narrow microKernel[T]
}

// pick returns the kernel for a GEMM with n output columns: narrow when it
// pads n to fewer columns than wide does.
func (ks kernelSet[T]) pick(n int) microKernel[T] {
	if roundUp(max(n, 1), ks.narrow.nr) < roundUp(max(n, 1), ks.wide.nr) {
		return ks.narrow
	}
	return ks.wide
}

// kernelFor returns the micro-kernel for T and an output width of n
// columns. The choice depends only on the machine and n.
func kernelFor[T Float](n int) microKernel[T] {
	var zero T
	switch any(zero).(type) {
	case float32:
		return any(kernels32.pick(n)).(microKernel[T])
	default:
		return any(kernels64.pick(n)).(microKernel[T])
	}
}

// The kernels selected at start-up (see kernel_amd64.go), one set per
// element type. They are fixed for the life of the process.
var (
	kernels32 = kernelSet[float32]{portableKernel[float32](goMR, goNR), portableKernel[float32](goMR, goNR/2)}
	kernels64 = kernelSet[float64]{portableKernel[float64](goMR, goNR), portableKernel[float64](goMR, goNR/2)}
)

// KernelName returns the names of the wide and narrow micro-kernels used
// for float32 ("f32") or float64 ("f64"), e.g. "avx512-12x32/avx512-12x16"
// or "go4x8/go4x4".
func KernelName(dtype string) string {
	if dtype == "f64" {
		return kernels64.wide.name + "/" + kernels64.narrow.name
	}
	return kernels32.wide.name + "/" + kernels32.narrow.name
}
