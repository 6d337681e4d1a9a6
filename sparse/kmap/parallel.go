package kmap

import "github.com/flexgemm-go/flexgemm/internal/par"

// grain is the number of rows of one work chunk. Chunk boundaries depend
// only on n, never on the number of workers.
const grain = 1 << 14

// parallelRows splits [0, n) into fixed chunks of grain rows and runs
// f(lo, hi) once per chunk on up to GOMAXPROCS goroutines. Each row belongs
// to exactly one chunk, so results written per row do not depend on the
// number of workers.
func parallelRows(n int, f func(lo, hi int)) {
	parallelChunks((n+grain-1)/grain, func(c int) {
		f(c*grain, min(n, c*grain+grain))
	})
}

// parallelChunks runs f(0) … f(nc−1), each exactly once, in parallel.
func parallelChunks(nc int, f func(c int)) { par.For(nc, f) }

// fill sets every element of s to v, in parallel for long slices.
func fill(s []int32, v int32) {
	parallelRows(len(s), func(lo, hi int) {
		for i := range s[lo:hi] {
			s[lo+i] = v
		}
	})
}
