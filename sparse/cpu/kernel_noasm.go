//go:build !amd64 || purego

package cpu

// Without assembly only the portable kernels exist.

func asmKernels32() []microKernel[float32] { return nil }

func asmKernels64() []microKernel[float64] { return nil }

const haveGatherAsm = false

func gatherAsm[T Float](dst []T, dstStride int, src []T, srcStride int, idx []int32, width int) bool {
	return false
}

func setGather(bool) {}
