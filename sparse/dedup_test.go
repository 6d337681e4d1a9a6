package sparse

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFindDuplicate(t *testing.T) {
	ext := Extent{Batch: 2, X: 3, Y: 3, Z: 3}
	cases := []struct {
		name   string
		coords []int32
		r, q   int
		found  bool
	}{
		{"empty", nil, 0, 0, false},
		{"one", []int32{1, 2, 2, 2}, 0, 0, false},
		{"distinct", []int32{0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1}, 0, 0, false},
		{"pair", []int32{0, 1, 2, 0, 1, 1, 1, 1, 0, 1, 2, 0}, 2, 0, true},
		// Rows 3 = 1 and 4 = 0: the earliest later copy is row 3.
		{"two pairs", []int32{0, 0, 0, 0, 1, 1, 1, 1, 0, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0}, 3, 1, true},
		// A third copy: still the first repeat (row 2) against the first row.
		{"triple", []int32{0, 1, 1, 1, 0, 2, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1}, 2, 0, true},
		{"batch differs", []int32{0, 1, 1, 1, 1, 1, 1, 1}, 0, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, q, found := FindDuplicate(c.coords, ext)
			require.Equal(t, c.found, found)
			require.Equal(t, c.r, r)
			require.Equal(t, c.q, q)
		})
	}
}

// TestFindDuplicateLarge compares with a Go map on batches large enough for
// the table's bulk insert, with and without a planted duplicate.
func TestFindDuplicateLarge(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ext := Extent{Batch: 4, X: 100, Y: 100, Z: 100}
	for trial := range 6 {
		n := 20_000
		seen := map[[4]int32]bool{}
		coords := make([]int32, 0, 4*n)
		for len(coords) < 4*n {
			c := [4]int32{int32(rng.IntN(4)), int32(rng.IntN(100)), int32(rng.IntN(100)), int32(rng.IntN(100))}
			if !seen[c] {
				seen[c] = true
				coords = append(coords, c[:]...)
			}
		}
		wantR, wantQ := 0, 0
		if trial%2 == 1 {
			wantQ = rng.IntN(n / 2)
			wantR = wantQ + 1 + rng.IntN(n/2)
			copy(coords[4*wantR:4*wantR+4], coords[4*wantQ:4*wantQ+4])
		}
		r, q, found := FindDuplicate(coords, ext)
		require.Equal(t, trial%2 == 1, found)
		require.Equal(t, wantR, r)
		require.Equal(t, wantQ, q)
		if found {
			require.ErrorIs(t, ValidateCoords(coords, ext), ErrDuplicate)
		} else {
			require.NoError(t, ValidateCoords(coords, ext))
		}
	}
}

func TestMergeDuplicates(t *testing.T) {
	ext := Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	coords := []int32{0, 1, 1, 1, 0, 2, 2, 2, 0, 1, 1, 1, 0, 3, 3, 3, 0, 2, 2, 2, 0, 1, 1, 1}
	feats, err := MatrixOf(6, 2, []float64{1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60})
	require.NoError(t, err)
	oc, of, inv, err := MergeDuplicates(coords, feats, ext, Sum)
	require.NoError(t, err)
	require.Equal(t, []int32{0, 1, 1, 1, 0, 2, 2, 2, 0, 3, 3, 3}, oc)
	require.Equal(t, []int32{0, 1, 0, 2, 1, 0}, inv)
	require.Equal(t, []float64{10, 100, 7, 70, 4, 40}, of.F64())
	_, of, _, err = MergeDuplicates(coords, feats, ext, Mean)
	require.NoError(t, err)
	require.Equal(t, []float64{10.0 / 3, 100.0 / 3, 3.5, 35, 4, 40}, of.F64())
	oc, of, inv, err = MergeDuplicates(nil, Matrix{}, ext, Sum)
	require.NoError(t, err)
	require.Empty(t, oc)
	require.True(t, of.IsZero())
	require.Empty(t, inv)
	_, _, _, err = MergeDuplicates([]int32{0, 4, 0, 0}, Matrix{}, ext, Sum)
	require.ErrorIs(t, err, ErrOutOfRange)
}
