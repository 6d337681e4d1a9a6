package hash

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// InsertBatch inserts keys[j] → vals[j] in order j = 0, 1, …; with vals nil
// the value is j. A growing table is resized once up front. It stops at the
// first failure and returns it: a *DuplicateError (Index = j) for a key
// already present, ErrFull when a fixed table fills, ErrKey for an
// unstorable key. The keys before the failing one stay inserted.
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
	}
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

// LookupBatch writes the value of keys[j] to out[j], or miss where the key
// is absent, and returns the number of keys found. Large batches are split
// into fixed contiguous chunks looked up concurrently; the table must not be
// modified meanwhile.
func (t *Table) LookupBatch(keys []uint64, out []int32, miss int32) (int, error) {
	if len(out) != len(keys) {
		return 0, fmt.Errorf("%w: %d keys but %d outputs", ErrLength, len(keys), len(out))
	}
	const chunk = 1 << 14
	nc := (len(keys) + chunk - 1) / chunk
	found := make([]int, nc)
	parallelFor(nc, func(c int) {
		lo, hi := c*chunk, min(len(keys), c*chunk+chunk)
		n := 0
		for j, k := range keys[lo:hi] {
			v, ok := t.Find(k)
			if ok {
				n++
			} else {
				v = miss
			}
			out[lo+j] = v
		}
		found[c] = n
	})
	total := 0
	for _, n := range found {
		total += n
	}
	return total, nil
}

// parallelFor runs f(0) … f(n−1) on up to GOMAXPROCS goroutines. Each f(c)
// runs exactly once, so results written per c do not depend on the number
// of workers.
func parallelFor(n int, f func(c int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for c := range n {
			f(c)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for c := w; c < n; c += workers {
				f(c)
			}
		})
	}
	wg.Wait()
}

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
	t, err := New(Options{Capacity: n, Narrow: ext.KeyBits() == 32})
	if err != nil {
		return nil, err
	}
	for r := range n {
		c := coords[4*r : 4*r+4 : 4*r+4]
		b, x, y, z := int(c[0]), int(c[1]), int(c[2]), int(c[3])
		if !ext.Contains(b, x, y, z) {
			return nil, fmt.Errorf("%w: row %d (%d, %d, %d, %d) is outside %v", ErrCoords, r, b, x, y, z, ext)
		}
		key := ext.Key(b, x, y, z)
		old, inserted, err := t.GetOrInsert(key, int32(r))
		if err != nil {
			return nil, err // unreachable: the table grows and keys fit
		}
		if !inserted {
			dup := &DuplicateError{Key: key, First: old, Second: int32(r), Index: r}
			return nil, fmt.Errorf("hash: rows %d and %d are both (%d, %d, %d, %d): %w", old, r, b, x, y, z, dup)
		}
	}
	return t, nil
}

// AsDuplicate returns the *DuplicateError in err's chain, if any.
func AsDuplicate(err error) (*DuplicateError, bool) {
	var d *DuplicateError
	ok := errors.As(err, &d)
	return d, ok
}
