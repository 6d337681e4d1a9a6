//go:build cudaext

package cudaext

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRoundSize checks the allocator's size classes: 512-byte minimum,
// steps of 1/32 of the octave, at most 2 MiB.
func TestRoundSize(t *testing.T) {
	for _, tc := range []struct{ n, want int64 }{
		{1, 512},
		{512, 512},
		{513, 1024},              // octave [512, 1024): steps of 16 B, raised to 512
		{20000, 20480},           // [16 Ki, 32 Ki): steps of 512 B
		{192 * 1024 * 2, 393216}, // a bench activation [192, 1024] fp16: exact
		{393217, 393216 + 8192},  // [256 Ki, 512 Ki): steps of 8 KiB
		{1 << 20, 1 << 20},
		{848 * 1024 * 2, 848 * 1024 * 2}, // [848, 1024] fp16: a multiple of 32 KiB
		{(1 << 20) + 1, (1 << 20) + 32768},
		{4113056 * 64 * 2, 504 << 20}, // [4.1 M, 64] fp16: steps capped at 2 MiB
		{64 << 20, 64 << 20},
	} {
		got := roundSize(tc.n)
		require.Equal(t, tc.want, got, "roundSize(%d)", tc.n)
		require.GreaterOrEqual(t, got, tc.n)
		require.LessOrEqual(t, got-tc.n, max(int64(512), min(got/32, 2<<20)), "waste of roundSize(%d)", tc.n)
	}
}
