package hash

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

func TestNewOptions(t *testing.T) {
	cases := []struct {
		name      string
		opt       Options
		wantSlots int
		err       error
	}{
		{"zero", Options{}, 8, nil},
		{"one", Options{Capacity: 1}, 8, nil},
		{"four", Options{Capacity: 4}, 8, nil},
		{"five", Options{Capacity: 5}, 16, nil},
		{"1000", Options{Capacity: 1000}, 2048, nil},
		{"1024", Options{Capacity: 1024}, 2048, nil},
		{"1025", Options{Capacity: 1025}, 4096, nil},
		{"narrow fixed", Options{Capacity: 100, Narrow: true, Fixed: true}, 256, nil},
		{"negative", Options{Capacity: -1}, 0, ErrCapacity},
		{"huge", Options{Capacity: math.MaxInt}, 0, ErrCapacity},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb, err := New(c.opt)
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
				require.Nil(t, tb)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.wantSlots, tb.Slots())
			require.Equal(t, c.wantSlots/2, tb.Cap())
			require.GreaterOrEqual(t, tb.Cap(), c.opt.Capacity)
			require.Equal(t, c.opt.Narrow, tb.Narrow())
			require.Equal(t, c.opt.Fixed, tb.Fixed())
			require.Zero(t, tb.Len())
		})
	}
}

func TestInsertFind(t *testing.T) {
	for _, narrow := range []bool{false, true} {
		tb, err := New(Options{Narrow: narrow})
		require.NoError(t, err)
		keys := []uint64{0, 1, 2, 1 << 20, MaxNarrowKey, 12345}
		if !narrow {
			keys = append(keys, MaxNarrowKey+1, 1<<40, MaxKey)
		}
		for i, k := range keys {
			require.NoError(t, tb.Insert(k, int32(i)-3)) // negative values are fine
		}
		require.Equal(t, len(keys), tb.Len())
		for i, k := range keys {
			v, ok := tb.Find(k)
			require.True(t, ok, "key %d", k)
			require.Equal(t, int32(i)-3, v)
			require.Equal(t, int32(i)-3, tb.Get(k, 99))
		}
		absent := []uint64{3, 4, 1<<20 + 1, math.MaxUint64, 1<<40 + 1}
		if narrow {
			absent = append(absent, math.MaxUint32, 1<<40)
		}
		for _, k := range absent {
			_, ok := tb.Find(k)
			require.False(t, ok, "key %d", k)
			require.Equal(t, int32(99), tb.Get(k, 99))
		}
		// A duplicate leaves the table unchanged and names both values.
		err = tb.Insert(12345, 7)
		require.ErrorIs(t, err, ErrDuplicate)
		d, ok := AsDuplicate(err)
		require.True(t, ok)
		require.Equal(t, &DuplicateError{Key: 12345, First: 2, Second: 7, Index: -1}, d)
		require.EqualError(t, err, "hash: duplicate key 12345: values 2 and 7")
		require.Equal(t, len(keys), tb.Len())
		v, inserted, err := tb.GetOrInsert(12345, 8)
		require.NoError(t, err)
		require.False(t, inserted)
		require.Equal(t, int32(2), v)
		v, inserted, err = tb.GetOrInsert(777, 8)
		require.NoError(t, err)
		require.True(t, inserted)
		require.Equal(t, int32(8), v)
		// Collect everything with All.
		got := map[uint64]int32{}
		for k, v := range tb.All() {
			got[k] = v
		}
		require.Len(t, got, tb.Len())
		require.Equal(t, int32(8), got[777])
	}
}

func TestBadKeys(t *testing.T) {
	narrow, err := New(Options{Narrow: true})
	require.NoError(t, err)
	for _, k := range []uint64{math.MaxUint32, math.MaxUint32 + 1, math.MaxUint64} {
		err := narrow.Insert(k, 1)
		require.ErrorIs(t, err, ErrKey)
		require.ErrorContains(t, err, "narrow")
	}
	wide, err := New(Options{})
	require.NoError(t, err)
	require.ErrorIs(t, wide.Insert(math.MaxUint64, 1), ErrKey)
	require.NoError(t, wide.Insert(math.MaxUint32, 1))
	require.Zero(t, narrow.Len())
	require.Equal(t, 1, wide.Len())
}

// TestFixedFull fills fixed tables to capacity: the next new key fails with
// ErrFull (no spinning), a key already present is still found and reported
// as a duplicate, and nothing is lost.
func TestFixedFull(t *testing.T) {
	for _, narrow := range []bool{false, true} {
		tb, err := New(Options{Capacity: 10, Fixed: true, Narrow: narrow})
		require.NoError(t, err)
		require.Equal(t, 16, tb.Cap())
		for k := range uint64(16) {
			require.NoError(t, tb.Insert(k*7919, int32(k)))
		}
		err = tb.Insert(1, 1)
		require.ErrorIs(t, err, ErrFull)
		require.ErrorContains(t, err, "holding 16 keys")
		require.ErrorIs(t, tb.Insert(7919, 5), ErrDuplicate)
		_, _, err = tb.GetOrInsert(2, 2)
		require.ErrorIs(t, err, ErrFull)
		v, inserted, err := tb.GetOrInsert(3*7919, 2)
		require.NoError(t, err)
		require.False(t, inserted)
		require.Equal(t, int32(3), v)
		require.ErrorIs(t, tb.Reserve(17), ErrFull)
		require.NoError(t, tb.Reserve(16))
		require.Equal(t, 32, tb.Slots())
		require.Equal(t, 16, tb.Len())
		for k := range uint64(16) {
			require.Equal(t, int32(k), tb.Get(k*7919, -1))
		}
		// A batch into a full fixed table stops at the first new key.
		err = tb.InsertBatch([]uint64{1, 2}, nil)
		require.ErrorIs(t, err, ErrFull)
		require.ErrorContains(t, err, "batch index 0")
	}
}

// TestGrow inserts far beyond the initial capacity: the table doubles, keeps
// the load factor ≤ 1/2 and every key.
func TestGrow(t *testing.T) {
	for _, narrow := range []bool{false, true} {
		tb, err := New(Options{Narrow: narrow})
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(1, 2))
		want := map[uint64]int32{}
		slots := tb.Slots()
		grows := 0
		for len(want) < 50_000 {
			k := rng.Uint64() % (MaxNarrowKey + 1)
			if _, ok := want[k]; ok {
				continue
			}
			want[k] = int32(len(want))
			require.NoError(t, tb.Insert(k, want[k]))
			require.LessOrEqual(t, 2*tb.Len(), tb.Slots())
			if tb.Slots() != slots {
				require.Equal(t, 2*slots, tb.Slots())
				slots = tb.Slots()
				grows++
			}
		}
		require.Equal(t, 14, grows) // 8 → 131072 slots
		require.Equal(t, len(want), tb.Len())
		for k, v := range want {
			require.Equal(t, v, tb.Get(k, -1))
		}
		// Reserve grows once to the final size.
		tb2, err := New(Options{Narrow: narrow})
		require.NoError(t, err)
		require.NoError(t, tb2.Reserve(100_000))
		require.Equal(t, 1<<18, tb2.Slots())
	}
}

func TestBatch(t *testing.T) {
	tb, err := New(Options{})
	require.NoError(t, err)
	keys := []uint64{10, 20, 30, 40}
	require.NoError(t, tb.InsertBatch(keys, nil))
	require.NoError(t, tb.InsertBatch([]uint64{50, 60}, []int32{-5, -6}))
	out := make([]int32, 7)
	n, err := tb.LookupBatch([]uint64{40, 10, 11, 60, 50, 0, 30}, out, -1)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	require.Equal(t, []int32{3, 0, -1, -6, -5, -1, 2}, out)

	err = tb.InsertBatch([]uint64{70, 80, 20, 90}, nil)
	var d *DuplicateError
	require.ErrorAs(t, err, &d)
	require.Equal(t, DuplicateError{Key: 20, First: 1, Second: 2, Index: 2}, *d)
	require.EqualError(t, err, "hash: duplicate key 20 at batch index 2: values 1 and 2")
	require.Equal(t, int32(1), tb.Get(80, -1), "keys before the failure stay inserted")
	require.Equal(t, int32(-1), tb.Get(90, -1))

	require.ErrorIs(t, tb.InsertBatch([]uint64{1, 2}, []int32{1}), ErrLength)
	_, err = tb.LookupBatch([]uint64{1, 2}, make([]int32, 1), -1)
	require.ErrorIs(t, err, ErrLength)
	require.ErrorIs(t, tb.InsertBatch([]uint64{math.MaxUint64}, nil), ErrKey)

	// Empty batches.
	require.NoError(t, tb.InsertBatch(nil, nil))
	n, err = tb.LookupBatch(nil, nil, -1)
	require.NoError(t, err)
	require.Zero(t, n)

	// A large batch is looked up in parallel chunks.
	big, err := New(Options{Narrow: true})
	require.NoError(t, err)
	keys = make([]uint64, 100_000)
	for i := range keys {
		keys[i] = uint64(i) * 3
	}
	require.NoError(t, big.InsertBatch(keys, nil))
	q := make([]uint64, 300_000)
	for i := range q {
		q[i] = uint64(i)
	}
	out = make([]int32, len(q))
	n, err = big.LookupBatch(q, out, -7)
	require.NoError(t, err)
	require.Equal(t, 100_000, n)
	for i, v := range out {
		if i%3 == 0 {
			require.Equal(t, int32(i/3), v)
		} else {
			require.Equal(t, int32(-7), v)
		}
	}

	// A table beyond the caches and a batch large enough to be looked up
	// in home-slot order, in random order with hits and misses.
	rng := rand.New(rand.NewPCG(5, 6))
	keys = make([]uint64, 300_000)
	ref := map[uint64]int32{}
	for i := range keys {
		keys[i] = rng.Uint64() >> 1
		ref[keys[i]] = int32(i)
	}
	huge, err := New(Options{})
	require.NoError(t, err)
	require.NoError(t, huge.InsertBatch(keys, nil))
	require.GreaterOrEqual(t, huge.Slots(), sortedLookupSlots)
	q = make([]uint64, 400_000)
	for i := range q {
		if i%2 == 0 {
			q[i] = keys[rng.IntN(len(keys))]
		} else {
			q[i] = rng.Uint64() >> 1
		}
	}
	out = make([]int32, len(q))
	n, err = huge.LookupBatch(q, out, -1)
	require.NoError(t, err)
	hits := 0
	for i, k := range q {
		v, ok := ref[k]
		if !ok {
			v = -1
		} else {
			hits++
		}
		require.Equal(t, v, out[i])
	}
	require.Equal(t, hits, n)
}

func TestFromCoords(t *testing.T) {
	ext := grid.Extent{Batch: 2, X: 3, Y: 4, Z: 5}
	coords := []int32{1, 2, 3, 4, 0, 0, 0, 0, 1, 0, 0, 0, 0, 2, 3, 4}
	tb, err := FromCoords(coords, ext)
	require.NoError(t, err)
	require.True(t, tb.Narrow())
	require.Equal(t, 4, tb.Len())
	for r := range 4 {
		c := coords[4*r:]
		require.Equal(t, int32(r), tb.Get(ext.Key(int(c[0]), int(c[1]), int(c[2]), int(c[3])), -1))
	}
	empty, err := FromCoords(nil, ext)
	require.NoError(t, err)
	require.Zero(t, empty.Len())

	wideExt := grid.Extent{Batch: 2, X: 1 << 11, Y: 1 << 11, Z: 1 << 11}
	wide, err := FromCoords([]int32{1, 2047, 2047, 2047}, wideExt)
	require.NoError(t, err)
	require.False(t, wide.Narrow())
	require.Equal(t, int32(0), wide.Get(wideExt.Key(1, 2047, 2047, 2047), -1))

	cases := []struct {
		name   string
		coords []int32
		ext    grid.Extent
		want   error
		msg    string
	}{
		{"length", []int32{0, 0, 0}, ext, ErrCoords, "length 3"},
		{"outside", []int32{0, 0, 0, 0, 0, 3, 0, 0}, ext, ErrCoords, "row 1 (0, 3, 0, 0) is outside"},
		{"negative", []int32{0, 0, -1, 0}, ext, ErrCoords, "row 0"},
		{"batch", []int32{2, 0, 0, 0}, ext, ErrCoords, "row 0 (2, 0, 0, 0)"},
		{"extent", nil, grid.Extent{Batch: 0, X: 1, Y: 1, Z: 1}, grid.ErrBadExtent, "non-positive"},
		{"duplicate", []int32{0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1}, ext, ErrDuplicate, "rows 0 and 2 are both (0, 1, 1, 1)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb, err := FromCoords(c.coords, c.ext)
			require.Nil(t, tb)
			require.ErrorIs(t, err, c.want)
			require.ErrorContains(t, err, c.msg)
		})
	}
	_, err = FromCoords([]int32{0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1}, ext)
	d, ok := AsDuplicate(err)
	require.True(t, ok)
	require.Equal(t, DuplicateError{Key: ext.Key(0, 1, 1, 1), First: 0, Second: 2, Index: 2}, *d)
	_, ok = AsDuplicate(errors.New("other"))
	require.False(t, ok)
}

// TestProbeStats checks the spread of real voxel keys (the sphere shell of
// FlexGEMM's benchmarks) and of adversarially regular keys: at load ≤ 1/2,
// linear probing should average well under one extra probe, and no key
// should sit far from home.
func TestProbeStats(t *testing.T) {
	if testing.Short() {
		t.Skip("probe statistics over millions of keys")
	}
	check := func(t *testing.T, keys []uint64, narrow bool) {
		tb, err := New(Options{Capacity: len(keys), Narrow: narrow})
		require.NoError(t, err)
		require.NoError(t, tb.InsertBatch(keys, nil))
		st := tb.Stats()
		require.Equal(t, len(keys), st.Len)
		require.Equal(t, tb.Slots(), st.Slots)
		require.LessOrEqual(t, st.Load, 0.5)
		sum := 0
		for _, c := range st.Histogram {
			sum += c
		}
		require.Equal(t, len(keys), sum)
		require.Equal(t, tb.MaxProbe(), st.MaxProbe)
		// Expected mean displacement of linear probing at load α is
		// (1/(1−α) − 1)/2 ≈ 0.5 at α = 1/2; allow 20 %.
		alpha := st.Load
		expect := (1/(1-alpha) - 1) / 2
		require.Less(t, st.MeanProbe, 1.2*expect+0.01, "mean probe %.3f, expected about %.3f", st.MeanProbe, expect)
		require.Less(t, st.MaxProbe, 80, "max probe")
		t.Logf("%d keys, load %.3f: mean probe %.3f (theory %.3f), max %d", st.Len, st.Load, st.MeanProbe, expect, st.MaxProbe)
	}
	t.Run("shell1024", func(t *testing.T) {
		coords := shellCoords(1024, 1)
		ext := grid.Extent{Batch: 1, X: 1024, Y: 1024, Z: 1024}
		keys := make([]uint64, len(coords)/4)
		for r := range keys {
			keys[r] = ext.Key(int(coords[4*r]), int(coords[4*r+1]), int(coords[4*r+2]), int(coords[4*r+3]))
		}
		check(t, keys, true)
	})
	t.Run("dense_block", func(t *testing.T) {
		// A dense 128³ block: consecutive keys.
		keys := make([]uint64, 128*128*128)
		for i := range keys {
			keys[i] = uint64(i)
		}
		check(t, keys, true)
	})
	t.Run("strided_wide", func(t *testing.T) {
		// Multiples of a large power of two, high bits only.
		keys := make([]uint64, 1<<20)
		for i := range keys {
			keys[i] = uint64(i) << 40
		}
		check(t, keys, false)
	})
}

// FuzzTable runs a random program of inserts, lookups and batch calls on a
// table and a Go map side by side.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{7, 255, 255, 255, 255, 255, 255, 255, 255, 1})
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) == 0 {
			return
		}
		narrow := prog[0]&1 == 1
		fixed := prog[0]&2 == 2
		keyMask := uint64(math.MaxUint64)
		if prog[0]&4 == 4 {
			keyMask = 63 // many repeats
		}
		tb, err := New(Options{Capacity: int(prog[0] >> 3), Narrow: narrow, Fixed: fixed})
		require.NoError(t, err)
		capacity := tb.Cap()
		ref := map[uint64]int32{}
		prog = prog[1:]
		for len(prog) >= 9 {
			op := prog[0]
			key := binary.LittleEndian.Uint64(prog[1:9]) & keyMask
			prog = prog[9:]
			val := int32(len(prog))
			storable := key <= MaxKey && (!narrow || key <= MaxNarrowKey)
			switch op % 3 {
			case 0: // insert
				err := tb.Insert(key, val)
				old, present := ref[key]
				switch {
				case !storable:
					require.ErrorIs(t, err, ErrKey)
				case present:
					var d *DuplicateError
					require.ErrorAs(t, err, &d)
					require.Equal(t, DuplicateError{Key: key, First: old, Second: val, Index: -1}, *d)
				case fixed && len(ref) == capacity:
					require.ErrorIs(t, err, ErrFull)
				default:
					require.NoError(t, err)
					ref[key] = val
				}
			case 1: // get or insert
				got, inserted, err := tb.GetOrInsert(key, val)
				old, present := ref[key]
				switch {
				case !storable:
					require.ErrorIs(t, err, ErrKey)
				case present:
					require.NoError(t, err)
					require.False(t, inserted)
					require.Equal(t, old, got)
				case fixed && len(ref) == capacity:
					require.ErrorIs(t, err, ErrFull)
				default:
					require.NoError(t, err)
					require.True(t, inserted)
					require.Equal(t, val, got)
					ref[key] = val
				}
			case 2: // lookup, also through a batch
				v, ok := tb.Find(key)
				want, present := ref[key]
				require.Equal(t, present, ok)
				if present {
					require.Equal(t, want, v)
				}
				out := make([]int32, 1)
				n, err := tb.LookupBatch([]uint64{key}, out, -9)
				require.NoError(t, err)
				if present {
					require.Equal(t, 1, n)
					require.Equal(t, want, out[0])
				} else {
					require.Zero(t, n)
					require.Equal(t, int32(-9), out[0])
				}
			}
			require.Equal(t, len(ref), tb.Len())
			require.LessOrEqual(t, 2*tb.Len(), tb.Slots())
		}
		got := map[uint64]int32{}
		for k, v := range tb.All() {
			got[k] = v
		}
		require.Equal(t, ref, got)
	})
}

// TestBulkMatchesSequential checks that large batches (inserted in
// home-slot order) end exactly as a one-by-one insert would: same error,
// same contents.
func TestBulkMatchesSequential(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 40 {
		narrow := trial%2 == 0
		n := bulkMin + rng.IntN(3*bulkMin)
		keys := make([]uint64, n)
		for j := range keys {
			keys[j] = rng.Uint64() % (MaxNarrowKey + 1)
		}
		switch trial % 5 {
		case 1: // one duplicate
			j := 1 + rng.IntN(n-1)
			keys[j] = keys[rng.IntN(j)]
		case 2: // several duplicates, of several keys
			for range 5 {
				j := 1 + rng.IntN(n-1)
				keys[j] = keys[rng.IntN(j)]
			}
		case 3: // an unstorable key
			keys[rng.IntN(n)] = math.MaxUint64
		case 4: // both
			j := 1 + rng.IntN(n-1)
			keys[j] = keys[rng.IntN(j)]
			keys[rng.IntN(n)] = math.MaxUint64
		}
		var vals []int32
		if trial%3 == 0 {
			vals = make([]int32, n)
			for j := range vals {
				vals[j] = -int32(j) - 1
			}
		}
		val := func(j int) int32 {
			if vals == nil {
				return int32(j)
			}
			return vals[j]
		}
		// Reference: a Go map filled until the first failure.
		ref := map[uint64]int32{}
		var wantErr error
		for j, k := range keys {
			if k > MaxKey || (narrow && k > MaxNarrowKey) {
				wantErr = ErrKey
				break
			}
			if old, ok := ref[k]; ok {
				wantErr = &DuplicateError{Key: k, First: old, Second: val(j), Index: j}
				break
			}
			ref[k] = val(j)
		}
		tb, err := New(Options{Narrow: narrow})
		require.NoError(t, err)
		err = tb.InsertBatch(keys, vals)
		switch w := wantErr.(type) {
		case nil:
			require.NoError(t, err)
		case *DuplicateError:
			var d *DuplicateError
			require.ErrorAs(t, err, &d)
			require.Equal(t, *w, *d)
		default:
			require.ErrorIs(t, err, ErrKey)
		}
		require.Equal(t, len(ref), tb.Len())
		got := map[uint64]int32{}
		for k, v := range tb.All() {
			got[k] = v
		}
		require.Equal(t, ref, got)
		for k, v := range ref {
			require.Equal(t, v, tb.Get(k, 0))
		}
		require.Equal(t, tb.Stats().MaxProbe, tb.MaxProbe())
	}
}
