package main

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// A model for the seventy-first session's "two-pass Gray sort" of
// docs/PERF_NOTES.md (refuted on paper): the GPU sorts the rows by their
// 27-bit Gray ranks in three 9-bit radix passes; sorting by the rank's
// high bits only, with one pass fewer, leaves rows of equal high bits in
// index order, and `bench padding -graydrop K,…` reports what that costs
// in masked padding.

// grayRankKey returns the rank of row r's Gray key in the reflected binary
// Gray sequence, the key being ms's single-word mask of r with tap
// ms.KeyTaps[b] read as bit b (kmap.Masked's key).
func grayRankKey(ms *kmap.Masked, r int32) uint64 {
	mask := ms.Mask[int(r)]
	var key uint64
	for b, v := range ms.KeyTaps {
		key |= (mask >> uint(v) & 1) << uint(b)
	}
	// Bit i of the rank is the parity of the key's bits i and above.
	for s := uint(1); s < 64; s <<= 1 {
		key ^= key >> s
	}
	return key
}

// grayDropping returns the rows of ms sorted stably by their Gray ranks
// without the drop lowest bits: rows of equal high bits keep their index
// order. drop 0 is ms.Gray's order (a new slice). Single-word masks only
// (kernels of at most 64 taps).
func grayDropping(ms *kmap.Masked, drop int) ([]int32, error) {
	if ms.Words != 1 {
		return nil, fmt.Errorf("-graydrop: masks of %d taps take %d words; the model reads one", ms.V, ms.Words)
	}
	if drop < 0 || drop > 64 {
		return nil, fmt.Errorf("-graydrop %d: want 0 to 64 bits", drop)
	}
	n := len(ms.Gray)
	keys := make([]uint64, n)
	order := make([]int32, n)
	for r := range order {
		order[r] = int32(r)
		keys[r] = grayRankKey(ms, int32(r)) >> uint(drop) // 0 when drop is 64
	}
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(keys[a], keys[b]) })
	return order, nil
}
