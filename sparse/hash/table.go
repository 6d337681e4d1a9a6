package hash

import (
	"fmt"
	"iter"
	"math"
	"math/bits"
)

// MaxNarrowKey is the largest key a narrow table stores: 2^32 − 2. The
// all-ones 32-bit pattern marks an empty slot.
const MaxNarrowKey = math.MaxUint32 - 1

// MaxKey is the largest key a wide table stores: 2^64 − 2. The all-ones
// pattern marks an empty slot. A valid grid.Extent has at most 2^64 − 1
// sites, so its keys never reach it.
const MaxKey = math.MaxUint64 - 1

const (
	minSlotsLog = 3  // smallest table: 8 slots
	maxSlotsLog = 40 // largest table: 2^40 slots (2^39 keys)

	// emptyNarrow is an empty narrow slot: key 2^32 − 1, value −1.
	emptyNarrow = math.MaxUint64
	emptyWide   = math.MaxUint64
)

// Options configure a new Table. The zero value is a small growing wide
// table.
type Options struct {
	// Capacity is the number of keys the table holds before it first grows
	// (or, with Fixed, at all). The slot count is the smallest power of two
	// ≥ 2·Capacity (at least 8), so the load factor stays ≤ 1/2.
	Capacity int
	// Fixed makes the table keep its size: an insert beyond Cap() returns
	// ErrFull instead of growing.
	Fixed bool
	// Narrow stores 32-bit keys: each slot packs key and value into 64
	// bits. Every key must be ≤ MaxNarrowKey.
	Narrow bool
}

// wideSlot is one slot of a wide table.
type wideSlot struct {
	key uint64
	val int32
}

// Table maps uint64 keys to int32 values by open addressing with linear
// probing. The zero value is not usable; create tables with New or
// FromCoords.
type Table struct {
	narrow, fixed bool
	// Exactly one of n32 (narrow: key<<32 | uint32(value)) and w64 (wide)
	// holds the slots.
	n32   []uint64
	w64   []wideSlot
	shift uint // 64 − log2(slots)
	n     int
	// maxProbe is the largest distance of a stored key from its home slot;
	// no lookup needs to look further.
	maxProbe int
}

// New returns an empty table configured by opt.
func New(opt Options) (*Table, error) {
	if opt.Capacity < 0 {
		return nil, fmt.Errorf("%w: capacity %d is negative", ErrCapacity, opt.Capacity)
	}
	lg, err := slotsLog(opt.Capacity)
	if err != nil {
		return nil, err
	}
	t := &Table{narrow: opt.Narrow, fixed: opt.Fixed}
	t.alloc(lg)
	return t, nil
}

// slotsLog returns log2 of the slot count for n keys at load factor ≤ 1/2.
func slotsLog(n int) (uint, error) {
	if uint64(n) > 1<<(maxSlotsLog-1) {
		return 0, fmt.Errorf("%w: %d keys exceed the largest table (2^%d keys)", ErrCapacity, n, maxSlotsLog-1)
	}
	lg := uint(minSlotsLog)
	if n > 0 {
		lg = max(lg, uint(bits.Len64(uint64(2*n-1))))
	}
	return lg, nil
}

func (t *Table) alloc(lg uint) {
	t.shift = 64 - lg
	t.n, t.maxProbe = 0, 0
	if t.narrow {
		t.n32 = make([]uint64, 1<<lg)
		for i := range t.n32 {
			t.n32[i] = emptyNarrow
		}
		return
	}
	t.w64 = make([]wideSlot, 1<<lg)
	for i := range t.w64 {
		t.w64[i] = wideSlot{key: emptyWide, val: -1}
	}
}

// mix is the Murmur3 64-bit finaliser. Its top bits pick a key's home slot.
func mix(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// Len returns the number of stored keys.
func (t *Table) Len() int { return t.n }

// Slots returns the number of slots, a power of two.
func (t *Table) Slots() int {
	if t.narrow {
		return len(t.n32)
	}
	return len(t.w64)
}

// Cap returns the number of keys the table holds before it grows (or, if
// fixed, before inserts fail with ErrFull): half the slots.
func (t *Table) Cap() int { return t.Slots() / 2 }

// Narrow reports whether the table stores 32-bit keys.
func (t *Table) Narrow() bool { return t.narrow }

// Fixed reports whether the table has a fixed capacity.
func (t *Table) Fixed() bool { return t.fixed }

// MaxProbe returns the largest distance of a stored key from its home slot,
// the bound on every lookup's probe sequence.
func (t *Table) MaxProbe() int { return t.maxProbe }

func (t *Table) checkKey(key uint64) error {
	if t.narrow && key > MaxNarrowKey {
		return fmt.Errorf("%w: key %d does not fit a narrow table (max %d)", ErrKey, key, uint64(MaxNarrowKey))
	}
	if key > MaxKey {
		return fmt.Errorf("%w: key %d is reserved", ErrKey, key)
	}
	return nil
}

// Find returns the value stored under key and whether it is present. It
// probes at most MaxProbe()+1 slots.
func (t *Table) Find(key uint64) (int32, bool) {
	if t.narrow {
		if key > MaxNarrowKey {
			return 0, false
		}
		s := t.n32
		mask := uint64(len(s) - 1)
		i := mix(key) >> t.shift
		for d := 0; d <= t.maxProbe; d++ {
			e := s[i]
			if e>>32 == key {
				return int32(uint32(e)), true
			}
			if e == emptyNarrow {
				return 0, false
			}
			i = (i + 1) & mask
		}
		return 0, false
	}
	if key > MaxKey {
		return 0, false
	}
	s := t.w64
	mask := uint64(len(s) - 1)
	i := mix(key) >> t.shift
	for d := 0; d <= t.maxProbe; d++ {
		e := &s[i]
		if e.key == key {
			return e.val, true
		}
		if e.key == emptyWide {
			return 0, false
		}
		i = (i + 1) & mask
	}
	return 0, false
}

// Get returns the value stored under key, or miss if key is absent.
func (t *Table) Get(key uint64, miss int32) int32 {
	if v, ok := t.Find(key); ok {
		return v
	}
	return miss
}

// Insert stores key → val. A key already present leaves the table
// unchanged and returns a *DuplicateError; a full fixed table returns
// ErrFull; an unstorable key returns ErrKey.
func (t *Table) Insert(key uint64, val int32) error {
	old, inserted, err := t.GetOrInsert(key, val)
	if err != nil {
		return err
	}
	if !inserted {
		return &DuplicateError{Key: key, First: old, Second: val, Index: -1}
	}
	return nil
}

// GetOrInsert returns the value stored under key if it is present
// (inserted = false); otherwise it stores val and returns it
// (inserted = true). It fails only with ErrKey or, for a full fixed table
// that lacks key, ErrFull.
func (t *Table) GetOrInsert(key uint64, val int32) (stored int32, inserted bool, err error) {
	if err := t.checkKey(key); err != nil {
		return 0, false, err
	}
	if t.n >= t.Cap() {
		if v, ok := t.Find(key); ok {
			return v, false, nil
		}
		if t.fixed {
			return 0, false, fmt.Errorf("%w: cannot insert key %d into a fixed table holding %d keys", ErrFull, key, t.n)
		}
		if err := t.resize(t.n + 1); err != nil {
			return 0, false, err
		}
	}
	v, ok := t.put(key, val)
	return v, !ok, nil
}

// put inserts key → val into a table with at least one free slot below the
// load limit. If key is present it returns the stored value and true.
func (t *Table) put(key uint64, val int32) (int32, bool) {
	if t.narrow {
		s := t.n32
		mask := uint64(len(s) - 1)
		i := mix(key) >> t.shift
		for d := 0; d < len(s); d++ {
			e := s[i]
			if e == emptyNarrow {
				s[i] = key<<32 | uint64(uint32(val))
				t.n++
				t.maxProbe = max(t.maxProbe, d)
				return val, false
			}
			if e>>32 == key {
				return int32(uint32(e)), true
			}
			i = (i + 1) & mask
		}
		panic("hash: no free slot below the load limit") // unreachable: load ≤ 1/2
	}
	s := t.w64
	mask := uint64(len(s) - 1)
	i := mix(key) >> t.shift
	for d := 0; d < len(s); d++ {
		e := &s[i]
		if e.key == emptyWide {
			*e = wideSlot{key: key, val: val}
			t.n++
			t.maxProbe = max(t.maxProbe, d)
			return val, false
		}
		if e.key == key {
			return e.val, true
		}
		i = (i + 1) & mask
	}
	panic("hash: no free slot below the load limit") // unreachable: load ≤ 1/2
}

// Reserve makes room for n keys in total without further growth. A fixed
// table returns ErrFull if n exceeds Cap().
func (t *Table) Reserve(n int) error {
	if n <= t.Cap() {
		return nil
	}
	if t.fixed {
		return fmt.Errorf("%w: %d keys requested, fixed capacity is %d", ErrFull, n, t.Cap())
	}
	return t.resize(n)
}

// resize rehashes into the smallest table that holds n keys and at least
// doubles the slot count. Keys move in slot order, so the new layout
// depends only on the old one.
func (t *Table) resize(n int) error {
	lg, err := slotsLog(max(n, t.Slots()))
	if err != nil {
		return err
	}
	old32, old64 := t.n32, t.w64
	t.alloc(lg)
	for _, e := range old32 {
		if e != emptyNarrow {
			t.put(e>>32, int32(uint32(e)))
		}
	}
	for _, e := range old64 {
		if e.key != emptyWide {
			t.put(e.key, e.val)
		}
	}
	return nil
}

// All yields every stored (key, value) pair in slot order, which depends
// only on the sequence of inserts.
func (t *Table) All() iter.Seq2[uint64, int32] {
	return func(yield func(uint64, int32) bool) {
		for _, e := range t.n32 {
			if e != emptyNarrow && !yield(e>>32, int32(uint32(e))) {
				return
			}
		}
		for _, e := range t.w64 {
			if e.key != emptyWide && !yield(e.key, e.val) {
				return
			}
		}
	}
}

// Stats describes how well a table's keys are spread.
type Stats struct {
	// Len is the number of keys and Slots the number of slots.
	Len, Slots int
	// Load is Len/Slots.
	Load float64
	// MaxProbe is the largest distance of a key from its home slot and
	// MeanProbe the mean distance (a successful lookup reads
	// MeanProbe + 1 slots on average).
	MaxProbe  int
	MeanProbe float64
	// Histogram[d] counts the keys at distance d from their home slot.
	Histogram []int
}

// Stats scans the table and returns its probe statistics.
func (t *Table) Stats() Stats {
	st := Stats{Len: t.n, Slots: t.Slots(), Histogram: make([]int, t.maxProbe+1)}
	st.Load = float64(t.n) / float64(st.Slots)
	mask := uint64(st.Slots - 1)
	var sum int
	record := func(i int, k uint64) {
		d := int((uint64(i) - mix(k)>>t.shift) & mask)
		st.Histogram[d]++
		sum += d
		st.MaxProbe = max(st.MaxProbe, d)
	}
	for i, e := range t.n32 {
		if e != emptyNarrow {
			record(i, e>>32)
		}
	}
	for i, e := range t.w64 {
		if e.key != emptyWide {
			record(i, e.key)
		}
	}
	if t.n > 0 {
		st.MeanProbe = float64(sum) / float64(t.n)
	}
	return st
}
