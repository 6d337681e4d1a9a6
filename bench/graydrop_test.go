package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// TestGrayDropping checks the -graydrop model on the RES 16 and RES 64
// shells (balanced keys) and a map of more than kmap.BalancedKeyMaxRows
// rows (table-order keys): dropping no bit gives the map's own Gray order
// exactly; every order is a permutation; its rows' high rank bits never
// decrease and rows of equal high bits stay in index order; padding never
// falls as bits are dropped on these shells, and dropping them all leaves
// the rows in index order.
func TestGrayDropping(t *testing.T) {
	maps := []*kmap.Map{}
	for _, res := range []int{16, 64} {
		m, err := shellMap(res)
		require.NoError(t, err)
		maps = append(maps, m)
	}
	coords, ext := synth.SphereShell(128, 3)
	big, err := kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	require.Greater(t, big.NOut, kmap.BalancedKeyMaxRows, "the table-order key case")
	maps = append(maps, big)
	for _, m := range maps {
		ms := m.Masked()
		base, err := grayDropping(ms, 0)
		require.NoError(t, err)
		require.Equal(t, ms.Gray, base, "drop 0 is the Gray order (%d rows)", m.NOut)
		prev := orderWork(ms, base, 128)
		for _, drop := range []int{3, 9, 18, 27, 64} {
			order, err := grayDropping(ms, drop)
			require.NoError(t, err)
			seen := make([]bool, len(order))
			for i, r := range order {
				require.False(t, seen[r])
				seen[r] = true
				if i == 0 || drop == 64 {
					continue
				}
				a, b := grayRankKey(ms, order[i-1])>>drop, grayRankKey(ms, r)>>drop
				require.LessOrEqual(t, a, b, "drop %d: rank order at %d", drop, i)
				if a == b {
					require.Less(t, order[i-1], r, "drop %d: index order within equal high bits at %d", drop, i)
				}
			}
			work := orderWork(ms, order, 128)
			require.GreaterOrEqual(t, work, prev, "drop %d (%d rows): fewer bits, no less padding here", drop, m.NOut)
			prev = work
			if drop >= 27 {
				for i, r := range order {
					require.Equal(t, int32(i), r, "drop %d: nothing left to sort by", drop)
				}
			}
		}
		_, err = grayDropping(ms, -1)
		require.Error(t, err)
	}
}
