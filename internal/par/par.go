// Package par runs loops on up to GOMAXPROCS goroutines with work split
// that never depends on the number of workers, so results written per item
// are the same for any GOMAXPROCS.
package par

import (
	"runtime"
	"sync"
)

// For runs f(0) … f(n−1), each exactly once, on up to GOMAXPROCS
// goroutines; worker w takes items w, w+W, w+2W, ….
func For(n int, f func(c int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for c := range n {
			f(c)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for c := w; c < n; c += workers {
				f(c)
			}
		})
	}
	wg.Wait()
}
