package kmap

import (
	"math/bits"
	"runtime"
	"sync"
)

// radixSort sorts keys ascending and carries vals (nil or the same length)
// along, stably: equal keys keep their relative order. Only the low nbits
// bits of each key are looked at; the others must be zero. It is an LSD
// radix sort of at most 11 bits per pass that skips passes in which every
// key has the same digit. With par it splits each pass over goroutines; a
// stable sort has one result, so the output never depends on the split.
func radixSort(keys []uint64, vals []int32, nbits int, par bool) {
	n := len(keys)
	if n < 2 || nbits <= 0 {
		return
	}
	if n <= 64 {
		insertionSort(keys, vals)
		return
	}
	passes := (nbits + 10) / 11
	width := uint((nbits + passes - 1) / passes)
	buckets := 1 << width
	mask := uint64(buckets - 1)

	chunks := 1
	if par && n >= 1<<16 {
		chunks = min(runtime.GOMAXPROCS(0), n>>15)
	}
	span := (n + chunks - 1) / chunks
	hist := make([][]int, chunks)
	for c := range hist {
		hist[c] = make([]int, buckets)
	}
	srcK, dstK := keys, make([]uint64, n)
	var srcV, dstV []int32
	if vals != nil {
		srcV, dstV = vals, make([]int32, n)
	}
	run := func(f func(c, lo, hi int)) {
		if chunks == 1 {
			f(0, 0, n)
			return
		}
		var wg sync.WaitGroup
		for c := range chunks {
			wg.Go(func() { f(c, c*span, min(n, c*span+span)) })
		}
		wg.Wait()
	}
	for p := range passes {
		shift := uint(p) * width
		run(func(c, lo, hi int) {
			h := hist[c]
			clear(h)
			for _, k := range srcK[lo:hi] {
				h[(k>>shift)&mask]++
			}
		})
		// Turn the counts into start offsets, digit-major then chunk, and
		// skip the pass if one digit holds every key.
		skip := false
		sum := 0
		for d := range buckets {
			total := 0
			for c := range chunks {
				cnt := hist[c][d]
				hist[c][d] = sum + total
				total += cnt
			}
			if total == n {
				skip = true
				break
			}
			sum += total
		}
		if skip {
			continue
		}
		run(func(c, lo, hi int) {
			off := hist[c]
			if srcV == nil {
				for _, k := range srcK[lo:hi] {
					d := (k >> shift) & mask
					dstK[off[d]] = k
					off[d]++
				}
				return
			}
			for i, k := range srcK[lo:hi] {
				d := (k >> shift) & mask
				dstK[off[d]] = k
				dstV[off[d]] = srcV[lo+i]
				off[d]++
			}
		})
		srcK, dstK = dstK, srcK
		srcV, dstV = dstV, srcV
	}
	if &srcK[0] != &keys[0] {
		copy(keys, srcK)
		if vals != nil {
			copy(vals, srcV)
		}
	}
}

func insertionSort(keys []uint64, vals []int32) {
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
			if vals != nil {
				vals[j], vals[j-1] = vals[j-1], vals[j]
			}
		}
	}
}

// keyBits returns the number of bits needed for keys below sites.
func keyBits(sites uint64) int {
	if sites == 0 {
		return 0
	}
	return bits.Len64(sites - 1)
}
