//go:build cudaext

package cudaext

// Device-wide primitives of the spatial kernels (kernels/sort.cu): scans,
// a stable LSD radix sort, unique of sorted keys, and small host↔device
// helpers. Everything here is worker only.

import (
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// sortTile is the number of elements per block of the sort and scan
// kernels (kernels/sort.cu kTile); sortThreads their block size;
// runSortRun the keys of each run that one block of the run sort sorts
// before the merge (kRun; at most runSortLimit keys in all, kRunSort);
// sortMaxDigit the widest digit of a radix pass (kMaxRadix
// = 1 << sortMaxDigit: a 27-bit Gray rank sorts in three passes, not four).
const (
	sortTile     = 2048
	sortThreads  = 256
	runSortRun   = 1024
	sortMaxDigit = 9
)

// scanType names the element types of a scan: input → output.
type scanType int

const (
	scanI32    scanType = iota // int32 → int32
	scanI32I64                 // int32 → int64
	scanI64                    // int64 → int64
)

func (t scanType) suffixes() (reduce, partials, final string, outSize int64) {
	switch t {
	case scanI32:
		return "i32_i32", "i32", "i32_i32", 4
	case scanI32I64:
		return "i32_i64", "i64", "i32_i64", 8
	}
	return "i64_i64", "i64", "i64_i64", 8
}

// scan writes the exclusive prefix sums of the n elements at in to out
// (in and out may be equal) and, if total is not 0, their sum to total.
func (d *Device) scan(t scanType, in, out devPtr, n int64, total devPtr) error {
	red, part, fin, osz := t.suffixes()
	if n == 0 {
		if total != 0 {
			return memsetD8(total, 0, osz, d.stream)
		}
		return nil
	}
	nb := (n + sortTile - 1) / sortTile
	if nb == 1 {
		return d.launch("scan_tile_"+fin, dim3{X: 1}, dim3{X: sortThreads}, 0, in, out, n, total)
	}
	tmp, err := d.allocTemp(nb * osz)
	if err != nil {
		return err
	}
	defer d.freeTemp(tmp)
	blk := dim3{X: sortThreads}
	if err := d.launch("scan_reduce_"+red, dim3{X: int(nb)}, blk, 0, in, tmp.ptr, n); err != nil {
		return err
	}
	if err := d.launch("scan_partials_"+part, dim3{X: 1}, blk, 0, tmp.ptr, nb, total); err != nil {
		return err
	}
	return d.launch("scan_final_"+fin, dim3{X: int(nb)}, blk, 0, in, out, tmp.ptr, n)
}

// sortPlan returns the number of radix passes and digit bits for keys of
// nbits significant bits: at most sortMaxDigit bits per pass, spread
// evenly.
func sortPlan(nbits int) (passes, width int) {
	if nbits <= 0 {
		return 0, 0
	}
	passes = (nbits + sortMaxDigit - 1) / sortMaxDigit
	width = (nbits + passes - 1) / passes
	return passes, width
}

// runSort is radixSort for at most runSortLimit 32-bit keys (radixSort
// takes it up to d.runSortMax): sort_runs sorts each run of runSortRun
// keys into temporaries, sort_merge places every key from there into keys
// and vals.
func (d *Device) runSort(keys, vals devPtr, n int64, nbits int, iota bool) error {
	k2, err := d.allocTemp(n * 4)
	if err != nil {
		return err
	}
	defer d.freeTemp(k2)
	v2, err := d.allocTemp(n * 4)
	if err != nil {
		return err
	}
	defer d.freeTemp(v2)
	var i int32
	if iota {
		i = 1
	}
	runs := (n + runSortRun - 1) / runSortRun
	if err := d.launch("sort_runs_u32", dim3{X: int(runs)}, dim3{X: sortThreads}, 0, keys, vals, n, int32(nbits), i, k2.ptr, v2.ptr); err != nil {
		return err
	}
	groups := mergeGroups(runs, int64(d.info.SMs))
	if groups == 1 {
		return d.launch("sort_merge_u32", dim3{X: int(runs)}, dim3{X: runSortRun}, 0, k2.ptr, v2.ptr, n, keys, vals)
	}
	part, err := d.allocTemp(groups * n * 4)
	if err != nil {
		return err
	}
	defer d.freeTemp(part)
	if err := d.launch("sort_merge_ranks_u32", dim3{X: int(runs), Y: int(groups)}, dim3{X: runSortRun}, 0, k2.ptr, n, int32(groups), part.ptr); err != nil {
		return err
	}
	g, b := d.elementwise(n)
	return d.launch("sort_merge_place_u32", g, b, 0, k2.ptr, v2.ptr, part.ptr, n, int32(groups), keys, vals)
}

// mergeGroups is the number of groups of other runs runSort's merge splits
// each run's work over (sort_merge_ranks) on sms multiprocessors: 1 (one
// block per run, sort_merge) up to mergeSplitMinRuns runs, else enough
// that about mergeBlocksPerSM blocks per SM share the runs, at most one
// run per group. H200, session 18: a RES 128 map's 64 K Gray ranks (63
// runs) took 78 µs in sort_merge, each of its 63 blocks loading and
// searching the 62 other runs in turn.
func mergeGroups(runs, sms int64) int64 {
	if runs <= mergeSplitMinRuns {
		return 1
	}
	return min(runs, max(1, ceilDiv(mergeBlocksPerSM*sms, runs)))
}

const (
	mergeSplitMinRuns = 4
	mergeBlocksPerSM  = 4
)

// radixSort sorts the n keys at keys (uint64 if wide, else uint32)
// ascending by their low nbits bits (the others must be zero), stably, in
// place. vals (0 for none) holds int32 values that move with the keys; with
// iota they are not read but set to the keys' original positions, so vals
// becomes the sorting permutation.
func (d *Device) radixSort(keys, vals devPtr, n int64, wide bool, nbits int, iota bool) error {
	if n > math.MaxInt32 {
		return fmt.Errorf("%w: sorting %d keys (at most 2^31 − 1)", ErrLaunch, n)
	}
	passes, width := sortPlan(nbits)
	if n <= 1 || passes == 0 {
		if iota && vals != 0 && n > 0 {
			g, b := d.elementwise(n)
			return d.launch("sort_iota_i32", g, b, 0, vals, n)
		}
		return nil
	}
	if !wide && n <= d.runSortMax {
		return d.runSort(keys, vals, n, nbits, iota)
	}
	ksize := int64(4)
	suffix := "u32"
	if wide {
		ksize, suffix = 8, "u64"
	}
	ntiles := (n + sortTile - 1) / sortTile
	cub := d.cubSortFrom == cubSortAll || d.cubSortFrom == cubSortAbove && !d.noOnesweep && ntiles > onesweepMaxTiles
	if cub && n <= cubSortMaxKeys {
		return d.cubSort(keys, vals, n, ksize, suffix, nbits, iota)
	}
	if !d.noOnesweep && !d.noWaveSort {
		most, err := d.waveTiles(suffix)
		if err != nil {
			return err
		}
		if ntiles <= min(most, onesweepMaxTiles) {
			// A refused cooperative launch (fewer SMs than the device
			// reports, as under MPS) queued nothing: sort another way.
			if err := d.waveSort(keys, vals, n, ksize, suffix, nbits, iota); !isCoopTooBig(err) {
				return err
			}
		}
	}
	if !d.noOnesweep && ntiles <= onesweepMaxTiles {
		return d.onesweep(keys, vals, n, ksize, suffix, nbits, iota)
	}
	radix := int64(1) << width
	k2, err := d.allocTemp(n * ksize)
	if err != nil {
		return err
	}
	defer d.freeTemp(k2)
	var v2 rawBuf
	if vals != 0 {
		if v2, err = d.allocTemp(n * 4); err != nil {
			return err
		}
		defer d.freeTemp(v2)
	}
	counts, err := d.allocTemp(radix * ntiles * 4)
	if err != nil {
		return err
	}
	defer d.freeTemp(counts)
	srcK, dstK := keys, k2.ptr
	srcV, dstV := vals, v2.ptr
	grid, blk := dim3{X: int(ntiles)}, dim3{X: sortThreads}
	for p := range passes {
		shift := int32(p * width)
		w := int32(min(width, nbits-p*width))
		if err := d.launch("sort_hist_"+suffix, grid, blk, 0, srcK, n, shift, w, counts.ptr, ntiles); err != nil {
			return err
		}
		m := (int64(1) << w) * ntiles
		if err := d.scan(scanI32, counts.ptr, counts.ptr, m, 0); err != nil {
			return err
		}
		if err := d.launch("sort_scatter_"+suffix, grid, blk, 0, srcK, passValues(srcV, iota, p), dstK, dstV, n, shift, w, counts.ptr, ntiles); err != nil {
			return err
		}
		srcK, dstK = dstK, srcK
		srcV, dstV = dstV, srcV
	}
	return d.copySorted(keys, vals, srcK, srcV, n, ksize)
}

// passValues returns the values radix pass p reads: none for the first
// pass of an iota sort (the kernels then take the keys' positions).
func passValues(srcV devPtr, iota bool, p int) devPtr {
	if iota && p == 0 {
		return 0
	}
	return srcV
}

// copySorted copies the n sorted keys (ksize bytes each) and their values
// at srcK and srcV into keys and vals (none where vals is 0), unless they
// are there already.
func (d *Device) copySorted(keys, vals, srcK, srcV devPtr, n, ksize int64) error {
	if srcK == keys {
		return nil
	}
	if err := memcpyDtoD(keys, srcK, n*ksize, d.stream); err != nil {
		return err
	}
	if vals != 0 {
		return memcpyDtoD(vals, srcV, n*4, d.stream)
	}
	return nil
}

// onesweepMaxTiles is the most tiles (sortTile keys each) radixSort sorts
// by onesweep; more take the classic passes. Measured on the Gray orders
// of the benchmark's shells (H200, session 21, calls 1–3; three passes):
// 124 tiles (RES 256) 17 µs per pass against 35 for the classic
// histogram, scan and scatter (the inference step's derived tables
// 0.10 → 0.06 ms); 489 tiles (RES 512) 28 against 37 µs per pass, yet the
// inference step 1.2–1.7 % slower in two calls of two rounds each (within
// the noise, but never faster); 2,009 tiles (RES 1024) 83 against 82 µs:
// the tiles that start together wait for each other's counts, so the
// look-back's walks grow with the tiles in flight. Far below the
// look-back words' 30-bit counts (kernels/sort.cu kCountBits).
const onesweepMaxTiles = 256

// onesweep is radixSort's passes for at most onesweepMaxTiles tiles of
// keys of ksize bytes (kernel suffix suffix): one launch counts the digits of
// every pass (sort_onesweep_hist), then one launch per pass places each
// tile's keys by decoupled look-back over the tiles before it
// (sort_onesweep): one memset and 1 + passes launches, where the classic
// passes (EnvNoOnesweep) take five launches each. The same stable order.
func (d *Device) onesweep(keys, vals devPtr, n, ksize int64, suffix string, nbits int, iota bool) error {
	passes, width := sortPlan(nbits)
	ntiles := (n + sortTile - 1) / sortTile
	radix := int64(1) << width
	// One block, zeroed at once: the digit counts of every pass, a tile
	// counter per pass, the look-back words of every pass.
	countWords := int64(passes) * onesweepMaxRadix
	statusWords := int64(passes) * ntiles * radix
	words := countWords + int64(passes) + statusWords
	scratch, err := d.allocZeroI32(words)
	if err != nil {
		return err
	}
	defer d.freeTemp(scratch)
	counts := scratch.ptr
	tickets := counts + devPtr(countWords*4)
	status := tickets + devPtr(int64(passes)*4)
	hb := min(ntiles, int64(d.info.SMs)*onesweepHistBlocksPerSM)
	if err := d.launch("sort_onesweep_hist_"+suffix, dim3{X: int(hb)}, dim3{X: sortThreads}, 0, keys, n, int32(passes), int32(width), int32(nbits), counts); err != nil {
		return err
	}
	return d.ringPasses(keys, vals, n, ksize, passes, width, nbits, iota, func(p int, pk passKeys) error {
		return d.launch("sort_onesweep_"+suffix, dim3{X: int(ntiles)}, dim3{X: sortThreads}, 0, pk.srcK, pk.srcV, pk.dstK, pk.dstV, n, pk.shift, pk.width,
			counts+devPtr(int64(p)*onesweepMaxRadix*4), status+devPtr(int64(p)*ntiles*radix*4), tickets+devPtr(int64(p)*4))
	})
}

// passKeys is what one radix pass reads and writes: the keys and values
// at srcK and srcV (srcV 0 in the first pass of an iota sort: the kernels
// then take the keys' positions) placed into dstK and dstV by the digit of
// width bits at shift.
type passKeys struct {
	srcK, srcV, dstK, dstV devPtr
	shift, width           int32
}

// ringPasses runs the passes of a sort of n keys of ksize bytes by their
// low nbits bits that launches one kernel per pass (onesweep, waveSort,
// cubSort): passes digits of width bits (the last one what is left),
// pass(p, …) queuing pass p. The passes write the ring of passBuffers, so
// that the last one writes keys and vals (one pass is copied back).
func (d *Device) ringPasses(keys, vals devPtr, n, ksize int64, passes, width, nbits int, iota bool, pass func(p int, pk passKeys) error) error {
	ring, release, err := d.passBuffers(keys, vals, n, ksize, passes)
	if err != nil {
		return err
	}
	defer release()
	srcK, srcV := keys, vals
	for p := range passes {
		dstK, dstV := ring.dst(p, passes)
		pk := passKeys{srcK: srcK, srcV: passValues(srcV, iota, p), dstK: dstK, dstV: dstV,
			shift: int32(p * width), width: int32(min(width, nbits-p*width))}
		if err := pass(p, pk); err != nil {
			return err
		}
		srcK, srcV = dstK, dstV
	}
	return d.copySorted(keys, vals, srcK, srcV, n, ksize) // one pass: back from the buffer
}

// passRing is where the passes of a single-launch-per-pass sort write:
// pass p writes buf[p % 2], the last one keys and vals, so that no copy
// back follows: keys → 0 → keys … for an even number of passes, keys → 0
// → 1 → 0 … → keys for an odd one (one pass writes buffer 0 and is copied
// back).
type passRing struct {
	buf        [2][2]devPtr // keys, values
	keys, vals devPtr
}

// dst returns the keys and values pass p of passes writes.
func (r passRing) dst(p, passes int) (devPtr, devPtr) {
	if passes > 1 && p == passes-1 {
		return r.keys, r.vals
	}
	return r.buf[p%2][0], r.buf[p%2][1]
}

// passBuffers allocates the ring of the passes over n keys of ksize bytes
// (and their values, unless vals is 0): one buffer, two for an odd number
// of passes above one. release frees them (stream-ordered).
func (d *Device) passBuffers(keys, vals devPtr, n, ksize int64, passes int) (ring passRing, release func(), err error) {
	ring.keys, ring.vals = keys, vals
	var held []rawBuf
	release = func() {
		for _, b := range held {
			d.freeTemp(b)
		}
	}
	nbuf := 1
	if passes%2 == 1 && passes > 1 {
		nbuf = 2
	}
	for i := range nbuf {
		k, err := d.allocTemp(n * ksize)
		if err != nil {
			release()
			return passRing{}, nil, err
		}
		held = append(held, k)
		ring.buf[i][0] = k.ptr
		if vals != 0 {
			v, err := d.allocTemp(n * 4)
			if err != nil {
				release()
				return passRing{}, nil, err
			}
			held = append(held, v)
			ring.buf[i][1] = v.ptr
		}
	}
	if nbuf == 1 {
		ring.buf[1] = [2]devPtr{keys, vals}
	}
	return ring, release, nil
}

// cubPassThreads and cubHistThreads are the block sizes of
// kernels/sort_cub.cuh's passes and histogram (kPassThreads,
// kHistThreads).
const (
	cubPassThreads = 384
	cubHistThreads = 128
)

// cubPassTile returns the keys per tile of kernels/sort_cub.cuh's passes
// for keys of ksize bytes: 384 threads × 21 keys of 4 bytes, × 10 of 8
// (CUB scales the keys per thread by the wider of key and value, the
// values being int32). The kernels static_assert the same numbers.
func cubPassTile(ksize int64) int64 {
	if ksize == 8 {
		return cubPassThreads * 10
	}
	return cubPassThreads * 21
}

// cubSortMaxKeys is the most keys Device.cubSort sorts: CUB's look-back
// words hold a count of 30 bits, and its own dispatch cuts sorts into
// portions of at most 2^28 keys; ours sorts one portion.
const cubSortMaxKeys = 1<<28 - 1

// cubHistBlocksPerSM is the histogram's blocks per SM (it strides over
// the keys).
const cubHistBlocksPerSM = 4

// cubDigitBits returns the digit width of cubSort's passes for nbits
// significant bits: 9 where that takes fewer passes than 8 (27-bit Gray
// ranks: three passes, not four), else 8.
func cubDigitBits(nbits int) int {
	if (nbits+8)/9 < (nbits+7)/8 {
		return 9
	}
	return 8
}

// cubSort is radixSort's passes by CUB's onesweep agents
// (kernels/sort_cub.cuh): one memset of the scratch, one launch that
// counts the digits of every pass (and writes the positions of an iota
// sort into vals), one that turns the counts into starts, then one launch
// per pass whose tiles look back over the tiles before them. The same
// stable order as the other passes. Measured on the H200 (session 40,
// docs/PERF_NOTES.md step 89), a Gray order's three passes of 9 bits:
// 4.1 M keys (RES 1024) 0.193 ms against the classic passes' 0.250,
// 1.0 M keys (RES 512) 0.091 against 0.113–0.132; 252 K keys (RES 256)
// 0.080–0.086 against the one-wave sort's 0.056–0.059, hence cubSortAbove.
func (d *Device) cubSort(keys, vals devPtr, n, ksize int64, suffix string, nbits int, iota bool) error {
	width := cubDigitBits(nbits)
	passes := (nbits + width - 1) / width
	digits := int64(1) << width
	tiles := (n + cubPassTile(ksize) - 1) / cubPassTile(ksize)
	// One block, zeroed at once: the digit counts of every pass, a tile
	// counter per pass, the look-back words of every pass.
	binWords := int64(passes) * digits
	lookWords := tiles * digits
	words := binWords + int64(passes) + int64(passes)*lookWords
	scratch, err := d.allocZeroI32(words)
	if err != nil {
		return err
	}
	defer d.freeTemp(scratch)
	bins := scratch.ptr
	ctrs := bins + devPtr(binWords*4)
	look := ctrs + devPtr(int64(passes)*4)
	b := fmt.Sprintf("_b%d", width)
	var iotaOut devPtr
	if iota && vals != 0 {
		iotaOut = vals
	}
	hb := min(ceilDiv(n, cubHistThreads*16), int64(d.info.SMs)*cubHistBlocksPerSM) // 16 keys a thread a round
	if err := d.launch("sort_cub_hist_"+suffix+b, dim3{X: int(hb)}, dim3{X: cubHistThreads}, 0, bins, keys, int32(n), int32(nbits), iotaOut); err != nil {
		return err
	}
	if err := d.launch("sort_cub_exsum"+b, dim3{X: passes}, dim3{X: 256}, 0, bins); err != nil {
		return err
	}
	// The passes read vals from the first pass on (iota: the positions
	// the histogram wrote), so ringPasses takes the sort as not iota.
	return d.ringPasses(keys, vals, n, ksize, passes, width, nbits, false, func(p int, pk passKeys) error {
		pb, pc, pl := bins+devPtr(int64(p)*digits*4), ctrs+devPtr(int64(p)*4), look+devPtr(int64(p)*lookWords*4)
		if vals == 0 {
			return d.launch("sort_cub_pass_keys_"+suffix+b, dim3{X: int(tiles)}, dim3{X: cubPassThreads}, 0, pl, pc, pb, pk.dstK, pk.srcK, int32(n), pk.shift, pk.width)
		}
		return d.launch("sort_cub_pass_"+suffix+b, dim3{X: int(tiles)}, dim3{X: cubPassThreads}, 0, pl, pc, pb, pk.dstK, pk.srcK, pk.dstV, pk.srcV, int32(n), pk.shift, pk.width)
	})
}

// onesweepMaxRadix is the digit counts' row per pass (kernels/sort.cu
// kMaxRadix); onesweepHistBlocksPerSM the histogram's blocks per SM (it
// strides over the keys).
const (
	onesweepMaxRadix        = 1 << sortMaxDigit
	onesweepHistBlocksPerSM = 4
)

// unique returns the distinct keys of the n sorted keys at keys (uint64 if
// wide), skipping sentinel, in a new block, and their number. It waits for
// the device (the count is read back). An empty result is the zero page.
func (d *Device) unique(keys devPtr, n int64, wide bool, sentinel uint64) (rawBuf, int64, error) {
	if n == 0 {
		return rawBuf{ptr: d.zeroPage}, 0, nil
	}
	flags, err := d.allocTemp((n + 1) * 4)
	if err != nil {
		return rawBuf{}, 0, err
	}
	defer d.freeTemp(flags)
	suffix, ksize := "u32", int64(4)
	var sent any = uint32(sentinel)
	if wide {
		suffix, ksize, sent = "u64", 8, sentinel
	}
	g, b := d.elementwise(n)
	if err := d.launch("sort_unique_flags_"+suffix, g, b, 0, keys, n, sent, flags.ptr); err != nil {
		return rawBuf{}, 0, err
	}
	total := flags.ptr + devPtr(4*n)
	if err := d.scan(scanI32, flags.ptr, flags.ptr, n, total); err != nil {
		return rawBuf{}, 0, err
	}
	cnt, err := download[int32](d, total, 1)
	if err != nil {
		return rawBuf{}, 0, err
	}
	m := int64(cnt[0])
	if m == 0 {
		return rawBuf{ptr: d.zeroPage}, 0, nil
	}
	out, err := d.allocTemp(m * ksize)
	if err != nil {
		return rawBuf{}, 0, err
	}
	if err := d.launch("sort_unique_write_"+suffix, g, b, 0, keys, flags.ptr, n, sent, out.ptr); err != nil {
		d.freeTemp(out)
		return rawBuf{}, 0, err
	}
	return out, m, nil
}

// download copies n elements from the device and waits for them.
func download[T any](d *Device, p devPtr, n int) ([]T, error) {
	out := make([]T, n)
	if n == 0 {
		return out, nil
	}
	var z T
	err := d.copyToHost(unsafe.Pointer(&out[0]), p, int64(n)*int64(unsafe.Sizeof(z)))
	return out, err
}

// uploadTo copies a host slice to device memory at p.
func uploadTo[T any](d *Device, p devPtr, s []T) error {
	if len(s) == 0 {
		return nil
	}
	var z T
	return memcpyHtoD(p, unsafe.Pointer(&s[0]), int64(len(s))*int64(unsafe.Sizeof(z)), d.stream)
}

// fillI32 sets n int32 words at p to v.
func (d *Device) fillI32(p devPtr, v int32, n int64) error {
	return memsetD32(p, uint32(v), n, d.stream)
}

// bitLen returns the number of bits of v.
func bitLen(v uint64) int { return bits.Len64(v) }

// extArg mirrors fgx::Ext (kernels/hashtable.cuh).
type extArg struct{ B, X, Y, Z int64 }

func extOf(e grid.Extent) *extArg {
	return &extArg{int64(e.Batch), int64(e.X), int64(e.Y), int64(e.Z)}
}

func (a *extArg) argBytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(a)), unsafe.Sizeof(*a))
}

// waveTiles returns the most tiles the one-wave sort (sort_wave_<suffix>)
// may take now: every block resident on the GPU at once, as its grid-wide
// barriers need (the cooperative launch refuses more), and none while the
// side stream may hold SMs (its kernels would hold the later blocks back;
// conv.go's fused split sums keep the same rule), so 0 on the side stream.
func (d *Device) waveTiles(suffix string) (int64, error) {
	if len(d.side.ends) > 0 || d.side.in {
		return 0, nil
	}
	name := "sort_wave_" + suffix
	per, ok := d.waveBlocks[name]
	if !ok {
		k, err := d.function(name)
		if err != nil {
			return 0, err
		}
		if per, err = funcMaxActiveBlocks(k.fn, sortThreads, 0); err != nil {
			return 0, fmt.Errorf("%w: %s: %v", ErrLaunch, name, err)
		}
		if d.waveBlocks == nil {
			d.waveBlocks = map[string]int{}
		}
		d.waveBlocks[name] = per
	}
	return int64(per) * int64(d.info.SMs), nil
}

// waveSort is radixSort's passes for tiles that are all resident at once
// (waveTiles), up to onesweepMaxTiles: one cooperative launch per pass
// (sort_wave), no histogram launch and no look-back, two grid-wide
// barriers a pass. The same stable order as the other passes. Measured on
// the H200 (session 36, call 3; docs/PERF_NOTES.md step 82), the Gray
// ranks' three passes: 124 tiles (RES 256) 0.052 ms against the
// onesweep's 0.063 with its histogram; 502 tiles (RES 512) 0.162 ms
// against the classic passes' 0.120 (the barriers and the column scans
// grow with the tiles), hence the bound. An error that isCoopTooBig means
// that the first pass was refused and nothing of the sort was queued but
// a memset of its scratch.
func (d *Device) waveSort(keys, vals devPtr, n, ksize int64, suffix string, nbits int, iota bool) error {
	passes, width := sortPlan(nbits)
	ntiles := (n + sortTile - 1) / sortTile
	radix := int64(1) << width
	// One block: each tile's digit counts (then prefixes), the digits'
	// totals, the barrier's arrival counter (the only word zeroed: the
	// passes write the rest before reading it).
	words := ntiles*radix + radix + 1
	scratch, err := d.allocTemp(words * 4)
	if err != nil {
		return err
	}
	defer d.freeTemp(scratch)
	counts := scratch.ptr
	totals := counts + devPtr(ntiles*radix*4)
	bar := totals + devPtr(radix*4)
	if err := memsetD32(bar, 0, 1, d.stream); err != nil {
		return err
	}
	return d.ringPasses(keys, vals, n, ksize, passes, width, nbits, iota, func(p int, pk passKeys) error {
		return d.launchCooperative("sort_wave_"+suffix, dim3{X: int(ntiles)}, dim3{X: sortThreads}, 0, pk.srcK, pk.srcV, pk.dstK, pk.dstV, n, pk.shift, pk.width,
			counts, totals, bar, uint32(2*int64(p)*ntiles))
	})
}
