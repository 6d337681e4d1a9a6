package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGrayInWindows checks the windowed order on a shell: a permutation,
// each window's rows together and in the window order, ms.Gray's order
// within a window, and ms.Gray itself for a window of all rows.
func TestGrayInWindows(t *testing.T) {
	m, err := shellMap(24)
	require.NoError(t, err)
	ms := m.Masked()
	n := len(ms.Gray)
	pos := make([]int, n)
	for i, r := range ms.Gray {
		pos[r] = i
	}
	for _, w := range []int{0, 1, 7, 64, 1000, n, 2 * n} {
		order := grayInWindows(ms, w)
		require.ElementsMatch(t, ms.Gray, order, "w=%d: a permutation", w)
		if w <= 0 || w >= n {
			require.Equal(t, ms.Gray, order, "w=%d", w)
			continue
		}
		for i := 1; i < n; i++ {
			a, b := order[i-1], order[i]
			wa, wb := int(a)/w, int(b)/w
			require.LessOrEqual(t, wa, wb, "w=%d: windows in order at %d", w, i)
			if wa == wb {
				require.Less(t, pos[a], pos[b], "w=%d: Gray order within a window at %d", w, i)
			}
		}
	}
}

// TestDramRowReads checks the cache model on a shell: with a cache of
// every row each input row that some output needs is read once; with no
// cache, each wave reads its distinct rows; a larger cache never reads
// more; and one wave of all tiles reads each needed row once.
func TestDramRowReads(t *testing.T) {
	m, err := shellMap(20)
	require.NoError(t, err)
	V := m.V()
	order := m.Masked().Gray
	needed := map[int32]bool{}
	for _, s := range m.Nbr {
		if s >= 0 {
			needed[s] = true
		}
	}
	const bm = 16
	require.Equal(t, int64(len(needed)), dramRowReads(m.Nbr, V, order, bm, 2, len(m.Nbr)), "a cache of every read")
	require.Equal(t, int64(len(needed)), dramRowReads(m.Nbr, V, order, bm, len(order), 0), "one wave")
	var perWave int64
	for lo := 0; lo < len(order); lo += 2 * bm {
		seen := map[int32]bool{}
		for _, r := range order[lo:min(lo+2*bm, len(order))] {
			for _, s := range m.Nbr[int(r)*V : int(r)*V+V] {
				if s >= 0 && !seen[s] {
					seen[s] = true
					perWave++
				}
			}
		}
	}
	require.Equal(t, perWave, dramRowReads(m.Nbr, V, order, bm, 2, -1), "no cache")
	prev := perWave
	for _, c := range []int{0, 10, 100, 1000} {
		got := dramRowReads(m.Nbr, V, order, bm, 2, c)
		require.LessOrEqual(t, got, prev, "cache %d", c)
		require.GreaterOrEqual(t, got, int64(len(needed)), "cache %d", c)
		prev = got
	}
}
