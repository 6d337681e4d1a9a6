package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// kernelCase is one micro-kernel call: k steps with A row-major (rs = lda,
// ks = 1) or column-major (rs = 1, ks = lda), B with row stride ldb, and C
// rows scattered by coff (two rows may not share an offset).
type kernelCase struct {
	k, lda, ldb int
	colMajor    bool
}

var kernelCases = []kernelCase{
	{k: 1, lda: 1, ldb: 32}, {k: 1, lda: 5},
	{k: 3, lda: 3}, {k: 7, lda: 9, colMajor: true},
	{k: 64, lda: 64}, {k: 64, lda: 70, colMajor: true},
	{k: 129, lda: 131}, {k: 13, lda: 13, ldb: 96},
}

// runKernel calls kern on random data and returns C and the float64
// reference result.
func runKernel[T Float](t *testing.T, kern microKernel[T], tc kernelCase, seed uint64) (got []T, want []float64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	mr, nr := kern.mr, kern.nr
	ldb := max(tc.ldb, nr)
	rs, ks := tc.lda, 1
	if tc.colMajor {
		rs, ks = 1, tc.lda
	}
	na := (mr-1)*rs + (tc.k-1)*ks + 1
	if tc.colMajor {
		na = max(na, tc.k*tc.lda+mr)
	}
	a := make([]T, na)
	for i := range a {
		a[i] = T(rng.Float64()*2 - 1)
	}
	b := make([]T, (tc.k-1)*ldb+nr)
	for i := range b {
		b[i] = T(rng.Float64()*2 - 1)
	}
	// C has 2·mr rows of ldc = nr+3; kernel rows go to a shuffled subset.
	ldc := nr + 3
	c := make([]T, 2*mr*ldc)
	for i := range c {
		c[i] = T(rng.Float64())
	}
	perm := rng.Perm(2 * mr)
	coff := make([]int, mr)
	for r := range coff {
		coff[r] = perm[r] * ldc
	}
	want = make([]float64, len(c))
	for i, v := range c {
		want[i] = float64(v)
	}
	for r := range mr {
		for col := range nr {
			var s float64
			for j := range tc.k {
				s += float64(a[r*rs+j*ks]) * float64(b[j*ldb+col])
			}
			want[coff[r]+col] += s
		}
	}
	kern.fn(tc.k, a, rs, ks, b, ldb, c, coff)
	return c, want
}

func testKernels[T Float](t *testing.T, kernels []microKernel[T], tol float64) {
	for _, kern := range kernels {
		for i, tc := range kernelCases {
			t.Run(fmt.Sprintf("%s/%d", kern.name, i), func(t *testing.T) {
				got, want := runKernel(t, kern, tc, uint64(i))
				for j := range want {
					require.InDelta(t, want[j], float64(got[j]), tol*(1+math.Sqrt(float64(tc.k))), "element %d", j)
				}
				// The portable kernel with the same block shape agrees.
				ref := portableKernel[T](kern.mr, kern.nr)
				got2, _ := runKernel(t, ref, tc, uint64(i))
				for j := range got {
					require.InDelta(t, float64(got2[j]), float64(got[j]), tol*(1+math.Sqrt(float64(tc.k))), "element %d", j)
				}
			})
		}
	}
}

func TestKernelsFloat32(t *testing.T) {
	ks := append(asmKernels32(), portableKernel[float32](goMR, goNR), portableKernel[float32](2, 4))
	testKernels(t, ks, 2e-6)
}

func TestKernelsFloat64(t *testing.T) {
	ks := append(asmKernels64(), portableKernel[float64](goMR, goNR), portableKernel[float64](2, 4))
	testKernels(t, ks, 1e-14)
}

func TestKernelSelected(t *testing.T) {
	require.NotEmpty(t, KernelName("f32"))
	for _, n := range []int{1, 7, 16, 17, 32, 33, 64, 100} {
		k32 := kernelFor[float32](n)
		require.LessOrEqual(t, roundUp(n, k32.nr), roundUp(n, kernels32.wide.nr))
		k64 := kernelFor[float64](n)
		require.LessOrEqual(t, roundUp(n, k64.nr), roundUp(n, kernels64.wide.nr))
	}
	require.NotEmpty(t, KernelName("f64"))
	t.Logf("kernels: f32 %s, f64 %s", KernelName("f32"), KernelName("f64"))
}
