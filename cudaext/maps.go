//go:build cudaext

package cudaext

import (
	"runtime"
	"unsafe"
	"weak"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// Kernel maps are uploaded once per *kmap.Map and kept on the device until
// the map is garbage collected (a cleanup queues the release) or
// ForgetMap is called. Each table is uploaded on first use.

type mapKey = weak.Pointer[kmap.Map]

func keyOf(m *kmap.Map) mapKey { return weak.Make(m) }

type maskKey struct {
	reverse bool // tables of Map.ReverseMasked
	rows    int  // tile rows (the kernel's BM)
}

// maskedTables are the device copies of a Masked order and its tile tap
// unions for one tile height.
type maskedTables struct {
	order, seg, taps rawBuf
}

type mapEntry struct {
	nbr, rev                rawBuf // [NOut·V], [NIn·V] int32
	haveNbr, haveRev        bool
	pairIn, pairOut, pairSg rawBuf // pair lists and [V+1] int64 segments
	havePairs               bool
	masked                  map[maskKey]*maskedTables
}

type mapCache struct {
	entries map[mapKey]*mapEntry
}

// entry returns the cache entry of m, creating it (and its GC cleanup).
// Worker only.
func (e *Engine) entry(m *kmap.Map) *mapEntry {
	k := keyOf(m)
	if me, ok := e.maps.entries[k]; ok {
		return me
	}
	me := &mapEntry{masked: map[maskKey]*maskedTables{}}
	e.maps.entries[k] = me
	d := e.d
	runtime.AddCleanup(m, func(k mapKey) {
		d.later(func() { e.dropMap(k) })
	}, k)
	return me
}

// dropMap frees the tables of one map. Worker only.
func (e *Engine) dropMap(k mapKey) {
	me, ok := e.maps.entries[k]
	if !ok {
		return
	}
	delete(e.maps.entries, k)
	d := e.d
	for _, r := range []rawBuf{me.nbr, me.rev, me.pairIn, me.pairOut, me.pairSg} {
		d.freeTemp(r)
	}
	for _, t := range me.masked {
		d.freeTemp(t.order)
		d.freeTemp(t.seg)
		d.freeTemp(t.taps)
	}
}

// uploadSlice copies a host slice of 4- or 8-byte integers to a new
// block. An empty slice gives the zero page. Worker only.
func uploadSlice[T int32 | int64](d *Device, s []T) (rawBuf, error) {
	if len(s) == 0 {
		return rawBuf{ptr: d.zeroPage}, nil
	}
	bytes := int64(len(s)) * int64(unsafe.Sizeof(s[0]))
	r, err := d.allocTemp(bytes)
	if err != nil {
		return rawBuf{}, err
	}
	if err := memcpyHtoD(r.ptr, unsafe.Pointer(&s[0]), bytes, d.stream); err != nil {
		d.freeTemp(r)
		return rawBuf{}, err
	}
	return r, nil
}

// nbrTable returns the device copy of m.Nbr. Worker only.
func (e *Engine) nbrTable(m *kmap.Map) (devPtr, error) {
	me := e.entry(m)
	if !me.haveNbr {
		r, err := uploadSlice(e.d, m.Nbr)
		if err != nil {
			return 0, err
		}
		me.nbr, me.haveNbr = r, true
	}
	return me.nbr.ptr, nil
}

// revTable returns the device copy of m.Reverse(). Worker only.
func (e *Engine) revTable(m *kmap.Map) (devPtr, error) {
	me := e.entry(m)
	if !me.haveRev {
		r, err := uploadSlice(e.d, m.Reverse())
		if err != nil {
			return 0, err
		}
		me.rev, me.haveRev = r, true
	}
	return me.rev.ptr, nil
}

// pairTables returns the device pair lists (in, out) and segments of
// m.Pairs(). Worker only.
func (e *Engine) pairTables(m *kmap.Map) (in, out, seg devPtr, err error) {
	me := e.entry(m)
	if !me.havePairs {
		p := m.Pairs()
		var a, b, c rawBuf
		if a, err = uploadSlice(e.d, p.In); err != nil {
			return
		}
		if b, err = uploadSlice(e.d, p.Out); err != nil {
			e.d.freeTemp(a)
			return
		}
		if c, err = uploadSlice(e.d, p.Seg); err != nil {
			e.d.freeTemp(a)
			e.d.freeTemp(b)
			return
		}
		me.pairIn, me.pairOut, me.pairSg, me.havePairs = a, b, c, true
	}
	return me.pairIn.ptr, me.pairOut.ptr, me.pairSg.ptr, nil
}

// maskedTablesFor returns the device Gray order and tile tap unions of the
// forward (reverse = false) or reverse table for tiles of rows rows.
// Worker only.
func (e *Engine) maskedTablesFor(m *kmap.Map, reverse bool, rows int) (*maskedTables, error) {
	me := e.entry(m)
	k := maskKey{reverse, rows}
	if t, ok := me.masked[k]; ok {
		return t, nil
	}
	ms := m.Masked()
	if reverse {
		ms = m.ReverseMasked()
	}
	tiles := ms.Tiles(rows)
	t := &maskedTables{}
	var err error
	if t.order, err = uploadSlice(e.d, ms.Order); err != nil {
		return nil, err
	}
	if t.seg, err = uploadSlice(e.d, tiles.Seg); err != nil {
		e.d.freeTemp(t.order)
		return nil, err
	}
	if t.taps, err = uploadSlice(e.d, tiles.Taps); err != nil {
		e.d.freeTemp(t.order)
		e.d.freeTemp(t.seg)
		return nil, err
	}
	me.masked[k] = t
	return t, nil
}
