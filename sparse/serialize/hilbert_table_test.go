package serialize

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHilbertTablesMatchSkilling(t *testing.T) {
	require.Len(t, hilbertEnc, 96*8, "48 signed permutations × 2 parities")
	for n := 0; n <= 4; n++ {
		for x := range uint32(1) << n {
			for y := range uint32(1) << n {
				for z := range uint32(1) << n {
					tx, ty, tz := hilbertTranspose(n, x, y, z)
					code := interleave3(tx, ty, tz)
					require.Equal(t, code, hilbertEncode(n, x, y, z), "n=%d (%d,%d,%d)", n, x, y, z)
					gx, gy, gz := hilbertDecode(n, code)
					require.Equal(t, [3]uint32{x, y, z}, [3]uint32{gx, gy, gz})
					ux, uy, uz := hilbertUntranspose(n, tx, ty, tz)
					require.Equal(t, [3]uint32{x, y, z}, [3]uint32{ux, uy, uz})
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for n := 5; n <= MaxAxisBits; n++ {
		mask := uint32(1)<<n - 1
		for range 2000 {
			x, y, z := rng.Uint32()&mask, rng.Uint32()&mask, rng.Uint32()&mask
			tx, ty, tz := hilbertTranspose(n, x, y, z)
			code := interleave3(tx, ty, tz)
			require.Equal(t, code, hilbertEncode(n, x, y, z), "n=%d (%d,%d,%d)", n, x, y, z)
			gx, gy, gz := hilbertDecode(n, code)
			require.Equal(t, [3]uint32{x, y, z}, [3]uint32{gx, gy, gz})
			c := rng.Uint64() & (1<<(3*n) - 1)
			cx, cy, cz := deinterleave3(c)
			ux, uy, uz := hilbertUntranspose(n, cx, cy, cz)
			dx, dy, dz := hilbertDecode(n, c)
			require.Equal(t, [3]uint32{ux, uy, uz}, [3]uint32{dx, dy, dz}, "n=%d code %d", n, c)
		}
	}
}
