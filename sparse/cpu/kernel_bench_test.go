package cpu

import (
	"fmt"
	"testing"
)

// BenchmarkKernel measures each micro-kernel on an L1-resident problem:
// k = 64 steps of a row-major A block, C rows contiguous.
func BenchmarkKernel(b *testing.B) {
	b.Run("f32", func(b *testing.B) { benchKernels(b, append(asmKernels32(), portableKernel[float32](goMR, goNR))) })
	b.Run("f64", func(b *testing.B) { benchKernels(b, append(asmKernels64(), portableKernel[float64](goMR, goNR))) })
}

func benchKernels[T Float](b *testing.B, kernels []microKernel[T]) {
	for _, k := range []int{64, 256} {
		for _, kern := range kernels {
			benchKernel(b, kern, k)
		}
	}
}

func benchKernel[T Float](b *testing.B, kern microKernel[T], k int) {
	{
		b.Run(fmt.Sprintf("%s/k=%d", kern.name, k), func(b *testing.B) {
			mr, nr := kern.mr, kern.nr
			a := make([]T, mr*k)
			bm := make([]T, k*nr)
			c := make([]T, mr*nr)
			coff := make([]int, mr)
			for r := range coff {
				coff[r] = r * nr
			}
			for i := range a {
				a[i] = T(i%7) * 0.01
			}
			for i := range bm {
				bm[i] = T(i%5) * 0.01
			}
			for b.Loop() {
				kern.fn(k, a, k, 1, bm, nr, c, coff)
			}
			flops := 2 * float64(mr*nr*k) * float64(b.N)
			b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
