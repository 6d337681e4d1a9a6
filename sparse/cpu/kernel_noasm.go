//go:build !amd64 || purego

package cpu

// Without assembly only the portable kernels exist.

func asmKernels32() []microKernel[float32] { return nil }

func asmKernels64() []microKernel[float64] { return nil }
