package hash

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/flexgemm-go/flexgemm/internal/par"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// InsertBatch inserts keys[j] → vals[j] in order j = 0, 1, …; with vals nil
// the value is j. A growing table is resized once up front. It stops at the
// first failure and returns it: a *DuplicateError (Index = j) for a key
// already present, ErrFull when a fixed table fills, ErrKey for an
// unstorable key. The keys before the failing one stay inserted, the rest
// do not.
//
// A large batch into an empty growing table is inserted in the order of
// the keys' home slots (a stable counting sort on their top bits), which
// turns random probes into a sweep over the table; the outcome, errors
// included, is the same as inserting one key at a time.
func (t *Table) InsertBatch(keys []uint64, vals []int32) error {
	if vals != nil && len(vals) != len(keys) {
		return fmt.Errorf("%w: %d keys but %d values", ErrLength, len(keys), len(vals))
	}
	if vals == nil && len(keys) > math.MaxInt32 {
		return fmt.Errorf("%w: %d keys overflow int32 batch indices", ErrCapacity, len(keys))
	}
	if !t.fixed {
		if err := t.Reserve(t.n + len(keys)); err != nil {
			return err
		}
		if t.n == 0 && len(keys) >= bulkMin {
			return t.insertBulk(keys, vals)
		}
	}
	return t.insertSeq(keys, vals)
}

// bulkMin is the smallest batch inserted in home-slot order.
const bulkMin = 1 << 12

func (t *Table) insertSeq(keys []uint64, vals []int32) error {
	for j, k := range keys {
		v := int32(j)
		if vals != nil {
			v = vals[j]
		}
		old, inserted, err := t.GetOrInsert(k, v)
		if err != nil {
			return fmt.Errorf("hash: batch index %d: %w", j, err)
		}
		if !inserted {
			return &DuplicateError{Key: k, First: old, Second: v, Index: j}
		}
	}
	return nil
}

// insertBulk inserts a batch into an empty table with room for all of it,
// with the result and error of insertSeq.
func (t *Table) insertBulk(keys []uint64, vals []int32) error {
	stop := len(keys) // first unstorable key
	for j, k := range keys {
		if t.checkKey(k) != nil {
			stop = j
			break
		}
	}
	if dup := t.sweep(keys[:stop], vals); dup >= 0 {
		// A sequential insert stops at the duplicate: keep only the
		// keys before it (they are distinct).
		first, _ := t.Find(keys[dup])
		t.alloc(uint(64 - t.shift))
		t.sweep(keys[:dup], vals)
		v := int32(dup)
		if vals != nil {
			v = vals[dup]
		}
		// The earlier copy was inserted first, so first is its value.
		return &DuplicateError{Key: keys[dup], First: first, Second: v, Index: dup}
	}
	if stop < len(keys) {
		return fmt.Errorf("hash: batch index %d: %w", stop, t.checkKey(keys[stop]))
	}
	return nil
}

// sweep inserts storable keys into a table with room for all of them, in
// the order of their home slots (see byHome), so that the inserts sweep the
// table and the keys once. Equal keys keep their batch order. It returns
// the smallest batch index of a key equal to an earlier one, or −1.
func (t *Table) sweep(keys []uint64, vals []int32) int {
	src, idx := t.byHome(keys)
	dup := -1
	for i, k := range src {
		j := idx[i]
		v := j
		if vals != nil {
			v = vals[j]
		}
		if _, found := t.put(k, v); found && (dup < 0 || int(j) < dup) {
			dup = int(j)
		}
	}
	return dup
}

// byHome returns a copy of keys and their positions sorted stably by the
// top (up to 16) bits of their home slots: an LSD radix sort of at most two
// 8-bit passes. Walking the result visits the table from its first slot to
// its last, so consecutive probes share pages and cache lines instead of
// each missing the TLB and the caches.
func (t *Table) byHome(keys []uint64) ([]uint64, []int32) {
	n := len(keys)
	top := min(64-t.shift, 16)
	src, dst := slices.Clone(keys), make([]uint64, n)
	idx, tmp := make([]int32, n), make([]int32, n)
	for j := range idx {
		idx[j] = int32(j)
	}
	for p := uint(0); p*8 < top; p++ {
		shift := 64 - top + 8*p // digit p of the top bits of mix(k)
		var start [257]int
		for _, k := range src {
			start[(mix(k)>>shift)&0xff+1]++
		}
		for d := 1; d < len(start); d++ {
			start[d] += start[d-1]
		}
		for j, k := range src {
			d := (mix(k) >> shift) & 0xff
			dst[start[d]], tmp[start[d]] = k, idx[j]
			start[d]++
		}
		src, dst = dst, src
		idx, tmp = tmp, idx
	}
	return src, idx
}

// LookupBatch writes the value of keys[j] to out[j], or miss where the key
// is absent, and returns the number of keys found. The work is split into
// fixed chunks looked up concurrently; the table must not be modified
// meanwhile. A batch of at least a quarter as many keys as a table larger
// than the caches has slots is first sorted by home slot (see byHome), so
// the lookups sweep the table, and the values are scattered back.
func (t *Table) LookupBatch(keys []uint64, out []int32, miss int32) (int, error) {
	if len(out) != len(keys) {
		return 0, fmt.Errorf("%w: %d keys but %d outputs", ErrLength, len(keys), len(out))
	}
	ks, pos := keys, []int32(nil)
	if t.Slots() >= sortedLookupSlots && 4*len(keys) >= t.Slots() && len(keys) <= math.MaxInt32 {
		ks, pos = t.byHome(keys)
	}
	const chunk = 1 << 14
	nc := (len(ks) + chunk - 1) / chunk
	found := make([]int, nc)
	parallelFor(nc, func(c int) {
		lo, hi := c*chunk, min(len(ks), c*chunk+chunk)
		n := 0
		for i, k := range ks[lo:hi] {
			v, ok := t.Find(k)
			if ok {
				n++
			} else {
				v = miss
			}
			if pos != nil {
				out[pos[lo+i]] = v
			} else {
				out[lo+i] = v
			}
		}
		found[c] = n
	})
	total := 0
	for _, n := range found {
		total += n
	}
	return total, nil
}

// sortedLookupSlots is the table size from which LookupBatch may sort its
// queries: 2^20 slots, 8 MiB narrow, beyond the L2 caches.
const sortedLookupSlots = 1 << 20

// parallelFor runs f(0) … f(n−1), each exactly once, in parallel.
func parallelFor(n int, f func(c int)) { par.For(n, f) }

// FromCoords returns a table mapping the key ext.Key(b, x, y, z) of every row
// of coords (flat [N, 4], columns batch, x, y, z) to its row index. The
// table is narrow when ext.KeyBits() == 32. It reports an invalid extent,
// a length that is not a multiple of 4, more than 2^31 − 1 rows, and a row
// outside ext (ErrCoords), and two equal rows (a *DuplicateError whose First
// and Second are the rows).
func FromCoords(coords []int32, ext grid.Extent) (*Table, error) {
	if err := ext.Validate(); err != nil {
		return nil, fmt.Errorf("hash: FromCoords: %w", err)
	}
	if len(coords)%4 != 0 {
		return nil, fmt.Errorf("%w: length %d is not a multiple of 4", ErrCoords, len(coords))
	}
	n := len(coords) / 4
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d rows overflow int32 row indices", ErrCoords, n)
	}
	keys := make([]uint64, n)
	stop := n // first row outside ext
	for r := range n {
		b, x, y, z := int(coords[4*r]), int(coords[4*r+1]), int(coords[4*r+2]), int(coords[4*r+3])
		if !ext.Contains(b, x, y, z) {
			stop = r
			break
		}
		keys[r] = ext.Key(b, x, y, z)
	}
	t, err := New(Options{Capacity: stop, Narrow: ext.KeyBits() == 32})
	if err != nil {
		return nil, err
	}
	// Rows before the first bad one go in first, so a duplicate among them
	// is reported before the bad row, as a row-by-row check would.
	if err := t.InsertBatch(keys[:stop], nil); err != nil {
		if d, ok := AsDuplicate(err); ok {
			c := coords[4*d.Index : 4*d.Index+4]
			return nil, fmt.Errorf("hash: rows %d and %d are both (%d, %d, %d, %d): %w", d.First, d.Index, c[0], c[1], c[2], c[3], err)
		}
		return nil, err // unreachable: the table grows and keys fit
	}
	if stop < n {
		c := coords[4*stop : 4*stop+4]
		return nil, fmt.Errorf("%w: row %d (%d, %d, %d, %d) is outside %v", ErrCoords, stop, c[0], c[1], c[2], c[3], ext)
	}
	return t, nil
}

// AsDuplicate returns the *DuplicateError in err's chain, if any.
func AsDuplicate(err error) (*DuplicateError, bool) {
	var d *DuplicateError
	ok := errors.As(err, &d)
	return d, ok
}
