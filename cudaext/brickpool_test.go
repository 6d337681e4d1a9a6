package cudaext

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBrickRatiosGuess(t *testing.T) {
	var h brickRatios
	require.Zero(t, h.guess(1000), "no build recorded: wait for the count")
	h.note(0, 0)
	require.Zero(t, h.guess(1000), "an empty build records nothing")
	h.note(1_000_000, 62_500) // a shell: 1/16 brick per row
	cases := []struct {
		name string
		n    int64
		want int64
	}{
		{"same size", 1_000_000, 66_407}, // ⌈62,500 × 17/16⌉
		{"larger", 4_000_000, 265_625},
		{"at least brickGuessMin", 100, brickGuessMin},
		{"at most a brick per row", 10, 10},
		{"no rows", 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { require.Equal(t, c.want, h.guess(c.n)) })
	}
	// The largest of the last brickHistory ratios counts, and drops out
	// brickHistory builds later.
	h.note(1000, 500)
	require.Equal(t, int64(532), h.guess(1000)) // ⌈500 × 17/16⌉
	for range brickHistory - 1 {
		h.note(1000, 64)
		require.Equal(t, int64(532), h.guess(1000)) // ⌈500 × 17/16⌉
	}
	h.note(1000, 64)
	require.Equal(t, int64(68), h.guess(1000))
}
