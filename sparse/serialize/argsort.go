package serialize

import (
	"fmt"
	"math"
	"math/bits"
)

// radixBits is the digit width of Argsort's radix passes: 2^11 counters
// stay in the L1 cache.
const radixBits = 11

// Argsort returns the permutation that sorts codes ascending, stably:
// codes[perm[0]] ≤ codes[perm[1]] ≤ …, and equal codes keep their input
// order. It is an LSD radix sort over the significant bits of the largest
// code, so it takes O(N·⌈bits/11⌉) time. It fails with ErrShape when there
// are more than math.MaxInt32 codes.
func Argsort(codes []uint64) ([]int32, error) {
	perm, _, err := sortCodes(codes, false)
	return perm, err
}

// SortCodes is Argsort that also returns the sorted codes:
// sorted[j] = codes[perm[j]].
func SortCodes(codes []uint64) (perm []int32, sorted []uint64, err error) {
	return sortCodes(codes, true)
}

func sortCodes(codes []uint64, wantSorted bool) (perm []int32, sorted []uint64, err error) {
	n := len(codes)
	if n > math.MaxInt32 {
		return nil, nil, fmt.Errorf("%w: %d codes exceed 32-bit indices", ErrShape, n)
	}
	var all uint64
	for _, c := range codes {
		all |= c
	}
	perm = make([]int32, n)
	for i := range perm {
		perm[i] = int32(i)
	}
	width := bits.Len64(all)
	if n < 2 || width == 0 {
		if wantSorted {
			sorted = append([]uint64(nil), codes...)
		}
		return perm, sorted, nil
	}
	if ib := bits.Len(uint(n - 1)); width+ib <= 64 {
		// Sort code<<ib | index on the code digits only: one array moves
		// instead of two, and stability keeps equal codes in index order.
		keys := make([]uint64, n)
		for i, c := range codes {
			keys[i] = c<<ib | uint64(i)
		}
		keys = radixSort(keys, make([]uint64, n), ib, ib+width)
		for i, k := range keys {
			perm[i] = int32(k & (1<<ib - 1))
		}
		if wantSorted {
			for i, k := range keys {
				keys[i] = k >> ib
			}
			sorted = keys
		}
		return perm, sorted, nil
	}
	keys := append([]uint64(nil), codes...)
	tmpKeys := make([]uint64, n)
	tmpPerm := make([]int32, n)
	var count [1 << radixBits]int
	for shift := 0; shift < width; shift += radixBits {
		clear(count[:])
		for _, k := range keys {
			count[(k>>shift)&(1<<radixBits-1)]++
		}
		sum := 0
		for d, c := range count {
			count[d] = sum
			sum += c
		}
		for i, k := range keys {
			d := (k >> shift) & (1<<radixBits - 1)
			j := count[d]
			count[d]++
			tmpKeys[j] = k
			tmpPerm[j] = perm[i]
		}
		keys, tmpKeys = tmpKeys, keys
		perm, tmpPerm = tmpPerm, perm
	}
	if wantSorted {
		sorted = keys
	}
	return perm, sorted, nil
}

// radixSort sorts keys stably by bits [lo, hi) with tmp as scratch, and
// returns the slice (keys or tmp) that holds the result.
func radixSort(keys, tmp []uint64, lo, hi int) []uint64 {
	var count [1 << radixBits]int
	for shift := lo; shift < hi; shift += radixBits {
		mask := uint64(1)<<min(radixBits, hi-shift) - 1
		clear(count[:])
		for _, k := range keys {
			count[(k>>shift)&mask]++
		}
		sum := 0
		for d, c := range count {
			count[d] = sum
			sum += c
		}
		for _, k := range keys {
			d := (k >> shift) & mask
			tmp[count[d]] = k
			count[d]++
		}
		keys, tmp = tmp, keys
	}
	return keys
}
