package kernels

import (
	"fmt"
	"slices"
	"strings"
)

// Math is the arithmetic of a GEMM kernel: the element type stored in
// device memory and the instruction that multiplies it.
type Math int

// The GEMM arithmetics. Every one accumulates in float32.
const (
	// F32 stores float32 and multiplies with SIMT FMA (IEEE float32).
	F32 Math = iota
	// TF32 stores float32 and multiplies on tensor cores (mma.sync
	// m16n8k8, wgmma on Hopper tiles) the operands' tf32 bits: the
	// float32 values truncated to 10 mantissa bits.
	TF32
	// F16 stores IEEE half and multiplies on tensor cores (m16n8k16).
	F16
	// BF16 stores bfloat16 and multiplies on tensor cores (m16n8k16).
	BF16
)

// Maths lists every arithmetic.
var Maths = []Math{F32, TF32, F16, BF16}

// String implements fmt.Stringer for Math.
func (m Math) String() string {
	switch m {
	case F32:
		return "f32"
	case TF32:
		return "tf32"
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("Math(%d)", int(m))
}

// cppName is the C++ enumerator of m (fg::Math in gemm.cuh).
func (m Math) cppName() string {
	return [...]string{"fg::Math::F32", "fg::Math::TF32", "fg::Math::F16", "fg::Math::BF16"}[m]
}

// ElemSize returns the bytes of one stored element.
func (m Math) ElemSize() int {
	if m == F16 || m == BF16 {
		return 2
	}
	return 4
}

// instK is the K extent of one multiply instruction.
func (m Math) instK() int {
	switch m {
	case TF32:
		return 8
	case F16, BF16:
		return 16
	}
	return 1
}

// Family is a kind of GEMM kernel.
type Family int

// The GEMM kernel families.
const (
	// Gather computes out[r, n] = Σ_{v, c} in[tbl[r, v], c] · w[n, v, c]:
	// the forward pass, and the input gradient with the reverse table and
	// the weight read transposed (the TransposedName kernels). A null table is the identity (explicit GEMM
	// over an im2col matrix). Rows may be permuted (masked order), taps
	// restricted per tile (masked tap unions), and the reduction split.
	Gather Family = iota
	// Pairs computes out[m, v, n] = Σ_{p ∈ pairs(v)} a[ia[p], m] · b[ib[p], n]:
	// the weight gradient over per-tap pair lists, optionally split.
	Pairs
)

// Families lists every kernel family.
var Families = []Family{Gather, Pairs}

// String implements fmt.Stringer for Family.
func (f Family) String() string {
	switch f {
	case Gather:
		return "gather"
	case Pairs:
		return "pairs"
	}
	return fmt.Sprintf("Family(%d)", int(f))
}

// Tile is one GEMM tile configuration: a BM×BN output tile per thread
// block, BK reduction elements per pipeline stage, WM×WN warps, Stages
// cp.async stages. It mirrors fg::TileCfg in gemm.cuh; the generated
// instantiation files assert at compile time that both agree on the shared
// memory size.
type Tile struct {
	BM, BN, BK int
	WM, WN     int
	Stages     int
	// Narrow restricts the tile to the 16-bit arithmetics (F16, BF16):
	// it is not instantiated for F32 and TF32, whose 4-byte operands
	// would not fit its shared memory or whose SIMT / tf32 fragments
	// would spill at its warp tile.
	Narrow bool
	// Hopper marks a tile of HopperTiles: kernels on sm_90a warpgroup
	// instructions (wgmma.cuh), instantiated only for the arithmetics
	// whose BK elements fill 128 bytes (BK 64: F16 and BF16; BK 32:
	// TF32); in TF32 only the gather kernel that reads the weight as
	// stored (tf32 wgmma reads K-major operands only), in F16 and BF16
	// also its TransposedName twin and the pairs kernel (see Has).
	Hopper bool
	// Producers > 0 makes a Hopper tile warp-specialised: Producers warps
	// of its own issue every operand copy into an mbarrier pipeline while
	// the WM warps (BM/64 warpgroups) only wait for full stages and
	// multiply (gather_ws.cuh). Gather family only (forward and input
	// gradient); it serves gathers of at most MaxSpecializedTaps taps,
	// since a block holds the neighbour indices of all its taps in shared
	// memory (conv.go runs a larger one on the tile's Plain twin).
	Producers int
}

// MaxSpecializedTaps is the most taps a warp-specialised tile
// (Tile.Producers > 0) serves: the 27 of a 3×3×3 kernel
// (fg::kWsMaxTaps in gather_ws.cuh).
const MaxSpecializedTaps = 27

// Tiles is THE table of instantiated tile configurations: every family is
// compiled for each of them, in every arithmetic the tile supports (gen
// writes gemm_*.cu from it). The first four serve every arithmetic and are
// the ones the fixed heuristic (chooseTile in cudaext) picks for F32 and
// TF32; the Narrow ones serve F16 and BF16 only, where chooseTile also
// picks m128n128k64w2x4s3 and m128n128k32w2x4s4 at large C, and all are
// autotuner candidates and can be forced. Resident
// blocks per SM on sm_90 (233 472 B of shared memory, 1 KiB reserved per
// block; 64 Ki registers), f16 gather / gather_wt / pairs, from ptxas
// (nvcc 11.8; "+8" is a stack frame of 8 bytes):
//
//	m128n128k64w2x4s3  114 200 B, 142/128+8/142 regs: 1 / 2 / 1 blocks
//	m128n128k32w2x4s4   86 560 B, 128+8/128+8/128 regs: 2 / 2 / 2 blocks
//	m128n256k32w2x4s3   95 768 B, 228/236/246 regs: 1 / 1 / 1 block (64×64 warp tiles)
//	m256n128k32w4x2s3   99 352 B, 228/242/246 regs: 1 / 1 / 1 block (64×64 warp tiles)
//	m128n128k32w2x2s4   86 560 B, 227/244/236 regs: 2 / 2 / 2 blocks of 4 warps (64×64)
//	m64n128k64w2x2s4   112 928 B, 130/176/127 regs: 2 / 2 / 2 blocks of 4 warps
var Tiles = []Tile{
	{BM: 128, BN: 128, BK: 32, WM: 2, WN: 4, Stages: 3},
	{BM: 128, BN: 64, BK: 32, WM: 2, WN: 2, Stages: 4},
	{BM: 64, BN: 64, BK: 32, WM: 2, WN: 2, Stages: 4},
	{BM: 64, BN: 32, BK: 32, WM: 2, WN: 1, Stages: 4},
	{BM: 128, BN: 128, BK: 64, WM: 2, WN: 4, Stages: 3, Narrow: true},
	{BM: 128, BN: 128, BK: 32, WM: 2, WN: 4, Stages: 4, Narrow: true},
	{BM: 128, BN: 256, BK: 32, WM: 2, WN: 4, Stages: 3, Narrow: true},
	{BM: 256, BN: 128, BK: 32, WM: 4, WN: 2, Stages: 3, Narrow: true},
	{BM: 128, BN: 128, BK: 32, WM: 2, WN: 2, Stages: 4, Narrow: true},
	{BM: 64, BN: 128, BK: 64, WM: 2, WN: 2, Stages: 4, Narrow: true},
}

// HopperTiles is the table of Hopper tiles (Tile.Hopper): one block of
// BM/64 warpgroups multiplies with wgmma.mma_async from 128-byte-swizzled
// stages, prefetching Stages − 2 stages ahead.
// gen writes them to gemm_gather_<math>_sm90a.cu, which build.sh compiles
// to sm_90a PTX and that to the sm_90a cubin the engine loads on compute
// capability 9.0 (FLEXGEMM_HOPPER_PTX=1: the PTX, for the driver to
// compile). One block per SM
// (≈ 200 KB of shared memory each) except where noted.
var HopperTiles = []Tile{
	{BM: 128, BN: 256, BK: 64, WM: 8, WN: 1, Stages: 4, Hopper: true},
	{BM: 128, BN: 128, BK: 64, WM: 8, WN: 1, Stages: 6, Hopper: true},
	{BM: 128, BN: 256, BK: 32, WM: 8, WN: 1, Stages: 4, Hopper: true},
	{BM: 128, BN: 128, BK: 32, WM: 8, WN: 1, Stages: 6, Hopper: true},
	{BM: 256, BN: 128, BK: 64, WM: 16, WN: 1, Stages: 4, Hopper: true},
	{BM: 256, BN: 64, BK: 64, WM: 16, WN: 1, Stages: 5, Hopper: true},
	{BM: 128, BN: 64, BK: 64, WM: 8, WN: 1, Stages: 8, Hopper: true},
	// Two blocks per SM (96 KiB of stages each): one block's tile start
	// (row order, tap list and index loads, pipeline fill) overlaps the
	// other's main loop.
	{BM: 128, BN: 64, BK: 64, WM: 8, WN: 1, Stages: 4, Hopper: true},
	// One warpgroup, three blocks per SM (64 KiB of stages each): the
	// weight gradient at C = 64.
	{BM: 64, BN: 64, BK: 64, WM: 4, WN: 1, Stages: 4, Hopper: true},
	// Warp-specialised twins (gather only): producer warps feed the
	// multiplying warpgroups through per-stage mbarriers, so no warp that
	// multiplies issues a copy or waits at a block-wide barrier. Two
	// producer warps were too few (session 9, call 1: 1.1–1.8× the plain
	// tiles' time; the copies two warps keep in flight cannot cover a
	// stage). The launch bounds cap the registers of every thread, the
	// consumers' too: 384 threads (168 registers) for the 64×256 and
	// 64×128 accumulators, 512 (128) for 64×64.
	{BM: 128, BN: 256, BK: 64, WM: 8, WN: 1, Stages: 4, Hopper: true, Producers: 4},
	{BM: 128, BN: 128, BK: 64, WM: 8, WN: 1, Stages: 6, Hopper: true, Producers: 4},
	{BM: 128, BN: 64, BK: 64, WM: 8, WN: 1, Stages: 8, Hopper: true, Producers: 8},
	// Three consumer warpgroups, one block per SM (512 threads, 128
	// registers each): a gather of 129–192 rows in one tile instead of two
	// of 128 (the RES 8 sphere shell: 192 rows at C 1024), so no product
	// of a row past M and one read of the weight per column tile
	// (docs/PERF_NOTES.md step 110). It has no plain twin (Plain): 384
	// threads cannot share a 128-row weight stage's 1,024 chunks evenly.
	{BM: 192, BN: 128, BK: 64, WM: 12, WN: 1, Stages: 4, Hopper: true, Producers: 4},
	// The same tile with five stages: 200 KiB of stages in flight instead
	// of 160, with room for two description heads sharing one index
	// (Descriptions, Indices); a split launch's blocks run one tile each. The RES 8
	// gather waits on both operands' copies together (its inference step
	// was 5.5 % faster without the row copies, 26 % without them and the
	// weight's); a fifth stage in flight made its forward 33.4 → 31.3 µs
	// and the step 5.3 % faster (docs/PERF_NOTES.md step 116). The engine
	// takes it under cudaext's EnvTallDeep (the default).
	{BM: 192, BN: 128, BK: 64, WM: 12, WN: 1, Stages: 5, Hopper: true, Producers: 4},
	// Two blocks per SM (80 registers per thread), two description heads
	// sharing one index each.
	{BM: 128, BN: 64, BK: 64, WM: 8, WN: 1, Stages: 4, Hopper: true, Producers: 4},
	// Two blocks per SM with three stages: room for two tile
	// descriptions each, so that a persistent block describes its next
	// tile while it finishes this one (Descriptions).
	{BM: 128, BN: 64, BK: 64, WM: 8, WN: 1, Stages: 3, Hopper: true, Producers: 4},
	// The tf32 twin of m128n256k32w8x1s4h (forward, and the input
	// gradient over the materialised transpose).
	{BM: 128, BN: 256, BK: 32, WM: 8, WN: 1, Stages: 4, Hopper: true, Producers: 4},
	// tf32 specialised tiles of fewer columns, with the stage bytes of the
	// 16-bit ones above (a tf32 K stage is 32 elements): 128 columns in six
	// stages, one block per SM (C 128), and 64 columns in four or three
	// stages, two blocks per SM (C 64). Without them tf32 gathers of 64–255
	// columns ran on the mma.sync tiles: (1024, 64, 2) tf32 inference was
	// slower than FlexGEMM's (session 57). Their plain twins (Plain: the
	// 128×128 one above, the 128×64 one here) serve kernels of more than
	// MaxSpecializedTaps taps and, for 64 columns, the gathers where the
	// specialised tiles are off.
	{BM: 128, BN: 64, BK: 32, WM: 8, WN: 1, Stages: 4, Hopper: true},
	{BM: 128, BN: 128, BK: 32, WM: 8, WN: 1, Stages: 6, Hopper: true, Producers: 4},
	{BM: 128, BN: 64, BK: 32, WM: 8, WN: 1, Stages: 4, Hopper: true, Producers: 4},
	{BM: 128, BN: 64, BK: 32, WM: 8, WN: 1, Stages: 3, Hopper: true, Producers: 4},
	// A tf32 tile of 256 rows and 128 columns for its swapped twin
	// (HasSwapped): two consumer warpgroups, each multiplying its 64
	// columns of the weight's stage by all 256 gathered rows (m64n256), read
	// 80 KiB of shared memory a stage where two 128×128 stages read 96, and
	// the weight is copied once for 256 rows; four stages of 48 KiB and two
	// description heads sharing one index (persistent blocks: step 134),
	// one block per SM. Three stages with two whole descriptions were
	// 4.9 % slower: its copies wait on their loads (docs/PERF_NOTES.md
	// step 127). Its plain kernel (four
	// consumer warpgroups, 96 registers a thread) serves where the twin
	// cannot: split or unaligned gathers.
	{BM: 256, BN: 128, BK: 32, WM: 16, WN: 1, Stages: 4, Hopper: true, Producers: 4},
	// Its 16-bit twin (BK 64: the same 48 KiB stages), for the swapped
	// twin of the 16-bit forward gathers of 128–255 columns (step 138):
	// 80 KiB of shared reads a stage where the 192×128 tile's reads 72 for
	// three quarters of the rows, and the weight copied once per 256 rows.
	// Its plain kernels (four consumer warpgroups) serve split and
	// unaligned gathers and the input gradient, which reads the weight
	// transposed; the plain m256n128k64w16x1s4h serves more than
	// MaxSpecializedTaps taps.
	{BM: 256, BN: 128, BK: 64, WM: 16, WN: 1, Stages: 4, Hopper: true, Producers: 4},
}

// Name returns the tile's short name, e.g. "m128n64k32w2x2s4"; a Hopper
// tile's ends in "h" ("m128n256k64w8x1s4h"), a warp-specialised one's in
// "h" and its producer warps ("m128n256k64w8x1s4hp2").
func (t Tile) Name() string {
	n := fmt.Sprintf("m%dn%dk%dw%dx%ds%d", t.BM, t.BN, t.BK, t.WM, t.WN, t.Stages)
	if t.Hopper {
		n += "h"
	}
	if t.Producers > 0 {
		n += fmt.Sprintf("p%d", t.Producers)
	}
	return n
}

// Plain returns the tile without its producer warps: the Hopper tile of
// the same shape whose warps all copy and multiply (t itself when t is
// not warp-specialised). Where HopperTiles has no plain tile of t's
// stages, it is the table's first plain tile of t's BM × BN × BK; ok is
// false where it has none (the 192-row tile: a plain block's 384 threads
// cannot share the 1,024 chunks of its weight stage evenly, StageCopy in
// gemm.cuh; the tf32 256×128 tile, there for its swapped twin), and such a
// tile serves gathers of at most MaxSpecializedTaps taps only (ServesTaps).
func (t Tile) Plain() (plain Tile, ok bool) {
	t.Producers = 0
	if !t.Hopper || slices.Contains(HopperTiles, t) {
		return t, true
	}
	for _, h := range HopperTiles {
		if h.Producers == 0 && h.BM == t.BM && h.BN == t.BN && h.BK == t.BK {
			return h, true
		}
	}
	return t, false
}

// ServesTaps reports whether the tile's gather kernels serve a kernel of
// taps taps: every tile up to MaxSpecializedTaps; beyond, a warp-specialised
// tile only through its Plain twin, where it has one.
func (t Tile) ServesTaps(taps int64) bool {
	if t.Producers == 0 || taps <= MaxSpecializedTaps {
		return true
	}
	_, ok := t.Plain()
	return ok
}

// Descriptions returns how many tile descriptions a block of the gather
// kernel of a warp-specialised tile holds in arithmetic m (0 for other
// tiles): two where two description heads and one index fit beside its
// stages at its blocks per SM, or where the block is alone on its SM
// anyway and they fit in a block's shared memory, else one
// (fg::ws_descriptions in gather_ws.cuh; Indices tells whether the two
// share one index). With two, a persistent block's producers describe its
// next tile while its consumers finish this one, so the engine runs such
// a gather in persistent blocks (conv.go).
func (t Tile) Descriptions(m Math) int {
	if !t.Hopper || t.Producers == 0 {
		return 0
	}
	heads, _ := wsDescriptions(t, m)
	return heads
}

// Indices returns how many description indices (a tile's taps and
// neighbour indices) a block of the gather kernel of a warp-specialised
// tile holds in arithmetic m (0 for other tiles): as many as its
// Descriptions where they fit, else one, which the producers rewrite for
// the next tile once they have issued the last one's copies
// (fg::ws_indices).
func (t Tile) Indices(m Math) int {
	if !t.Hopper || t.Producers == 0 {
		return 0
	}
	_, indices := wsDescriptions(t, m)
	return indices
}

// wsHead and wsIndex are the bytes of a tile description's two parts in
// warp-specialised tile t's gather block (fg::WsLayout::kHead, kIndex):
// the head holds two mbarriers, five ints and the tile's output rows, 16
// bytes a multiple; the index its taps and the neighbour indices of every
// tap, rounded up to 16 bytes.
func wsHead(t Tile) int  { return 4*t.BM + 48 }
func wsIndex(t Tile) int { return (4*MaxSpecializedTaps*(t.BM+1) + 15) / 16 * 16 }

// wsSmemWith returns the dynamic shared memory of warp-specialised tile
// t's gather block with heads description heads and indices indices:
// stages, a full and an empty mbarrier per stage, the descriptions and 1
// KiB of swizzle alignment (fg::ws_smem_bytes).
func wsSmemWith(t Tile, m Math, heads, indices int) int {
	return t.Stages*(t.BM+t.BN)*t.BK*m.ElemSize() + 16*t.Stages + heads*wsHead(t) + indices*wsIndex(t) + 1024
}

// wsDescriptions returns the description heads and indices of
// warp-specialised tile t's gather block: two of each, two heads and one
// index, or one of each, the most that fit at the blocks per SM that one
// of each allows (two where two such blocks fit an SM: a second block
// beats a second description), as fg::ws_descriptions and ws_indices.
func wsDescriptions(t Tile, m Math) (heads, indices int) {
	fits := func(all int) bool { return all <= maxBlockSmem }
	if twoPerSM(wsSmemWith(t, m, 1, 1)) {
		fits = twoPerSM
	}
	switch {
	case fits(wsSmemWith(t, m, 2, 2)):
		return 2, 2
	case fits(wsSmemWith(t, m, 2, 1)):
		return 2, 1
	}
	return 1, 1
}

// wsSmem returns the dynamic shared memory of warp-specialised tile t's
// gather block with its Descriptions and Indices.
func wsSmem(t Tile, m Math) int {
	heads, indices := wsDescriptions(t, m)
	return wsSmemWith(t, m, heads, indices)
}

// maxBlockSmem is the most dynamic shared memory one block may have on
// the H200 (227 KiB).
const maxBlockSmem = 227 * 1024

// Supports reports whether the tile is instantiated for arithmetic m
// (every tile is, except Narrow ones for F32 and TF32, and Hopper ones
// except where BK elements of m fill 128 bytes).
func (t Tile) Supports(m Math) bool {
	if t.Hopper {
		return m != F32 && t.BK*m.ElemSize() == 128
	}
	return !t.Narrow || m.ElemSize() == 2
}

// Has reports whether the tile has a kernel of family f in arithmetic m:
// Supports(m), and for a Hopper tile in the pairs family a 16-bit m.
// A warp-specialised tile has gather kernels only.
func (t Tile) Has(f Family, m Math) bool {
	return t.Supports(m) && (f == Gather || (t.readsMNMajor(m) && t.Producers == 0))
}

// HasTransposed reports whether the gather kernel reading the weight
// transposed (TransposedName) exists for the tile in arithmetic m: always
// where Supports(m), except for the tf32 Hopper tiles.
func (t Tile) HasTransposed(m Math) bool { return t.Supports(m) && t.readsMNMajor(m) }

// readsMNMajor reports whether the tile can stage MN-major operands (a
// weight read transposed, the pairs family's operands) in arithmetic m:
// every mma.sync tile; a Hopper tile in 16 bits only, since tf32 wgmma
// reads K-major operands.
func (t Tile) readsMNMajor(m Math) bool { return !t.Hopper || m.ElemSize() == 2 }

// BlocksPerSM returns how many blocks of the tile's kernel of family f in
// arithmetic m fit one sm_90 multiprocessor by shared memory (233 472
// bytes, 1 KiB reserved per block), at most 2: the warp-specialised
// kernels promise it to the compiler (launch bounds), which caps their
// registers by it.
func (t Tile) BlocksPerSM(f Family, m Math) int {
	if twoPerSM(SmemBytes(f, m, t)) {
		return 2
	}
	return 1
}

// twoPerSM reports whether two blocks of smem bytes of dynamic shared
// memory fit one sm_90 multiprocessor (233 472 bytes, 1 KiB reserved per
// block).
func twoPerSM(smem int) bool { return 2*(smem+1024) <= 233472 }

// Threads returns the threads per block (with the producer warps of a
// warp-specialised tile).
func (t Tile) Threads() int { return 32 * (t.WM*t.WN + t.Producers) }

// AllTiles returns Tiles followed by HopperTiles (a new slice).
func AllTiles() []Tile { return append(append([]Tile{}, Tiles...), HopperTiles...) }

// ParseTile finds the tile of Tiles or HopperTiles with the given Name.
func ParseTile(name string) (Tile, error) {
	all := AllTiles()
	for _, t := range all {
		if t.Name() == name {
			return t, nil
		}
	}
	names := make([]string, len(all))
	for i, t := range all {
		names[i] = t.Name()
	}
	return Tile{}, fmt.Errorf("kernels: unknown tile %q (have %s)", name, strings.Join(names, ", "))
}

// Validate mirrors the static_asserts of fg::TileCfg, and fails for an
// arithmetic the tile is not instantiated for (Supports).
func (t Tile) Validate(m Math) error {
	chunk := 16 / m.ElemSize()
	if t.Hopper {
		switch {
		case !t.Supports(m):
			return fmt.Errorf("kernels: tile %s: not instantiated for %v (Hopper tiles need BK·elem = 128 bytes, no F32)", t.Name(), m)
		case t.WN != 1 || t.BM != 16*t.WM || t.BM%64 != 0:
			return fmt.Errorf("kernels: tile %s: a Hopper tile has one warp column and a warpgroup per 64 rows", t.Name())
		case t.BN != 64 && t.BN != 128 && t.BN != 256:
			return fmt.Errorf("kernels: tile %s: a Hopper tile has BN 64, 128 or 256", t.Name())
		case t.Stages < 3:
			return fmt.Errorf("kernels: tile %s: a Hopper tile needs at least 3 stages", t.Name())
		case t.Producers < 0 || t.Producers > 8 || (t.Producers > 0 && (t.Producers%2 != 0 || t.BM%(4*t.Producers) != 0 || t.BN%(4*t.Producers) != 0)):
			return fmt.Errorf("kernels: tile %s: a warp-specialised tile has 2, 4, 6 or 8 producer warps, whose rows per pass (4 per warp: eight threads a 128-byte row; a multiple of 8 keeps the swizzle) divide BM and BN", t.Name())
		case SmemBytes(Gather, m, t) > 227*1024 || (t.Has(Pairs, m) && SmemBytes(Pairs, m, t) > 227*1024):
			return fmt.Errorf("kernels: tile %s: too much shared memory for %v", t.Name(), m)
		case t.Producers == 0 && !t.stageCopiesFit(m):
			return fmt.Errorf("kernels: tile %s: its %d threads cannot share the 16-byte chunks of every %v stage evenly in 8-row steps (StageCopy)", t.Name(), t.Threads(), m)
		}
		return nil
	}
	switch {
	case t.Producers != 0:
		return fmt.Errorf("kernels: tile %s: only a Hopper tile can have producer warps", t.Name())
	case !t.Supports(m):
		return fmt.Errorf("kernels: tile %s: not instantiated for %v (16-bit arithmetics only)", t.Name(), m)
	case t.WM <= 0 || t.WN <= 0 || t.Threads() > 1024:
		return fmt.Errorf("kernels: tile %s: bad warp grid", t.Name())
	case t.BM%(16*t.WM) != 0:
		return fmt.Errorf("kernels: tile %s: BM must be a multiple of 16·WM", t.Name())
	case t.BN%(16*t.WN) != 0:
		return fmt.Errorf("kernels: tile %s: BN must be a multiple of 16·WN", t.Name())
	case t.BK%16 != 0 || t.BK%m.instK() != 0:
		return fmt.Errorf("kernels: tile %s: BK must be a multiple of 16", t.Name())
	case t.BM%chunk != 0 || t.BN%chunk != 0:
		return fmt.Errorf("kernels: tile %s: BM and BN must be multiples of %d", t.Name(), chunk)
	case t.Stages < 2:
		return fmt.Errorf("kernels: tile %s: need at least 2 stages", t.Name())
	case SmemBytes(Gather, m, t) > 227*1024 || SmemBytes(Pairs, m, t) > 227*1024:
		return fmt.Errorf("kernels: tile %s: too much shared memory for %v", t.Name(), m)
	}
	return nil
}

// stageCopiesFit reports whether every stage copy of the plain Hopper
// tile's kernels in arithmetic m fits fg::StageCopy (gemm.cuh), which a
// Hopper tile must: a stage of ROWS rows of CPR 16-byte chunks is copied
// by the block's threads in equal shares, CPR ≤ 32 of them per row and
// steps of a multiple of 8 rows. The stages: the gather's A (BM rows of
// BK) and weight (BN rows of BK, or BK rows of BN read transposed), and
// in the 16-bit arithmetics the pairs kernel's two (BK rows of BM, of BN).
func (t Tile) stageCopiesFit(m Math) bool {
	chunk := 16 / m.ElemSize()
	threads := t.Threads()
	fits := func(rows, cpr int) bool {
		return cpr <= 32 && threads%cpr == 0 && (rows*cpr)%threads == 0 && (threads/cpr)%8 == 0
	}
	ok := fits(t.BM, t.BK/chunk) && fits(t.BN, t.BK/chunk)
	if t.readsMNMajor(m) {
		ok = ok && fits(t.BK, t.BN/chunk) && fits(t.BK, t.BM/chunk)
	}
	return ok
}

// SmemBytes returns the dynamic shared memory of a kernel, the same
// formula as fg::TileCfg::kGatherSmem / kPairsSmem.
func SmemBytes(f Family, m Math, t Tile) int {
	esz := m.ElemSize()
	chunk := 16 / esz
	if t.Hopper {
		// Swizzled stages without padding, the same row and index-ring
		// words, and 1 KiB to align the stages to the swizzle atom
		// (fg::TileCfg with H = true).
		if f == Gather && t.Producers > 0 {
			// Stages, mbarriers, Descriptions description heads and
			// Indices indices (fg::WsLayout in gather_ws.cuh).
			return wsSmem(t, m)
		}
		if f == Gather {
			return t.Stages*(t.BM+t.BN)*t.BK*esz + 4*t.BM + 4*2*t.Stages*(t.BM+1) + 1024
		}
		return t.Stages*(t.BM+t.BN)*t.BK*esz + 2*2*t.Stages*t.BK*4 + 1024
	}
	if f == Gather {
		ldk := t.BK + chunk
		// Operand stages (a B stage is BN K-major rows or, for a weight
		// read transposed, BK MN-major rows, whichever is larger), the
		// tile's output rows, and the ring of 2·Stages neighbour-index
		// slots (BM int32 rows plus the tap).
		bStage := max(t.BN*ldk, t.BK*(t.BN+8))
		return t.Stages*(t.BM*ldk+bStage)*esz + 4*t.BM + 4*2*t.Stages*(t.BM+1)
	}
	// Operand stages plus the ring of 2·Stages pair-index stages (ia and
	// ib, BK int32 each).
	return t.Stages*t.BK*((t.BM+8)+(t.BN+8))*esz + 2*2*t.Stages*t.BK*4
}

// KernelName returns the procedural symbol of a GEMM kernel, e.g.
// "spconv_gather_f16_m128n64k32w2x2s4".
func KernelName(f Family, m Math, t Tile) string {
	return fmt.Sprintf("spconv_%v_%v_%s", f, m, t.Name())
}

// TransposedName returns the symbol of the gather kernel that reads its
// weight transposed ([Kc, V, N], GatherParams.wt = 1; the input gradient
// reads the forward weight this way): KernelName(Gather, m, t) + "_wt".
// Every gather instantiation defines both kernels.
func TransposedName(m Math, t Tile) string {
	return KernelName(Gather, m, t) + "_wt"
}

// HasStreamK reports whether the gather of tile t in arithmetic m has
// stream-K twins (StreamKName; gather_ws.cuh): a warp-specialised tile
// whose block is alone on its SM, except the 256×128 tiles, which exist
// for their swapped twins (wideSwapped).
func (t Tile) HasStreamK(m Math) bool {
	return t.Producers > 0 && t.Supports(m) && t.BlocksPerSM(Gather, m) == 1 && !t.wideSwapped(m)
}

// wideSwapped reports whether t is a warp-specialised tile of 256 rows
// and 128 columns (tf32, or 16-bit), whose swapped twin is what it is
// for: it has no stream-K, half-skip or register-A twin.
func (t Tile) wideSwapped(m Math) bool {
	return t.Producers > 0 && t.Supports(m) && t.BM == 256 && t.BN == 128
}

// HasHalfSkip reports whether the gather of tile t in arithmetic m has a
// half-skip twin (HalfSkipName; gather_ws.cuh, PERF_NOTES steps 92–92c):
// a warp-specialised tf32 tile of two or more warpgroups. Only tf32, whose
// gathers the tensor pipe bounds; the 16-bit kernels stay as they are.
// The engine launches it only under cudaext's EnvHalfSkip (it is slower).
func (t Tile) HasHalfSkip(m Math) bool {
	return t.Producers > 0 && t.Supports(m) && m == TF32 && t.BM >= 128 && !t.wideSwapped(m)
}

// HalfSkipName returns the symbol of the half-skip twin of the gather
// kernel of tile t (HasHalfSkip): KernelName(Gather, m, t) + "_hs".
func HalfSkipName(m Math, t Tile) string {
	return KernelName(Gather, m, t) + "_hs"
}

// HasRegisterA reports whether the gather of tile t in arithmetic m has a
// register-A twin (RegisterAName; gather_ws.cuh RA): a warp-specialised
// tf32 tile of 128 columns (64 accumulators a thread beside four stages of
// A in registers; the 64-column tiles run two blocks per SM, whose 96
// registers a thread spilled). Its consumers load A from global memory
// into registers and multiply it with the register form of wgmma; it
// reads the weight as stored, permuted inside 32-column chunks, and
// serves K of whole 32-column chunks over 16-byte rows only.
func (t Tile) HasRegisterA(m Math) bool {
	return t.Producers > 0 && t.Supports(m) && m == TF32 && t.BN == 128 && t.BM == 128
}

// RegisterAName returns the symbol of the register-A twin of the gather
// kernel of tile t (HasRegisterA): KernelName(Gather, m, t) + "_ra".
func RegisterAName(m Math, t Tile) string {
	return KernelName(Gather, m, t) + "_ra"
}

// RegisterAThreads returns the threads per block of tile t's register-A
// twin: its WM consumer warps and one producer warpgroup, which copies only
// the weight and hands most of its registers to the consumers
// (setmaxnreg, gather_ws.cuh).
func (t Tile) RegisterAThreads() int { return 32 * (t.WM*t.WN + 4) }

// HasSwapped reports whether the gather of tile t in arithmetic m has a
// swapped twin (SwappedName; gather_ws.cuh SW): a warp-specialised tile
// of 128 rows and 64 columns, or one of 256 rows and 128 columns (tf32
// and 16-bit), whose consumer warpgroups (one per 64 columns) multiply the
// transposed tile (their columns of the weight's stage as wgmma's A, all
// the gathered rows as its B), so that each stage's weight is read from
// shared memory once instead of once per 64 rows. It reads the weight as
// stored (16-bit input gradients, which read it transposed, have
// HasSwappedTransposed twins) and serves unsplit gathers over 16-byte rows
// only.
func (t Tile) HasSwapped(m Math) bool {
	return t.Producers > 0 && t.Supports(m) && (t.BM == 128 && t.BN == 64 || t.wideSwapped(m))
}

// SwappedName returns the symbol of the swapped twin of the gather kernel
// of tile t (HasSwapped): KernelName(Gather, m, t) + "_sw".
func SwappedName(m Math, t Tile) string {
	return KernelName(Gather, m, t) + "_sw"
}

// HasSwappedTransposed reports whether the gather of tile t in arithmetic
// m that reads its weight transposed (TransposedName) has a swapped twin
// (SwappedTransposedName; gather_ws.cuh SW with WT): a tile with a
// swapped twin (HasSwapped) in a 16-bit arithmetic, whose weight stage,
// MN-major when read transposed, wgmma can take as a transposed A.
func (t Tile) HasSwappedTransposed(m Math) bool { return t.HasSwapped(m) && t.HasTransposed(m) }

// SwappedTransposedName returns the symbol of the swapped twin of the
// gather kernel of tile t that reads its weight transposed
// (HasSwappedTransposed): TransposedName(m, t) + "_sw".
func SwappedTransposedName(m Math, t Tile) string {
	return TransposedName(m, t) + "_sw"
}

// SwappedThreads returns the threads per block of tile t's swapped twin:
// a consumer warpgroup per 64 columns and the tile's producer warps.
func (t Tile) SwappedThreads() int { return 32 * (4*t.BN/64 + t.Producers) }

// StreamKName returns the symbol of the stream-K twin of the gather kernel
// of tile t (HasStreamK), reading its weight transposed when wt:
// KernelName(Gather, m, t) or TransposedName(m, t), + "_sk".
func StreamKName(m Math, t Tile, wt bool) string {
	if wt {
		return TransposedName(m, t) + "_sk"
	}
	return KernelName(Gather, m, t) + "_sk"
}

// InstanceFile returns the name of the generated source file holding the
// kernels of one family and arithmetic, e.g. "gemm_gather_f16.cu".
func InstanceFile(f Family, m Math) string {
	return fmt.Sprintf("gemm_%v_%v.cu", f, m)
}

// HopperInstanceFile returns the name of the generated source file holding
// the Hopper gather kernels of arithmetic m, e.g.
// "gemm_gather_f16_sm90a.cu" (build.sh compiles *_sm90a.cu to PTX).
func HopperInstanceFile(m Math) string {
	return fmt.Sprintf("gemm_%v_%v_sm90a.cu", Gather, m)
}

// HopperMaths lists the arithmetics that have Hopper tiles.
func HopperMaths() []Math {
	var out []Math
	for _, m := range Maths {
		for _, t := range HopperTiles {
			if t.Supports(m) {
				out = append(out, m)
				break
			}
		}
	}
	return out
}

// GenerateHopperInstances returns the content of HopperInstanceFile(m):
// one extern "C" kernel per tile of HopperTiles that supports m.
func GenerateHopperInstances(m Math) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "// Code generated by cudaext/kernels/gen from tiles.go; DO NOT EDIT.\n\n")
	fmt.Fprintf(&b, "#include \"gemm.cuh\"\n#include \"gather_ws.cuh\"\n\n")
	for _, t := range HopperTiles {
		if !t.Supports(m) {
			continue
		}
		if t.Producers > 0 {
			blocks := t.BlocksPerSM(Gather, m)
			fmt.Fprintf(&b, "FG_GATHER_WS_KERNEL(%s, %s, %d, %d, %d, %d, %d, %d, %d, %d)\n", KernelName(Gather, m, t), m.cppName(),
				t.BM, t.BN, t.BK, t.WM, t.Stages, t.Producers, blocks, SmemBytes(Gather, m, t))
			if t.HasTransposed(m) {
				fmt.Fprintf(&b, "FG_GATHER_WS_WT_KERNEL(%s, %s, %d, %d, %d, %d, %d, %d, %d)\n", KernelName(Gather, m, t), m.cppName(),
					t.BM, t.BN, t.BK, t.WM, t.Stages, t.Producers, blocks)
			}
			if t.HasHalfSkip(m) {
				fmt.Fprintf(&b, "FG_GATHER_WS_HS_KERNEL(%s, %s, %d, %d, %d, %d, %d, %d, %d)\n", HalfSkipName(m, t), m.cppName(),
					t.BM, t.BN, t.BK, t.WM, t.Stages, t.Producers, blocks)
			}
			if t.HasRegisterA(m) {
				fmt.Fprintf(&b, "FG_GATHER_WS_RA_KERNEL(%s, %s, %d, %d, %d, %d, %d, %d, %d)\n", RegisterAName(m, t), m.cppName(),
					t.BM, t.BN, t.BK, t.WM, t.Stages, blocks, SmemBytes(Gather, m, t))
			}
			for _, tw := range []struct {
				has  bool
				name string
				wt   bool
			}{{t.HasSwapped(m), SwappedName(m, t), false}, {t.HasSwappedTransposed(m), SwappedTransposedName(m, t), true}} {
				if tw.has {
					fmt.Fprintf(&b, "FG_GATHER_WS_SW_KERNEL(%s, %s, %d, %d, %d, %d, %d, %d, %d, %v)\n", tw.name, m.cppName(),
						t.BM, t.BN, t.BK, t.WM, t.Stages, t.Producers, blocks, tw.wt)
				}
			}
			if t.HasStreamK(m) {
				for _, wt := range []bool{false, true} {
					if !wt || t.HasTransposed(m) {
						fmt.Fprintf(&b, "FG_GATHER_WS_SK_KERNEL(%s, %s, %d, %d, %d, %d, %d, %d, %v)\n", StreamKName(m, t, wt), m.cppName(),
							t.BM, t.BN, t.BK, t.WM, t.Stages, t.Producers, wt)
					}
				}
			}
			continue
		}
		fmt.Fprintf(&b, "FG_GATHER_H_KERNEL(%s, %s, %d, %d, %d, %d, %d, %d, %d)\n", KernelName(Gather, m, t), m.cppName(),
			t.BM, t.BN, t.BK, t.WM, t.WN, t.Stages, SmemBytes(Gather, m, t))
		if t.HasTransposed(m) {
			fmt.Fprintf(&b, "FG_GATHER_H_WT_KERNEL(%s, %s, %d, %d, %d, %d, %d, %d)\n", KernelName(Gather, m, t), m.cppName(),
				t.BM, t.BN, t.BK, t.WM, t.WN, t.Stages)
		}
		if t.Has(Pairs, m) {
			fmt.Fprintf(&b, "FG_PAIRS_H_KERNEL(%s, %s, %d, %d, %d, %d, %d, %d, %d)\n", KernelName(Pairs, m, t), m.cppName(),
				t.BM, t.BN, t.BK, t.WM, t.WN, t.Stages, SmemBytes(Pairs, m, t))
		}
	}
	return []byte(b.String())
}

// GenerateInstances returns the content of InstanceFile(f, m): one
// extern "C" kernel per tile of Tiles that supports m.
func GenerateInstances(f Family, m Math) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "// Code generated by cudaext/kernels/gen from tiles.go; DO NOT EDIT.\n\n")
	fmt.Fprintf(&b, "#include \"gemm.cuh\"\n\n")
	macro := map[Family]string{Gather: "FG_GATHER_KERNEL", Pairs: "FG_PAIRS_KERNEL"}[f]
	for _, t := range Tiles {
		if !t.Supports(m) {
			continue
		}
		fmt.Fprintf(&b, "%s(%s, %s, %d, %d, %d, %d, %d, %d, %d)\n", macro, KernelName(f, m, t), m.cppName(),
			t.BM, t.BN, t.BK, t.WM, t.WN, t.Stages, SmemBytes(f, m, t))
	}
	return []byte(b.String())
}
