//go:build cudaext

package cudaext

import (
	"fmt"
	"runtime"
	"unsafe"
	"weak"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// Kernel maps keep their device tables in the engine's map cache, one
// entry per *kmap.Map, until the map is garbage collected (a cleanup
// queues the release), ForgetMap or ReleaseMap is called, or the engine is
// closed.
//
// A map built by this engine (kmapgpu.go) enters the cache with its Nbr,
// Rev and coordinates, and its host tables stay on the device: its Source
// is the engine's tableSource, which downloads them only when host code
// calls m.Load (directly, or through the CPU engine or kmap's derived
// accessors). A map built on the host has its Nbr uploaded on first use.
// Every derived table (reverse table, pair lists, masks and Gray orders,
// tile tap unions) is computed on the device from the device Nbr on first
// use and cached; the host's derived structures are never consulted.
//
// Code inside Device.do never calls m.Load (a map built here would load
// through do again, under the lock it holds): checkMap loads maps of other
// origins before the work enters do.

type mapKey = weak.Pointer[kmap.Map]

func keyOf(m *kmap.Map) mapKey { return weak.Make(m) }

type maskKey struct {
	reverse bool // tables of the reverse table
	rows    int  // tile rows (the kernel's BM)
}

// grayTables are the device bitmasks [n, W] uint64 and the masked order
// [n] int32 (kmap.Masked.Order: the Gray-code order, regrouped where
// kmap.Regroups says so) of the forward or the reverse table. The masks serve
// only to compute tile unions: a convolution drops them once it has its
// tiles' (dropMasks; mask.ptr 0), and unions of another tile height
// rebuild them for the while (maskedTablesFor).
type grayTables struct {
	mask, order rawBuf
}

// tileTables are the tap unions of the tiles of one height over a Gray
// order: seg [tiles + 1] int32 and taps (allocated for the worst case,
// tiles · V, so that no host wait sizes them); and the gathers' launch
// orders [tiles] int32 of the tiles, by descending tap count (longest) and
// by first row (byRows), each computed by Device.tileSchedule for the
// first gather whose arithmetic asks for it (Device.longestFirst,
// Device.rowsFirst).
type tileTables struct {
	seg, taps       rawBuf
	longest, byRows rawBuf
}

// bufs returns t's blocks, those not made too (zero rawBufs).
func (t *tileTables) bufs() []rawBuf { return []rawBuf{t.seg, t.taps, t.longest, t.byRows} }

// maskedTables is what a masked GEMM reads: a Gray order (a view of a
// cached block) and the cached tile tables of its tile height (tap unions,
// and the launch orders that Device.tileSchedule computes).
type maskedTables struct {
	order devPtr
	tiles *tileTables
}

type mapEntry struct {
	nbr, rev         rawBuf // [NOut·V], [NIn·V] int32
	haveNbr, haveRev bool
	pairs            *pairBufs      // the pair lists, once derived
	gray             [2]*grayTables // forward, reverse
	// Nbr's tap masks and their Gray ranks in table order from the brick
	// search (devMap), until the forward Gray tables take them.
	nbrMask, nbrRank rawBuf
	tiles            map[maskKey]*tileTables
	perTap           map[int64]*perTapTables // per-tap gathers' slot tables by tile height (pertap.go)
	hybrid           map[int64]*hybridTables // hybrid gathers' tables by tile height (hybrid.go)
	// Coordinates of a map built here ([NIn, 4], [NOut, 4] int32), owned
	// or borrowed (keepCoords); one block when sameCoords (submanifold maps).
	inC, outC       coordBlock
	haveIn, haveOut bool
	sameCoords      bool
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
	me := &mapEntry{tiles: map[maskKey]*tileTables{}}
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
	me.inC.release(d)
	if !me.sameCoords {
		me.outC.release(d)
	}
	bufs := []rawBuf{me.nbr, me.rev, me.nbrMask, me.nbrRank}
	if p := me.pairs; p != nil {
		d.freePairs(p)
	}
	for _, g := range me.gray {
		if g != nil {
			bufs = append(bufs, g.mask, g.order)
		}
	}
	for _, t := range me.tiles {
		bufs = append(bufs, t.bufs()...)
	}
	for _, t := range me.perTap {
		bufs = append(bufs, t.buf)
	}
	for _, h := range me.hybrid {
		e.freeHybrid(h)
	}
	for _, r := range bufs {
		d.freeTemp(r)
	}
}

// builtHere reports whether m was built by this engine (its tables live in
// this engine's cache, not on the host).
func (e *Engine) builtHere(m *kmap.Map) bool {
	s, ok := m.Source.(*tableSource)
	return ok && s.e == e
}

// checkMap checks m before a call's work enters do: a map not built
// by this engine is loaded here (kmap.Map.Load; a no-op for host maps)
// and its table length checked; a map built here is trusted as it is and
// nothing is downloaded.
func (e *Engine) checkMap(op string, m *kmap.Map) error {
	if m == nil {
		return fmt.Errorf("%w: %s: nil kernel map", sparse.ErrShape, op)
	}
	if !e.builtHere(m) {
		if err := m.Load(); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	if m.Loaded() && len(m.Nbr) != m.NOut*m.V() {
		return fmt.Errorf("%w: %s: kernel map table has %d entries, want %d·%d", sparse.ErrShape, op, len(m.Nbr), m.NOut, m.V())
	}
	return nil
}

// ForgetMap releases the device copies of m's tables now rather than when
// m is garbage collected. m stays usable: the host tables of a map built
// on this device are loaded first if they never were (kmap.Map.Load: a
// download), and later use on the device uploads them again. ReleaseMap
// skips the download for a map that is done.
func (e *Engine) ForgetMap(m *kmap.Map) {
	if m != nil && e.builtHere(m) {
		// On failure (a map already released) there is nothing to keep.
		_ = m.Load()
	}
	_ = e.d.do(func() error { e.dropMap(keyOf(m)); return nil })
}

// ReleaseMap releases the device copies of m's tables now, like ForgetMap,
// but never downloads: a map built on this device whose host tables were
// not loaded becomes unusable, and every later use of it fails with
// ErrReleased. Use it to end a map's life at a known point (the end of a
// training step) without copying its tables back.
func (e *Engine) ReleaseMap(m *kmap.Map) {
	_ = e.d.do(func() error { e.dropMap(keyOf(m)); return nil })
}

// OutCoords returns m's output coordinates as a new device Int32 matrix
// [m.NOut, 4] (release it with Free): copied on the device for a map built
// here, uploaded from the host otherwise. Builds chain through it without
// a host round trip, e.g. e.StridedMap(out, m.Out, conv, sparse.Matrix{}).
func (e *Engine) OutCoords(m *kmap.Map) (sparse.Matrix, error) {
	const op = "cudaext: OutCoords"
	if err := e.checkMap(op, m); err != nil {
		return sparse.Matrix{}, err
	}
	var b *Buffer
	err := e.d.do(func() error {
		d := e.d
		var err error
		if b, err = d.newBuffer(sparse.Int32, 4*m.NOut); err != nil || m.NOut == 0 {
			return err
		}
		bytes := int64(m.NOut) * 16
		if me, ok := e.maps.entries[keyOf(m)]; ok && me.haveOut {
			return memcpyDtoD(b.ptr, me.outC.ptr, bytes, d.stream)
		}
		if !m.Loaded() {
			return fmt.Errorf("%w: %s of a %v map", ErrReleased, op, m.Kind)
		}
		if len(m.OutCoords) != 4*m.NOut {
			return fmt.Errorf("%w: %s: the map has %d output coordinates, want %d·4", sparse.ErrShape, op, len(m.OutCoords), m.NOut)
		}
		return memcpyHtoD(b.ptr, unsafe.Pointer(&m.OutCoords[0]), bytes, d.stream)
	})
	if err != nil {
		if b != nil {
			b.Free()
		}
		return sparse.Matrix{}, err
	}
	return sparse.Matrix{Rows: m.NOut, Cols: 4, Data: b}, nil
}

// tableSource is the kmap.TableSource of the maps an engine builds: it
// downloads the tables the map's cache entry holds.
type tableSource struct{ e *Engine }

// HostTables implements kmap.TableSource.
func (s *tableSource) HostTables(m *kmap.Map) (kmap.Tables, error) {
	V := m.V()
	wantIn := m.InCoords == nil && m.NIn > 0
	wantOut := m.OutCoords == nil && m.NOut > 0
	wantNbr := m.Nbr == nil && m.NOut*V > 0
	var t kmap.Tables
	if !wantIn && !wantOut && !wantNbr {
		return t, nil
	}
	e := s.e
	err := e.d.do(func() error {
		d := e.d
		me, ok := e.maps.entries[keyOf(m)]
		if !ok || (wantNbr && !me.haveNbr) || (wantIn && !me.haveIn) || (wantOut && !me.haveOut) {
			return fmt.Errorf("%w: the %v map's host tables were never loaded", ErrReleased, m.Kind)
		}
		var err error
		if wantNbr {
			if t.Nbr, err = download[int32](d, me.nbr.ptr, m.NOut*V); err != nil {
				return err
			}
		}
		if wantIn {
			if t.InCoords, err = download[int32](d, me.inC.ptr, 4*m.NIn); err != nil {
				return err
			}
		}
		if wantOut {
			if me.sameCoords && wantIn {
				t.OutCoords = t.InCoords
			} else if t.OutCoords, err = download[int32](d, me.outC.ptr, 4*m.NOut); err != nil {
				return err
			}
		}
		return nil
	})
	return t, err
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

// nbrTable returns the device Nbr of m, uploading the host table of a map
// built on the host. Worker only.
func (e *Engine) nbrTable(m *kmap.Map) (devPtr, error) {
	me := e.entry(m)
	if !me.haveNbr {
		// Only a loaded map may be read here: nothing inside do may load.
		if !m.Loaded() {
			return 0, fmt.Errorf("%w: the %v map's tables were released before they were loaded to the host", ErrReleased, m.Kind)
		}
		r, err := uploadSlice(e.d, m.Nbr)
		if err != nil {
			return 0, err
		}
		me.nbr, me.haveNbr = r, true
	}
	return me.nbr.ptr, nil
}

// revTable returns the device reverse table of m (kmap.Map.Reverse),
// computing it on the device from the device Nbr if it is not cached.
// Worker only.
func (e *Engine) revTable(m *kmap.Map) (devPtr, error) {
	me := e.entry(m)
	if me.haveRev {
		return me.rev.ptr, nil
	}
	nbr, err := e.nbrTable(m)
	if err != nil {
		return 0, err
	}
	V := m.V()
	rev, err := e.d.allocTable(m.NIn, V)
	if err != nil {
		return 0, err
	}
	if err := e.d.reverse(nbr, rev.ptr, m.NIn, m.NOut, V, m.Kind == kmap.Submanifold); err != nil {
		e.d.freeTemp(rev)
		return 0, err
	}
	me.rev, me.haveRev = rev, true
	return rev.ptr, nil
}

// pairLists are the device pair lists of a map (kmap.Map.Pairs).
type pairLists struct {
	in, out devPtr    // [P] int32
	seg     devPtr    // [taps+1] int64
	off     devPtr    // first pair of each chunk of pairsChunk output rows per tap (Device.pairs), or 0
	st      pairStats // segment lengths of all V taps
	half    bool      // the lists hold only the taps before the centre (a submanifold map, read mirrored; see TablePairs)
}

// pairBufs are a map's cached device pair lists (Device.pairsCount), and
// while copy is set, lists counted but not yet written (pairBufs.write).
type pairBufs struct {
	in, out rawBuf    // [P] int32
	seg     rawBuf    // [taps+1] int64
	off     rawBuf    // first pair of each chunk of pairsChunk output rows per tap, or none
	st      pairStats // segment lengths of all V taps
	half    bool      // the lists hold the taps before the centre (submanifold; TablePairs)
	// The table the lists are counted from: nOut rows of V taps, of which
	// the lists hold taps.
	nOut, V, taps int
	copy          *segCopy // the segments on their way to the host, until write
}

// bufs returns the allocator blocks of the lists (some may be empty).
func (p *pairBufs) bufs() []rawBuf { return []rawBuf{p.in, p.out, p.seg, p.off} }

// lists returns the launch view of the cached lists.
func (p *pairBufs) lists() pairLists {
	return pairLists{in: p.in.ptr, out: p.out.ptr, seg: p.seg.ptr, off: p.off.ptr, st: p.st, half: p.half}
}

// pairTables returns the device pair lists of m, computing them on the
// device if they are not cached, or finishing them if countPairs started
// them: writing the lists waits for the copy of their sizes, at once when
// they were not counted ahead. Worker only.
func (e *Engine) pairTables(m *kmap.Map) (pairLists, error) {
	p, err := e.countPairs(m, false)
	if err != nil {
		return pairLists{}, err
	}
	if p.copy != nil {
		nbr, err := e.nbrTable(m)
		if err != nil {
			return pairLists{}, err
		}
		if err := p.write(e.d, nbr); err != nil {
			e.d.freePairs(p)
			e.entry(m).pairs = nil
			return pairLists{}, err
		}
	}
	return p.lists(), nil
}

// countPairs starts the pair lists of m (Device.pairsCount; ahead: to be
// written later, else at once) unless they are cached, started or
// written. Worker only.
func (e *Engine) countPairs(m *kmap.Map, ahead bool) (*pairBufs, error) {
	me := e.entry(m)
	if me.pairs == nil {
		nbr, err := e.nbrTable(m)
		if err != nil {
			return nil, err
		}
		if me.pairs, err = e.d.pairsCount(nbr, me.nbrMasks(m.V()), m.NOut, m.V(), m.Kind == kmap.Submanifold, ahead); err != nil {
			return nil, err
		}
	}
	return me.pairs, nil
}

// nbrMasks returns the tap masks of the map's neighbour table in table
// order where the device holds them — the brick search's until the Gray
// tables take them, then the forward Gray tables' until a convolution
// drops them — or a zero rowMasks.
func (me *mapEntry) nbrMasks(V int) rowMasks {
	if me.nbrMask.ptr != 0 {
		return rowMasks{ptr: me.nbrMask.ptr, words: 1} // 3×3×3 maps only
	}
	if g := me.gray[0]; g != nil && g.mask.ptr != 0 {
		return rowMasks{ptr: g.mask.ptr, words: (V + 63) / 64}
	}
	return rowMasks{}
}

// grayTablesFor returns the device masks and Gray order of m's forward
// (reverse = false) or reverse table, computing them if they are not
// cached. Worker only.
func (e *Engine) grayTablesFor(m *kmap.Map, reverse bool) (*grayTables, error) {
	me := e.entry(m)
	i, n := 0, m.NOut
	if reverse {
		i, n = 1, m.NIn
	}
	if g := me.gray[i]; g != nil {
		return g, nil
	}
	if !reverse && me.nbrRank.ptr != 0 {
		// The brick search wrote the masks and the ranks in table order
		// (only for more than kmap.BalancedKeyMaxRows rows, whose key reads
		// the taps in table order): sort the ranks only. grayFromRanks
		// owns both from here, on failure too.
		mask, rank := me.nbrMask, me.nbrRank
		me.nbrMask, me.nbrRank = rawBuf{}, rawBuf{}
		g, err := e.d.grayFromRanks(mask, rank, n, m.V())
		if err != nil {
			return nil, err
		}
		me.gray[i] = g
		return g, nil
	}
	table, err := e.tableOf(m, reverse)
	if err != nil {
		return nil, err
	}
	g, err := e.d.grayMasks(table, n, m.V())
	if err != nil {
		return nil, err
	}
	me.gray[i] = g
	return g, nil
}

// maskedTablesFor returns the device Gray order and tile tap unions of m's
// forward (reverse = false) or reverse table for tiles of rows rows
// (kmap.Map.Masked().Tiles(rows)), computing what is not cached on the
// device without a host wait. Worker only.
func (e *Engine) maskedTablesFor(m *kmap.Map, reverse bool, rows int) (maskedTables, error) {
	g, err := e.grayTablesFor(m, reverse)
	if err != nil {
		return maskedTables{}, err
	}
	me := e.entry(m)
	rows = max(rows, 1)
	k := maskKey{reverse, rows}
	t, ok := me.tiles[k]
	if !ok {
		n := m.NOut
		if reverse {
			n = m.NIn
		}
		mask := g.mask
		if mask.ptr == 0 {
			table, err := e.tableOf(m, reverse)
			if err != nil {
				return maskedTables{}, err
			}
			if mask, err = e.d.tableMasks(table, n, m.V()); err != nil {
				return maskedTables{}, err
			}
			defer e.d.freeTemp(mask)
		}
		u, err := e.d.tileUnions(mask.ptr, g.order.ptr, n, m.V(), rows)
		if err != nil {
			return maskedTables{}, err
		}
		t = &u
		me.tiles[k] = t
	}
	return maskedTables{order: g.order.ptr, tiles: t}, nil
}

// dropMasks frees the bitmasks of m's forward or reverse Gray tables (see
// grayTables): at C = 64 and 4 M rows they are 32 MiB of the inference
// peak. Worker only.
func (e *Engine) dropMasks(m *kmap.Map, reverse bool) {
	i := 0
	if reverse {
		i = 1
	}
	if g := e.entry(m).gray[i]; g != nil && g.mask.ptr != 0 {
		e.d.freeTemp(g.mask)
		g.mask = rawBuf{}
	}
}

// tableOf returns m's device neighbour table, or its reverse table.
// Worker only.
func (e *Engine) tableOf(m *kmap.Map, reverse bool) (devPtr, error) {
	if reverse {
		return e.revTable(m)
	}
	return e.nbrTable(m)
}
