package par

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestForRunsEachItemOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 7} {
		runtime.GOMAXPROCS(procs)
		for _, n := range []int{0, 1, 5, 1000} {
			hits := make([]atomic.Int32, n)
			For(n, func(c int) { hits[c].Add(1) })
			for c := range hits {
				require.EqualValues(t, 1, hits[c].Load(), "procs %d n %d item %d", procs, n, c)
			}
		}
	}
}
