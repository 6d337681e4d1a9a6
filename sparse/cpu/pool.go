package cpu

import (
	"runtime"
	"sync"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// MaxPool computes sparse max pooling over the kernel map m:
//
//	y[o, c]      = max_{v : i = Nbr[o, v] ≥ 0} x[i, c]
//	argmax[o, c] = the input row i that attains it
//
// x is [m.NIn, c], y and argmax are [m.NOut, c] and are overwritten. Ties go
// to the lowest tap v (the first maximum in tap order), so the result does
// not depend on row numbering. A NaN input propagates: the first NaN in tap
// order wins and becomes the maximum. An output row with no present
// neighbour gets y = 0 and argmax = −1.
func MaxPool[T ~float32 | ~float64](m *kmap.Map, x []T, c int, y []T, argmax []int32) {
	V := m.V()
	nbr := m.Nbr
	poolRows(m.NOut, V*c, func(lo, hi int) {
		for o := lo; o < hi; o++ {
			yo := y[o*c : o*c+c]
			ao := argmax[o*c : o*c+c]
			for j := range ao {
				ao[j] = -1
			}
			for _, i := range nbr[o*V : o*V+V] {
				if i < 0 {
					continue
				}
				xi := x[int(i)*c : int(i)*c+c]
				for j, v := range xi {
					a := ao[j]
					// Take the first candidate, a strictly larger value, or
					// the first NaN (v != v); keep a NaN once taken.
					if a < 0 || (yo[j] == yo[j] && (v > yo[j] || v != v)) {
						yo[j], ao[j] = v, i
					}
				}
			}
			for j, a := range ao {
				if a < 0 {
					yo[j] = 0
				}
			}
		}
	})
}

// MaxPoolGrad returns into dx [m.NIn, c] (overwritten) the gradient of
// MaxPool: every dy[o, c] goes to the input row argmax[o, c]. It is computed
// input-stationary through the reverse table, summing the outputs that
// chose row i in tap order, so each dx element is written by one goroutine
// in a fixed order (no atomics, deterministic). Entries of argmax that are
// negative or do not name a neighbour of their output row contribute
// nothing.
func MaxPoolGrad[T ~float32 | ~float64](m *kmap.Map, dy []T, argmax []int32, c int, dx []T) {
	V := m.V()
	rev := m.Reverse()
	poolRows(m.NIn, V*c, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			di := dx[i*c : i*c+c]
			clear(di)
			for _, o := range rev[i*V : i*V+V] {
				if o < 0 {
					continue
				}
				ao := argmax[int(o)*c : int(o)*c+c]
				dyo := dy[int(o)*c : int(o)*c+c]
				for j, a := range ao {
					if a == int32(i) {
						di[j] += dyo[j]
					}
				}
			}
		}
	})
}

// PoolCounts returns, for every output row of m, the number of present
// neighbours (taps v with Nbr[o, v] ≥ 0): the divisor of AvgPool.
func PoolCounts(m *kmap.Map) []int32 {
	V := m.V()
	counts := make([]int32, m.NOut)
	poolRows(m.NOut, V, func(lo, hi int) {
		for o := lo; o < hi; o++ {
			n := int32(0)
			for _, i := range m.Nbr[o*V : o*V+V] {
				if i >= 0 {
					n++
				}
			}
			counts[o] = n
		}
	})
	return counts
}

// AvgPool computes sparse average pooling over the kernel map m:
//
//	y[o, c] = (1/n_o) Σ_{v : i = Nbr[o, v] ≥ 0} x[i, c]
//
// where n_o is the number of present neighbours of output o (absent sites
// of the window are not counted, unlike a dense pool with zero padding).
// Rows with n_o = 0 get 0. x is [m.NIn, c]; y is [m.NOut, c] and is
// overwritten. The sum runs in tap order.
func AvgPool[T ~float32 | ~float64](m *kmap.Map, x []T, c int, y []T) {
	V := m.V()
	nbr := m.Nbr
	poolRows(m.NOut, V*c, func(lo, hi int) {
		for o := lo; o < hi; o++ {
			yo := y[o*c : o*c+c]
			clear(yo)
			n := 0
			for _, i := range nbr[o*V : o*V+V] {
				if i < 0 {
					continue
				}
				n++
				for j, v := range x[int(i)*c : int(i)*c+c] {
					yo[j] += v
				}
			}
			if n > 1 {
				d := T(n)
				for j := range yo {
					yo[j] /= d
				}
			}
		}
	})
}

// AvgPoolGrad returns into dx [m.NIn, c] (overwritten) the gradient of
// AvgPool: dx[i] = Σ_v dy[o]/n_o over the outputs o = Rev[i, v] that read
// row i, summed in tap order by one goroutine per row (deterministic).
// counts is PoolCounts(m), or nil to compute it.
func AvgPoolGrad[T ~float32 | ~float64](m *kmap.Map, dy []T, counts []int32, c int, dx []T) {
	if counts == nil {
		counts = PoolCounts(m)
	}
	V := m.V()
	rev := m.Reverse()
	poolRows(m.NIn, V*c, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			di := dx[i*c : i*c+c]
			clear(di)
			for _, o := range rev[i*V : i*V+V] {
				if o < 0 {
					continue
				}
				d := T(counts[o])
				for j, g := range dy[int(o)*c : int(o)*c+c] {
					di[j] += g / d
				}
			}
		}
	})
}

// poolGrain is the amount of work (roughly element operations) below which
// a row range is not split further across goroutines.
const poolGrain = 1 << 15

// poolRows runs f over [0, n) split into contiguous chunks, one goroutine
// per chunk, with about perRow units of work per row. Every row belongs to
// exactly one chunk and f handles its rows in ascending order, so any
// result written per row is independent of the number of workers.
func poolRows(n, perRow int, f func(lo, hi int)) {
	if n <= 0 {
		return
	}
	perRow = max(perRow, 1)
	workers := min(runtime.GOMAXPROCS(0), (n*perRow+poolGrain-1)/poolGrain, n)
	if workers <= 1 {
		f(0, n)
		return
	}
	// Several chunks per worker even out rows of unequal cost.
	chunks := min(n, 4*workers)
	size := (n + chunks - 1) / chunks
	var wg sync.WaitGroup
	next := make(chan int, chunks)
	for lo := 0; lo < n; lo += size {
		next <- lo
	}
	close(next)
	for range workers {
		wg.Go(func() {
			for lo := range next {
				f(lo, min(n, lo+size))
			}
		})
	}
	wg.Wait()
}
