package serialize

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// chunk is the number of elements of one work item. It is a constant, so
// the partition of the work never depends on GOMAXPROCS.
const chunk = 1 << 14

// parallelFirst runs f over [0, n) in chunks of fixed size, in parallel,
// and returns the smallest index any call reported (f returns the first bad
// index of its range or −1), or −1. Every chunk runs even when an earlier
// one failed, so the answer does not depend on scheduling.
func parallelFirst(n int, f func(lo, hi int) int) int {
	chunks := (n + chunk - 1) / chunk
	workers := min(runtime.GOMAXPROCS(0), chunks)
	if workers <= 1 {
		for lo := 0; lo < n; lo += chunk {
			if bad := f(lo, min(lo+chunk, n)); bad >= 0 {
				return bad
			}
		}
		return -1
	}
	firstBad := make([]int, chunks)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				lo := c * chunk
				firstBad[c] = f(lo, min(lo+chunk, n))
			}
		})
	}
	wg.Wait()
	for _, bad := range firstBad {
		if bad >= 0 {
			return bad
		}
	}
	return -1
}
