package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// workersFor returns how many goroutines parallelFor uses for n items.
func workersFor(n int) int {
	return max(1, min(runtime.GOMAXPROCS(0), n))
}

// parallelFor calls f(worker, item) once for every item in [0, n), on
// workersFor(n) goroutines that take items in increasing order. worker is in
// [0, workersFor(n)) and lets f use per-worker scratch space. Which worker
// runs an item is not deterministic, so f must compute each item's result
// from the item alone (scratch is overwritten, never read stale).
func parallelFor(n int, f func(worker, item int)) {
	workers := workersFor(n)
	if workers <= 1 {
		for i := range n {
			f(0, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(w, i)
			}
		}()
	}
	wg.Wait()
}
