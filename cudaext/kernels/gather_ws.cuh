// Warp-specialised Hopper gather GEMM (tiles with Producers > 0 in
// tiles.go): the same product as gather_gemm (gemm.cuh) with a Hopper tile
// — forward, or input gradient with the weight read transposed (WT) —
// computed by two kinds of warps:
//
//   consumers  the WM warps (BM/64 warpgroups) wait for a full stage,
//              multiply it with wgmma (wgmma.cuh), and, once the group of
//              the previous stage has retired, hand that stage back; then
//              they store the tile (gather_store);
//   producers  PW more warps issue every operand copy (cp.async, 16 bytes,
//              zero fill) of the stages in order, each stage once the
//              consumers handed it back.
//
// Two mbarriers per stage carry the hand-over: full[s] completes when each
// of the 32·PW producer threads has arrived, through
// cp.async.mbarrier.arrive.noinc, that is when all its copies into the
// stage have landed; empty[s] completes when each consumer warp has
// retired the wgmma group that read the stage. A stage's k-th fill waits
// for the (k−1)-th completion of empty[s] (parity trick: the first wait on
// a fresh barrier passes) and its k-th use for the k-th completion of
// full[s]. No warp that multiplies issues a copy, and no block-wide
// barrier stands between two stages: the producers run up to S − 1 stages
// ahead, bounded only by the stages the consumers still read.
//
// A tile's output rows, its taps and the neighbour indices of every tap
// it visits (at most kWsMaxTaps: 3×3×3 kernels and smaller) are loaded
// into a shared tile description once, by the producers, before they fill
// its stages, so they read a row's source index from shared memory
// instead of waiting for a global load at every tap; they read the
// indices row by row, as the table holds them. A block with room for two
// descriptions (alone on its SM, or two per SM where both fit:
// ws_descriptions) may be persistent (the engine launches as many blocks
// as are resident at once when there are more tiles): its producers
// describe the next tile, taken from a counter, and fill its first stages
// while the consumers still multiply and store the last one, so a tile's
// start (index loads, pipeline fill) and its stores overlap the
// neighbouring tiles' products (session 22: RES 128 and 256 gathers 2–4 %
// faster; session 34: the two-per-SM 128×64 tile 1–2 %). Where only one
// description's index fits beside two heads (the output rows and what
// the consumers read), the two share it: the producers rewrite it once
// they have issued the last tile's copies (PERF_NOTES step 134).
//
// A launch may instead be stream-K (the *_sk kernels): its blocks
// form G groups, one block per column tile, and group g runs the
// iterations [⌊W·g/G⌋, ⌊W·(g+1)/G⌋) of the W (tap, K chunk) iterations of
// all row tiles laid end to end in index order, so every SM does the same
// work however unequal the tiles' tap unions are (a gather of about a
// wave of tiles is otherwise as long as its longest tile). A group runs
// the tiles that start in its share first, and last the end of the tile
// its share starts inside of: the blocks holding that tile's earlier parts
// (the last tile they run) store their float32 partials in their slot and
// raise a flag per consumer warp; the finishing warp adds them in group
// order and stores the tile. No float atomics: the sums' order is fixed
// by G and the tiles, so a launch on the same GPU repeats its bits. The
// launch has at most a block per SM (all resident), and a block waits
// only, at its end, for earlier groups' parts, which each stores before
// it waits for anything: no cycle.
//
// After a consumer waits for full[s] it executes fence.proxy.async before
// its wgmma: the stage was written through the generic proxy (cp.async)
// and wgmma reads it through the async proxy.
//
// Needs PTX ISA 7.8 (mbarrier.try_wait) and, like every kernel of
// wgmma.cuh, the sm_90a target: the *_sm90a.cu files include this header.
//
// Timing ceilings (ceiling.sh; never defined by build.sh): each macro
// takes one part of the producers' work away, so a run through
// FLEXGEMM_KERNEL_IMAGE times the kernel without it. The results are
// wrong; the work is otherwise the same.
//   FG_CEILING_NO_ROWS    no row copies (the producers still wait and arrive)
//   FG_CEILING_ZERO_ROWS  every row copy issued with source size 0: the same
//                         instructions and shared-memory writes, no global read
//   FG_CEILING_SELF_ROWS  a live (row, tap) copies the tile row's own output
//                         row: the same copies, one row's locality
//   FG_CEILING_NO_WEIGHT  no weight copies (producer 0 arrives announcing none)
// PERF_NOTES step 120 used them on the tf32 C 64 / C 128 gathers.
// FG_TIMELINE (also ceiling.sh's) builds the timeline probe below.
#pragma once

#include "gemm.cuh"
#include "pdl.cuh"

namespace fg {

#ifdef FG_TIMELINE
constexpr int kTimelineStamps = 320;  // a row of fg_tl_buf (Go: timelineRowStamps)
__device__ long long fg_tl_buf[4][kTimelineStamps];  // [2 · (block 0 or the middle one) + (producer 0, consumer 1)][count, (clock64 << 4) | event …]
// Timeline probe (ceiling.sh FG_TIMELINE; never defined by build.sh):
// producer thread 0 and consumer warp 0's lane 0 of blocks 0 and
// gridDim.x / 2 store clock64 stamps of each stage's waits into
// fg_tl_buf (plain global stores: a printf call makes ptxas serialize
// the wgmmas), which the engine prints at Close (cudaext/timeline.go): each
// stamp (clock64 << 4) | event, the row's count in its slot 0. Events: 0
// before a stage's wait (empty / full), 1 after it; 2 producer: copies
// issued and arrived, consumer: the previous group retired; 5 / 6 before /
// after a tile description's wait; producer: 3 the tile's rows and taps
// read, 4 its neighbour indices loaded; 7 consumer: tile stored.
struct Timeline {
  long long* row;
  int n;
  __device__ explicit Timeline(bool rec, int role) : row(nullptr), n(0) {
    if (rec && (blockIdx.x == 0 || blockIdx.x == gridDim.x / 2)) row = fg_tl_buf[2 * (blockIdx.x == 0 ? 0 : 1) + role];
  }
  __device__ __forceinline__ void mark(int e) {
    if (row && n + 1 < kTimelineStamps) row[1 + n++] = (clock64() << 4) | e;
  }
  // Stores the row's count: its stamps are complete.
  __device__ void finish() {
    if (row) row[0] = n;
  }
};
#define FG_TL(e) tl.mark(e)
#define FG_TL_FINISH() tl.finish()
#else
#define FG_TL(e)
#define FG_TL_FINISH()
#endif

// Most taps a warp-specialised block serves (Go: kernels.MaxSpecializedTaps).
constexpr int kWsMaxTaps = 27;

// ---- mbarrier wrappers (shared memory, CTA scope) ----------------------------

__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Arrives on bar (release: this thread's earlier shared-memory accesses are
// ordered before the phase completes).
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared.b64 st, [%0];\n}\n" ::"r"(smem_addr(bar)) : "memory");
}
// Arrives on bar once every cp.async this thread issued before has landed;
// the arrival is one of the count given to mbar_init (noinc).
__device__ __forceinline__ void mbar_arrive_cp_async(unsigned long long* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Arrives on bar and adds tx bytes the phase must also wait for (bytes
// that bulk tensor copies signal with complete_tx).
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned long long* bar, unsigned tx) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared.b64 st, [%0], %1;\n}\n" ::"r"(smem_addr(bar)), "r"(tx)
               : "memory");
}
// Waits until the phase of bar with the given parity has completed.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// A CUtensorMap (TMA descriptor: 128 opaque bytes, 64-byte aligned), built
// on the host by cuTensorMapEncodeTiled and passed as a __grid_constant__
// kernel parameter.
struct alignas(64) TmaMap {
  unsigned long long v[16];
};
// The tensor maps of a warp-specialised gather: w, the weight, 3-D with
// the 128-byte swizzle — [N][V][Kc] with boxes of BK × 1 × BN (one K-major
// B stage), or, read transposed, [Kc][V][N] with boxes of 64 × 1 × BK (one
// 64-column block of an MN-major B stage). Valid only when p.vec (16-byte
// rows); the engine leaves it zero otherwise.
//
// The gathered rows stay 16-byte cp.async copies: one bulk tensor copy per
// 128-byte row (boxes of BK × 1, an absent row out of bounds) is correct
// but took twice as long (session 9, call 5: RES 256 C 256 forward 0.906 →
// 1.368 ms, RES 1024 C 64 2.35 → 3.18 ms).
struct alignas(64) WsMaps {
  TmaMap w;
};

// Bulk tensor copy of the 3-D box at (c0, c1, c2) of map into shared memory
// at dst; its bytes complete_tx on bar. No cluster: the CTA's own shared
// addresses are its shared::cluster addresses.
__device__ __forceinline__ void tma_load_3d(void* dst, const TmaMap* map, int c0, int c1, int c2,
                                            unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}

// Named barrier 1 over the producer warps only (n threads).
__device__ __forceinline__ void producers_sync(int n) { asm volatile("bar.sync 1, %0;\n" ::"r"(n) : "memory"); }

// The stream-K buffers of a warp-specialised gather launch (a parameter of
// the *_sk kernels; Go mirror: cudaext streamKArgs).
struct StreamK {
  float* slots;     // [gridDim.x][BM·BN] float32: each block's part of a tile that another group finishes
  unsigned* flags;  // [gridDim.x][consumer warps], zero at the launch: that warp's part of the slot is stored
};
static_assert(sizeof(StreamK) == 16, "StreamK layout");

// A piece of a stream-K group's work: iterations [t0, t1) of row tile tm
// (in the block's column tile); role 0 the whole tile, 1 a part that
// another group finishes (stored to the block's slot), 2 the end of a tile
// whose earlier parts groups first … (this group − 1) stored.
struct StreamKPiece {
  long long tm, t0, t1;
  int role, first;
};

// The pieces of a block of a stream-K launch, in the order it runs them
// (every producer thread runs the same cursor and gets the same pieces).
// The blocks form G groups of tilesN (the column tiles): block b is column
// tile b mod tilesN of group b / tilesN, so the blocks of a group gather
// the same rows at the same time, as a tile per block launch's neighbours
// do (session 23, call 1: with the column tiles of a row tile run one
// after another by one block, the RES 64 and 128 gathers lost 7–9 %).
// Group g's share is [⌊W·g/G⌋, ⌊W·(g+1)/G⌋) of the W iterations of the
// row tiles laid end to end. A group first runs the tiles that start in
// its share — all blocks start a tile at its first tap, in step — and
// last the end of the tile its share starts inside of.
template <class C> struct StreamKCursor {
  long long W, R0, R1, ntM, i;
  int nkc, g, G;
  bool tailDue;
  StreamKPiece tail;
  // Row tile t's first iteration (its union counts' prefix times nkc).
  __device__ __forceinline__ long long start(const GatherParams& p, long long t) const {
    return (p.tile_seg ? (long long)p.tile_seg[t] : t * p.V) * nkc;
  }
  // The first iteration of group gg's share.
  __device__ __forceinline__ long long bound(long long gg) const { return W * gg / G; }
  // The last group whose share starts at or before pos (< W).
  __device__ __forceinline__ int groupOf(long long pos) const { return (int)((G * (pos + 1) + W - 1) / W - 1); }
  // Starts the cursor of block blockIdx.x; the pt-th of np producer
  // threads, first[0] shared scratch.
  __device__ void init(const GatherParams& p, int pt, int np, int* first) {
    const int tilesN = (int)((p.N + C::BN - 1) / C::BN);
    ntM = (p.M + C::BM - 1) / C::BM;
    nkc = (int)((p.Kc + C::BK - 1) / C::BK);
    G = gridDim.x / tilesN;
    g = blockIdx.x / tilesN;
    W = start(p, ntM);
    R0 = bound(g);
    R1 = bound(g + 1);
    // The first row tile that ends past R0 or starts at or after it (a
    // monotone predicate: count the row tiles before it in parallel).
    if (pt == 0) *first = 0;
    producers_sync(np);
    int before = 0;
    for (long long t = pt; t < ntM; t += np) before += start(p, t + 1) <= R0 && start(p, t) < R0;
    if (before) atomicAdd(first, before);
    producers_sync(np);
    i = *first;
    tailDue = false;
    if (i < ntM) {
      const long long S = start(p, i), E = start(p, i + 1);
      if (S < R0) {  // the share starts inside tile i: its end runs last
        tail = StreamKPiece{i, R0 - S, min(E, R1) - S, E > R1 ? 1 : 2, groupOf(S)};
        tailDue = true;
        ++i;
      }
    }
  }
  // The next piece, or false.
  __device__ bool next(const GatherParams& p, StreamKPiece& pc) {
    if (i < ntM) {
      const long long S = start(p, i), E = start(p, i + 1);
      if (S < R1 || g == G - 1) {
        pc = StreamKPiece{i, 0, min(E, R1) - S, E > R1 ? 1 : 0, 0};
        ++i;
        return true;
      }
      i = ntM;
    }
    if (tailDue) {
      pc = tail;
      tailDue = false;
      return true;
    }
    return false;
  }
};


// Named barrier 2 over the consumer warps only (n threads).
__device__ __forceinline__ void consumers_sync(int n) { asm volatile("bar.sync 2, %0;\n" ::"r"(n) : "memory"); }

// A compile-time bool as a type (the half skip's stage body, gather_gemm_ws).
template <bool B> struct BoolConst {
  static constexpr bool value = B;
};
// Loads 16 bytes of read-only global memory at q into v where pred, else
// leaves v undefined (the caller masks it: and_late); not cached in L1
// (every 64-byte run a warp loads is read whole by one instruction).
// Volatile, so that it issues where it stands: the register-A consumers
// load a stage R − 1 stages before they multiply it.
__device__ __forceinline__ void ldg16_if(unsigned (&v)[4], const float* q, bool pred) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %5, 0;\n"
      "@p ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
      : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
      : "l"(q), "r"((int)pred));
}
// v & m, computed where it stands (volatile): the first use of a loaded
// register, so that the wait for the load is there and not at the load
// (a zero fill merged into the loaded registers, or the copies into the
// wgmma fragment's register order, placed at the load, made every stage
// wait for its own loads: PERF_NOTES step 123).
__device__ __forceinline__ unsigned and_late(unsigned v, unsigned m) {
  unsigned r;
  asm volatile("and.b32 %0, %1, %2;\n" : "=r"(r) : "r"(v), "r"(m));
  return r;
}

// Registers a thread of the register-A kernels (RA below) keeps after its
// warpgroup's setmaxnreg: the producer warpgroup gives back down to 24,
// the two consumer warpgroups take up to 240, so that a consumer holds
// its 64 accumulators beside four stages of A (ptxas 12.4: no spills; at
// 40 / 232 the epilogue spilled 4 bytes). Per SM sub-partition (one warp
// of each warpgroup) 2 · 240 + 24 = 504 of 512 registers a lane.
constexpr int kRaProducerRegs = 24, kRaConsumerRegs = 240;
// setmaxnreg of the calling warpgroup (every warp of it must execute it).
// ptxas allocates the code after it within N registers only where the
// kernel holds no trap (ptxas 12.4: one trap anywhere keeps the whole
// kernel within its launch bounds' cap; PERF_NOTES step 124), hence fail.
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N) : "memory");
}
// Ends the launch with an error: a trap, or in a kernel that sets its
// registers per warpgroup (NoTrap) a store to address 0, which the host
// sees as an illegal-address error instead of a launch failure.
template <bool NoTrap> __device__ __forceinline__ void fail() {
  if constexpr (NoTrap)
    asm volatile("st.global.u32 [%0], %1;\n" ::"l"(0ull), "r"(0) : "memory");
  else
    __trap();
}

// The source row of each tile row at one tap position: a column of a
// tile description's neighbour indices (row-major, kWsMaxTaps apart; a
// launch without a table has its output rows in column 0).
struct RowSources {
  const int* at;
  __device__ __forceinline__ int operator[](int row) const { return at[row * kWsMaxTaps]; }
  // The sources of rows from row on.
  __device__ __forceinline__ RowSources offset(int row) const { return RowSources{at + row * kWsMaxTaps}; }
};

// Whether any of the 64 tile rows whose sources at one tap start at src
// has one (src[i] ≥ 0): a vote of the calling warp.
__device__ __forceinline__ bool rows64_live(RowSources src, int lane) {
  return __any_sync(~0u, src[lane] >= 0 || src[lane + 32] >= 0);
}

// split_reduce ends the block (tile blockIdx.x, split z = blockIdx.y) of a
// split-K launch whose p.split_ctr is set: the split blocks of a tile sum
// each other's partials, so no reduction kernel follows (a launch and
// 6–7 µs a gather at RES 8, H200 session 30's phase profile). Each block
// stores its float32 accumulators to its slot (p.part, [tiles][splits][BM·BN]
// in fragment order: every warp-wide store writes 512 contiguous bytes),
// arrives on the tile's counter and waits until all splits have arrived;
// then it sums share z of the tile's float4 runs over the splits in split
// order, adds the bias and stores the results to their output rows — the
// same sums in the same order as spconv_reduce (conv_aux.cu), so the
// result is the same bit for bit. The last block to leave zeroes the
// counters for the next launch. The engine sets split_ctr only where
// every block of the launch is resident at once (tiles · splits within
// the SMs' blocks); a wait that never ends traps instead of hanging.
// nc consumer threads, ct this one's index.
template <class C, bool NoTrap = false>
__device__ __forceinline__ void split_reduce(const GatherParams& p, const float (&acc)[C::MI][C::NI][4], const int* rows,
                                             long long n0, int warp, int lane, int ct, int nc) {
  using T = typename C::T;
  static_assert(C::WN == 1, "a Hopper tile's warps own whole rows");
  constexpr int kRuns = C::MI * C::NI, F = C::kWarps * kRuns * 32;  // float4 runs of a tile
  const long long S = p.splits, bx = blockIdx.x, z = blockIdx.y;
  float4* slots = reinterpret_cast<float4*>(p.part) + bx * S * F;  // this tile's splits
  float4* mine = slots + z * F + (long long)warp * kRuns * 32 + lane;
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < C::NI; ++ni)
      __stcg(mine + (mi * C::NI + ni) * 32, make_float4(acc[mi][ni][0], acc[mi][ni][1], acc[mi][ni][2], acc[mi][ni][3]));
  __threadfence();
  consumers_sync(nc);
  if (ct == 0) {
    unsigned* arrive = p.split_ctr + 2 * bx;
    atomicAdd(arrive, 1u);
    long long spins = 0;
    while (ld_acquire(arrive) < (unsigned)S) {
      if (++spins > (1ll << 26)) fail<NoTrap>();  // a split never arrived: fail, do not hang
      __nanosleep(32);
    }
    // Every split has passed its wait once all have left: the last zeroes.
    if (atomicAdd(arrive + 1, 1u) == (unsigned)S - 1) {
      atomicExch(arrive, 0u);
      atomicExch(arrive + 1, 0u);
    }
  }
  consumers_sync(nc);
  T* y = reinterpret_cast<T*>(p.y);
  const T* bias = reinterpret_cast<const T*>(p.bias);
  const bool pairOK = (p.N & 1) == 0;
  const int f1 = (int)(F * (z + 1) / S);
  for (int f = (int)(F * z / S) + ct; f < f1; f += nc) {
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (long long zz = 0; zz < S; ++zz) {
      const float4 v = __ldcg(slots + zz * F + f);
      s.x += v.x;
      s.y += v.y;
      s.z += v.z;
      s.w += v.w;
    }
    // Run f's place in the tile (gather_store's fragment order).
    const int ln = f & 31, run = (f >> 5) % kRuns, w = f / (32 * kRuns);
    const int mi = run / C::NI, ni = run % C::NI;
    const long long col = n0 + ni * 8 + 2 * (ln & 3);
    if (col >= p.N) continue;
    const int nv = col + 1 < p.N ? 2 : 1;
    float b0 = 0.f, b1 = 0.f;
    if (bias) {
      b0 = to_f32(bias[col]);
      if (nv == 2) b1 = to_f32(bias[col + 1]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int orow = rows[w * C::WTM + mi * 16 + (ln >> 2) + 8 * h];
      if (orow < 0) continue;
      const float v0 = h ? s.z : s.x, v1 = h ? s.w : s.y;
      store2<T>(y + (long long)orow * p.N + col, bias ? v0 + b0 : v0, bias ? v1 + b1 : v1, nv, pairOK);
    }
  }
}

// A tile's description is two parts: its head (two mbarriers, filled and
// handed back; five ints: iterations, first column, split, next tile — a
// stream-K piece's role and first group instead — and a register-A tile's
// first K chunk; the output rows), 16-byte aligned so that the next
// head's mbarriers stay aligned, and its index (the taps, and the
// neighbour indices of every tap).
template <class C> __host__ __device__ constexpr int ws_head_bytes() { return 4 * C::BM + 48; }
template <class C> __host__ __device__ constexpr int ws_index_bytes() {
  return (4 * kWsMaxTaps * (C::BM + 1) + 15) / 16 * 16;
}

// The dynamic shared memory of a warp-specialised gather block with MB
// description heads and MI indices: stages, a full and an empty mbarrier
// per stage, the descriptions and 1 KiB of swizzle alignment.
template <class C> __host__ __device__ constexpr int ws_smem_bytes(int MB, int MI) {
  return C::S * (C::BM + C::BN) * C::BK * C::kElem + 16 * C::S + MB * ws_head_bytes<C>() + MI * ws_index_bytes<C>() +
         1024;
}

// Shared-memory layout of a warp-specialised gather block (C a Hopper
// TileCfg, PW producer warps, MB description heads and MI indices); Go
// mirror: kernels.SmemBytes.
template <class C, int PW, int MB, int MI> struct WsLayout {
  static constexpr int kProd = 32 * PW;  // producer threads
  static constexpr int kCons = C::kThreads;  // consumer threads (WM warps)
  static constexpr int ASt = C::BM * C::BK, BSt = C::BN * C::BK;  // elements per stage
  static constexpr int kHead = ws_head_bytes<C>(), kIndex = ws_index_bytes<C>();
  static constexpr int kSmem = ws_smem_bytes<C>(MB, MI);
  // Copy layout of the producers: kThreadsPerRow threads per 128-byte K
  // row (kChunksPerThread 16-byte chunks each, q, q + kThreadsPerRow, …),
  // kProd / kThreadsPerRow rows per pass; a thread's rows are a multiple
  // of 8 apart, so their swizzle (row mod 8) is its own constant. Eight
  // threads a row make one warp-wide copy four whole 128-byte lines (four
  // a row: eight half lines), half the L2 requests for the same sectors.
  static constexpr int kThreadsPerRow = 8;
  static constexpr int kChunksPerThread = 8 / kThreadsPerRow;
  static constexpr int kRowsPerPass = kProd / kThreadsPerRow;
  static_assert(C::kHopper && C::BK * C::kElem == 128, "a warp-specialised tile is a Hopper tile");
  static_assert(C::BM % kRowsPerPass == 0 && C::BN % kRowsPerPass == 0 && kRowsPerPass % 8 == 0,
                "producer rows per pass must divide BM and BN and keep the swizzle");
  static_assert((MB == 1 || MB == 2) && (MI == 1 || MI == MB), "one or two description heads, one index or one each");
  static_assert(kSmem <= 227 * 1024, "too much shared memory");
};

// Whether a warp-specialised block of minBlocks blocks per SM with MB
// description heads and MI indices fits: in a block's shared memory where
// it is alone on its SM, else two beside each other.
template <class C> __host__ __device__ constexpr bool ws_fits(int minBlocks, int MB, int MI) {
  return minBlocks == 1 ? ws_smem_bytes<C>(MB, MI) <= 227 * 1024 : 2 * (ws_smem_bytes<C>(MB, MI) + 1024) <= 233472;
}

// The description heads of a warp-specialised block of minBlocks blocks
// per SM: two where two heads and one index still fit beside its stages
// (a persistent block describes its next tile while it stores the last),
// else one; and its indices (ws_indices): two where two whole
// descriptions fit, else one, which the producers rewrite for the next
// tile once they have issued the last one's copies (and, in a kernel
// whose consumers read it, the half skip's and register A's, once those
// have stored it). kernels.Tile.Descriptions mirrors the rule.
template <class C, int PW> __host__ __device__ constexpr int ws_descriptions(int minBlocks) {
  return ws_fits<C>(minBlocks, 2, 1) ? 2 : 1;
}
template <class C, int PW> __host__ __device__ constexpr int ws_indices(int minBlocks) {
  return ws_fits<C>(minBlocks, 2, 2) ? 2 : 1;
}

// A tile description's head in shared memory (WsLayout::kHead bytes):
// what the consumers read of it.
template <class C> struct WsMeta {
  unsigned long long full, empty;  // described (producers) / done with (consumers)
  int nIter, n0, z, next;  // next: the producers' next tile, or (stream-K) 4 · first + role
  int kc0;                 // RA: the K chunk of the first iteration (a split's share may start inside a tap)
  int rows[C::BM];         // output row of each tile row, or −1
};

// A tile description's index in shared memory (WsLayout::kIndex bytes):
// what the producers read of it (and the half skip's and register A's
// consumers).
template <class C> struct WsIndex {
  int taps[kWsMaxTaps];         // table tap of each tap position
  int idx[C::BM * kWsMaxTaps];  // [row][position] source row or −1 (row-major, as the table)
  // The source rows of tap position pos (a launch with a table), or the
  // output rows (without: column 0 holds them).
  __device__ __forceinline__ RowSources sources(bool tbl, int pos) const { return RowSources{idx + (tbl ? pos : 0)}; }
};

// sw_store writes a swapped tile (gather_gemm_ws SW): acc holds Dᵀ, warp
// w's output columns n0 + 16w + g (+ 8 for the fragment's second half) of
// tile rows 8j + 2t (+ 1), as mma.sync C fragments of the transposed tile
// CT (64 × BM); each output row gets the bias once. float32: a warp's store
// writes 8 consecutive columns of 4 rows, four whole 32-byte sectors.
// 16-bit: lanes g and g ⊕ 1 trade values so that the even one holds
// columns g, g + 1 of row 2t and the odd one columns g − 1, g of row
// 2t + 1, one 4-byte word each (element stores where N is odd).
template <class CT>
__device__ __forceinline__ void sw_store(const GatherParams& p, const float (&acc)[CT::MI][CT::NI][4], const int* rows,
                                         long long n0, int warp, int lane) {
  static_assert(CT::MI == 1, "one 16-column slice a warp");
  using T = typename CT::T;
  const int g = lane >> 2, t4 = lane & 3;
  const T* bias = reinterpret_cast<const T*>(p.bias);
  T* y = reinterpret_cast<T*>(p.y);
  if constexpr (sizeof(T) == 4) {
    float bv[2];
    bool in[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long col = n0 + 16 * warp + g + 8 * h;
      in[h] = col < p.N;
      bv[h] = bias && in[h] ? to_f32(bias[col]) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < CT::NI; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int orow = rows[8 * j + 2 * t4 + e];
        if (orow < 0) continue;
        T* r = y + (long long)orow * p.N + n0 + 16 * warp + g;
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (in[h]) r[8 * h] = acc[0][j][2 * h + e] + bv[h];
      }
  } else {
    const int odd = g & 1;
    const bool pairOK = (p.N & 1) == 0;
    float b0[2], b1[2];
    long long c0[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      c0[h] = n0 + 16 * warp + (g & ~1) + 8 * h;  // this lane's first column
      b0[h] = bias && c0[h] < p.N ? to_f32(bias[c0[h]]) : 0.f;
      b1[h] = bias && c0[h] + 1 < p.N ? to_f32(bias[c0[h] + 1]) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < CT::NI; ++j) {
      const int orow = rows[8 * j + 2 * t4 + odd];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // Even lanes keep (g, row 2t) and take (g + 1, row 2t) from the
        // odd partner; odd lanes keep (g, row 2t + 1) and take (g − 1,
        // row 2t + 1) from the even one.
        const float send = odd ? acc[0][j][2 * h] : acc[0][j][2 * h + 1];
        const float got = __shfl_xor_sync(0xffffffffu, send, 4);
        const float v0 = (odd ? got : acc[0][j][2 * h]) + b0[h];
        const float v1 = (odd ? acc[0][j][2 * h + 1] : got) + b1[h];
        if (orow < 0 || c0[h] >= p.N) continue;
        T* r = y + (long long)orow * p.N + c0[h];
        if (pairOK) {
          *reinterpret_cast<unsigned*>(r) = pack16<T>(v0, v1);
        } else {
          r[0] = from_f32<T>(v0);
          if (c0[h] + 1 < p.N) r[1] = from_f32<T>(v1);
        }
      }
    }
  }
}

// A block runs the tiles bx = blockIdx.x, then (persistent launches, fewer
// blocks than tiles) the next ones: from gridDim.x on, taken in launch
// order from the counter *next (zeroed before the launch) or, without one,
// every gridDim.x-th. The producers describe each tile in one of MB
// shared descriptions (rows, taps, indices) and then fill its stages; the
// consumers multiply them and store the tile from its description, then
// hand the description back. With MB = 2 the producers describe the next
// tile and fill its first stages while the consumers still multiply and
// store this one. A tile's products are the same whichever block runs it.
// SK: a stream-K launch (the *_sk kernels: separate, so that the other
// kernels keep their registers).
// HS: the half skip (the *_hs kernels, kernels.HalfSkipName; separate for
// the same reason, PERF_NOTES steps 92 and 92b): in an unsplit launch over
// a table, a warpgroup none of whose 64 rows has a source at a tap skips
// that tap. The producers leave those rows' copies out; each consumer warp
// finds its warpgroup's taps once per tile, from the description's
// indices, as a mask in a register, and at a stage of a dead tap commits
// an empty wgmma group instead of multiplying zeros — nothing read from
// shared memory between a stage's wait and its multiply (step 92b's
// per-stage word put a special-register read, a shared load and a branch
// there, and cost 10–14 %). Both sides take the same vote over the same
// indices. Every sum keeps its terms in the same order, so the result has
// the same bits as without.
// RA: A from registers (the *_ra kernels, kernels.RegisterAName; tf32, the
// weight as stored, no stream-K, no half skip, 16-byte rows and K a
// multiple of BK). The consumers load their own rows of A straight from
// global memory into registers, three stages ahead, and multiply them with
// the register form of wgmma; the producers only describe tiles and
// issue the weight's bulk tensor copies, so no row passes through shared
// memory (PERF_NOTES step 123). A thread's wgmma fragment of a K step k8
// holds K columns t and t + 4 of its two rows (t = lane mod 4); over a
// stage's four steps that is eight columns per row, which the weight's
// permutation inside every 32-column chunk (spconv_tf32_operand_ra,
// conv_aux.cu) turns into the two 16-byte runs 4t … 4t + 3 and
// 16 + 4t … 16 + 4t + 3 of the row: step k multiplies stored column
// 16⌊k/2⌋ + 4t + 2(k mod 2) + h as column 8k + t + 4h (h = 0, 1), and the
// weight's column 8k + t + 4h holds its column 16⌊k/2⌋ + 4t + 2(k mod 2) + h.
// Each lane's two loads per row are then whole 64-byte runs of the warp's
// rows. The same products as the shared-memory kernel, in other K steps:
// the sums may differ from its in the last bits.
// SW: swapped operands (the *_sw kernels, kernels.SwappedName; tiles of
// 128 rows and 64 columns or 256 rows and 128 columns, unsplit, no
// stream-K, 16-byte rows; with WT, the 16-bit input gradients' *_wt_sw
// kernels, kernels.SwappedTransposedName: the weight's MN-major stage is
// wgmma's A, read transposed, PERF_NOTES step 139). A consumer warpgroup per 64
// output columns multiplies its part of the transposed tile, Dᵀ (64 × BM)
// = Wᵀ · Xᵀ: its 64 columns of the weight's stage (128 bytes of K each)
// are wgmma's A and all the tile's gathered rows its B, in the stages the
// producers fill as for the plain kernel. A 128 × 64 stage then reads 24
// instead of 32 KiB of shared memory (the weight once, not once per
// warpgroup: PERF_NOTES step 125); a 256 × 128 stage reads 80 KiB, as
// two 128 × 128 stages do 96, and writes the weight once for 256 rows
// (step 127). The accumulators hold output columns g and g + 8 of a warp's
// 16 for rows 2t and 2t + 1 of every 8; sw_store writes them.
template <class C, int PW, bool WT, int MB, int MI, bool SK, bool HS = false, bool RA = false, bool SW = false>
__device__ __forceinline__ void gather_gemm_ws(const GatherParams& p, const WsMaps& maps, unsigned* next,
                                               const StreamK& sk) {
  using T = typename C::T;
  using Raw = typename C::Raw;
  using L = WsLayout<C, PW, MB, MI>;
  using Meta = WsMeta<C>;
  using Index = WsIndex<C>;
  static_assert(!WT || C::kElem == 2, "a tf32 Hopper tile reads the weight as stored");
  static_assert(sizeof(Meta) <= L::kHead && sizeof(Index) <= L::kIndex, "tile description layout");
  static_assert(!RA || (C::kMath == Math::TF32 && !WT && !SK && !HS && C::BN == 128),
                "register A: tf32, 128 columns, the weight as stored, no stream-K or half skip");
  static_assert(!SW || (!SK && !HS && !RA && ((C::BM == 128 && C::BN == 64) || (C::BM == 256 && C::BN == 128))),
                "swapped operands: tiles of 128 rows and 64 columns or 256 and 128, unsplit");
  // Consumer warps: the tile's WM, or the swapped kernels' warpgroup per
  // 64 output columns.
  constexpr int kConsWarps = SW ? 4 * C::BN / 64 : C::kWarps, kConsThreads = 32 * kConsWarps;
  constexpr int S = C::S, BM = C::BM, BN = C::BN, BK = C::BK, KC = C::kChunk;
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* base = smem + ((1024 - (smem_addr(smem) & 1023)) & 1023);
  T* As = reinterpret_cast<T*>(base);  // [S][BM][BK] swizzled
  T* Bs = As + S * L::ASt;             // [S][BN][BK] swizzled, or [S] MN-major when WT
  unsigned long long* full = reinterpret_cast<unsigned long long*>(Bs + S * L::BSt);
  unsigned long long* empty = full + S;
  unsigned char* metaBase = reinterpret_cast<unsigned char*>(empty + S);
  auto meta = [&](int b) { return reinterpret_cast<Meta*>(metaBase + b * L::kHead); };
  auto index = [&](int b) { return reinterpret_cast<Index*>(metaBase + MB * L::kHead + b * L::kIndex); };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long long tiles = ((p.M + BM - 1) / BM) * ((p.N + BN - 1) / BN);
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      // Every producer thread's cp.async arrival, plus producer 0's
      // arrival with the bytes of the B stage's bulk tensor copies.
      mbar_init(full + s, RA ? 1 : L::kProd + 1);
      mbar_init(empty + s, kConsWarps);
    }
    for (int b = 0; b < MB; ++b) {
      mbar_init(&meta(b)->full, 1);
      mbar_init(&meta(b)->empty, kConsWarps);
    }
    // The barriers are initialised through the generic proxy; the bulk
    // tensor copies signal them through the async proxy.
    fence_proxy_async();
  }
  __syncthreads();

  const T* x = reinterpret_cast<const T*>(p.x);
  const T* w = reinterpret_cast<const T*>(p.w);

  if (warp >= kConsWarps) {
    // ---- producers ----
    if constexpr (RA) setmaxnreg_dec<kRaProducerRegs>();
    const int pt = tid - kConsThreads;
#ifdef FG_TIMELINE
    Timeline tl(tid == kConsThreads, 0);
#endif
    constexpr int TPR = L::kThreadsPerRow, CPT = L::kChunksPerThread;
    const int q = pt % TPR, r0 = pt / TPR;  // chunks q + TPR·h of rows r0 + j·kRowsPerPass
    constexpr int RP = L::kRowsPerPass;
    int s = 0;
    unsigned parity = 1;  // a fresh empty barrier's "previous phase" counts as complete
    long long bx = blockIdx.x;
    StreamKCursor<C> cur;
    if constexpr (SK) {
      __shared__ int skFirst;
      cur.init(p, pt, L::kProd, &skFirst);
    }
    for (int k = 0;; ++k) {
      Meta* m = meta(k % MB);
      Index* ix = index(k % MI);
      // The head's previous tile is stored (its first use passes).
      FG_TL(5);
      mbar_wait(&m->empty, ((k / MB) & 1) ^ 1);
      if constexpr (MI < MB) {
        // One index for two heads: every producer has issued the last
        // tile's copies, and consumers that read it have stored it.
        if constexpr (HS || RA) {
          if (k > 0) mbar_wait(&meta((k - 1) % MB)->empty, ((k - 1) / MB) & 1);
        }
        producers_sync(L::kProd);
      }
      FG_TL(6);
      StreamKPiece pc;
      if (SK ? !cur.next(p, pc) : bx >= tiles) {
        if (pt == 0) {
          m->nIter = -1;  // no more tiles
          mbar_arrive(&m->full);
        }
        break;
      }
      // Describe the tile (or piece): rows and taps, then the neighbour
      // indices.
      GatherBlock<C> blk = SK ? GatherBlock<C>(pc.tm, blockIdx.x % ((p.N + BN - 1) / BN)) : GatherBlock<C>(p, bx);
      if constexpr (SK) {
        blk.taps(p);
        blk.range(pc.t0, pc.t1);
      } else {
        blk.split(p);
      }
      const int vi0 = (int)blk.vi0, nkc = blk.nkc, nIter = blk.nIter;
      const int nPos = nIter > 0 ? (int)((blk.t1 - 1) / nkc) - vi0 + 1 : 0;  // tap positions it visits
      if (nPos > kWsMaxTaps) fail<RA>();  // the engine never launches more taps (kernels.MaxSpecializedTaps)
      gather_rows<C>(p, m->rows, blk.m0, pt, L::kProd);
      for (int i = pt; i < nPos; i += L::kProd)
        ix->taps[i] = p.tile_taps ? p.tile_taps[blk.tapBase + vi0 + i] : vi0 + i;
      if (pt == 0) {
        m->nIter = nIter;
        m->n0 = (int)blk.n0;
        m->z = blk.z;
        if constexpr (RA) m->kc0 = (int)(blk.t0 - (long long)vi0 * nkc);  // only the register-A consumers read it
        // The block's next tile, taken now so that its description can
        // follow without a wait.
        if constexpr (SK)
          m->next = 4 * pc.first + pc.role;
        else
          m->next = next ? (int)gridDim.x + (int)atomicAdd(next, 1u) : (int)(bx + gridDim.x);
      }
      producers_sync(L::kProd);
      FG_TL(3);
      const long long nextTile = m->next;
      if (p.tbl) {
        // Row by row, as the table stores them: a warp's 32 entries lie in
        // a few rows' 4·V bytes (a tap-major walk read a line per entry:
        // PERF_NOTES step 133), and land in consecutive shared words.
        const int np = max(nPos, 1), dRow = L::kProd / np, dPos = L::kProd - dRow * np;
        int i = nPos > 0 ? pt / np : BM, pos = pt - i * np;
        for (; i < BM; i += dRow, pos += dPos) {
          if (pos >= nPos) {
            pos -= nPos;
            ++i;
            if (i >= BM) break;
          }
          const int orow = m->rows[i];
          if (orow >= 0)
            cp_async4(ix->idx + i * kWsMaxTaps + pos, tbl_entry(p, orow, ix->taps[pos]), true);
          else
            ix->idx[i * kWsMaxTaps + pos] = -1;
        }
        cp_async_commit();
        cp_async_wait<0>();
      } else {
        for (int i = pt; i < BM; i += L::kProd) ix->idx[i * kWsMaxTaps] = m->rows[i];
      }
      producers_sync(L::kProd);
      FG_TL(4);
      if (pt == 0) mbar_arrive(&m->full);  // release: the description, to the consumers
      const long long n0 = blk.n0;
      int vi = vi0, kc = (int)(blk.t0 - (long long)vi0 * nkc);
      unsigned live = ~0u;  // HS: bit g, warpgroup g multiplies this tap
      for (int it = 0; it < nIter; ++it) {
        if constexpr (HS) {
          if (kc == 0 && p.tbl && p.splits == 1) {
            live = 0;
#pragma unroll
            for (int g = 0; g < BM / 64; ++g) live |= (unsigned)rows64_live(ix->sources(true, vi - vi0).offset(64 * g), lane) << g;
          }
        }
        FG_TL(0);
        mbar_wait(empty + s, parity);
        FG_TL(1);
        const int pos = vi - vi0;
        const int v = ix->taps[pos];
        const int wv = p.mirror ? (int)p.V - 1 - v : v;  // the weight's tap
        const long long col0 = (long long)kc * BK;
        T* as = As + s * L::ASt;
        T* bs = Bs + s * L::BSt;
        const RowSources src = ix->sources(p.tbl, pos);  // each tile row's source row or −1
        if constexpr (RA) {
          // The consumers load the rows: only the weight's stage here.
          if (pt == 0) {
            mbar_arrive_expect_tx(full + s, BN * BK * C::kElem);
            tma_load_3d(bs, &maps.w, (int)col0, wv, (int)n0, full + s);
          }
        } else if (p.vec) {
#ifdef FG_CEILING_NO_WEIGHT
          if (pt == 0) mbar_arrive(full + s);
#else
          if (pt == 0) mbar_arrive_expect_tx(full + s, BN * BK * C::kElem);
#endif
          // A: gathered rows (K-major, 128-byte swizzle), their source
          // rows read first (a shared read between copies waits for its
          // own round trip: gemm.cuh pairs_gemm).
          // A copy's source is a byte address (one multiply-add per row,
          // chunk h TPR·16 bytes on), its destination and size
          // registers set once: rows r0 + j·RP (RP a multiple of 8) share
          // the swizzle of r0.
          int srs[BM / RP];
#pragma unroll
          for (int j = 0; j < BM / RP; ++j) srs[j] = src[r0 + j * RP];
          const char* xq = reinterpret_cast<const char*>(x + col0 + q * KC);
          const unsigned rowBytes = (unsigned)p.Kc * (unsigned)sizeof(T);
          unsigned dh[CPT];
          int nh[CPT];
#pragma unroll
          for (int h = 0; h < CPT; ++h) {
            const int ch = q + TPR * h;
            dh[h] = smem_addr(as + r0 * BK + ((ch ^ r0) & 7) * KC);
            nh[h] = col0 + ch * KC < p.Kc ? 16 : 0;
#ifdef FG_CEILING_ZERO_ROWS
            nh[h] = 0;
#endif
          }
#pragma unroll
          for (int j = 0; j < BM / RP; ++j) {
#ifdef FG_CEILING_SELF_ROWS
            const int sr = srs[j] >= 0 ? m->rows[r0 + j * RP] : -1;
#else
            const int sr = srs[j];
#endif
#ifdef FG_CEILING_NO_ROWS
            continue;
#endif
            if constexpr (HS) {
              if (!((live >> ((r0 + j * RP) >> 6)) & 1)) continue;  // its warpgroup skips the tap
            }
            const char* xr = row_addr(xq, (unsigned)max(sr, 0), rowBytes);
#pragma unroll
            for (int h = 0; h < CPT; ++h)
              cp_async16_at(dh[h] + j * RP * BK * (int)sizeof(T), xr + h * TPR * KC * (int)sizeof(T), sr >= 0 ? nh[h] : 0);
          }
          // B: the weight's stage by bulk tensor copies (the tensor core's
          // swizzle is the TMA's 128-byte swizzle; rows past N and columns
          // past Kc arrive as zeros), issued by one thread after its
          // arrival announced their bytes.
#ifdef FG_CEILING_NO_WEIGHT
          if (false) {
#else
          if (pt == 0) {
#endif
            if constexpr (WT) {
#pragma unroll
              for (int b = 0; b < BN / 64; ++b)
                tma_load_3d(bs + b * (BK * 64), &maps.w, (int)n0 + 64 * b, wv, (int)col0, full + s);
            } else {
              tma_load_3d(bs, &maps.w, (int)col0, wv, (int)n0, full + s);
            }
          }
          mbar_arrive_cp_async(full + s);
          FG_TL(2);
        } else {
          // Rows whose bytes are not 16-byte multiples: element copies by
          // plain loads and stores, made visible to wgmma by the proxy
          // fence before the arrival.
          const Raw* xr = reinterpret_cast<const Raw*>(x);
          const Raw* wr = reinterpret_cast<const Raw*>(w);
          Raw* ar = reinterpret_cast<Raw*>(as);
          Raw* br = reinterpret_cast<Raw*>(bs);
          for (int c = pt; c < BM * BK; c += L::kProd) {
            const int i = c / BK, kk = c % BK;
            const int sr = src[i];
            const long long col = col0 + kk;
            ar[C::kOff(i, kk)] = (sr >= 0 && col < p.Kc) ? xr[(long long)sr * p.Kc + col] : Raw(0);
          }
          if constexpr (WT) {
            for (int c = pt; c < BK * BN; c += L::kProd) {
              const int kk = c / BN, nn = c % BN;
              const long long n = n0 + nn, col = col0 + kk;
              br[C::mnOff(kk, nn, C::LdMB)] = (n < p.N && col < p.Kc) ? wr[(col * p.V + wv) * p.N + n] : Raw(0);
            }
          } else {
            for (int c = pt; c < BN * BK; c += L::kProd) {
              const int i = c / BK, kk = c % BK;
              const long long n = n0 + i, col = col0 + kk;
              br[C::kOff(i, kk)] = (n < p.N && col < p.Kc) ? wr[(n * p.V + wv) * p.Kc + col] : Raw(0);
            }
          }
          fence_proxy_async();
          mbar_arrive(full + s);
          if (pt == 0) mbar_arrive(full + s);  // the arrival the bulk copies' thread owes
        }
        if (++kc == nkc) {
          kc = 0;
          ++vi;
        }
        if (++s == S) {
          s = 0;
          parity ^= 1;
        }
      }
      bx = nextTile;
    }
    cp_async_wait<0>();
    FG_TL_FINISH();
    return;
  }

  // ---- consumers ----
  if constexpr (RA) setmaxnreg_inc<kRaConsumerRegs>();
  int s = 0;
  unsigned parity = 0;
#ifdef FG_TIMELINE
  Timeline tl(tid == 0, 1);
#endif
  for (int k = 0;; ++k) {
    Meta* m = meta(k % MB);
    FG_TL(5);
    mbar_wait(&m->full, (k / MB) & 1);
    FG_TL(6);
    const int nIter = m->nIter;
    if (nIter < 0) break;
    if constexpr (SW) {
      if (p.splits != 1 || !p.vec) __trap();  // the engine launches it unsplit on 16-byte rows only
      using CT = TileCfg<C::kMath, 64, C::BM, C::BK, 4, 1, C::S, true>;  // a warpgroup's transposed tile
      float acc[CT::MI][CT::NI][4];
      zero_acc<CT>(acc);
      int prev = -1;
      for (int it = 0; it < nIter; ++it) {
        FG_TL(0);
        mbar_wait(full + s, parity);
        FG_TL(1);
        fence_proxy_async();
        // This warpgroup's 64 columns of the weight (one warpgroup: all):
        // rows 64·wg … of a K-major stage, or the wg-th 64-column block
        // of an MN-major one (WT: wgmma's A transposed), which start at
        // the same element offset, 64·wg·BK.
        const int wcol = kConsWarps == 4 ? 0 : (warp >> 2) * 64;
        wgmma_stage<CT, WT, false>(&acc[0][0][0], smem_addr(Bs + s * L::BSt + wcol * BK), smem_addr(As + s * L::ASt),
                                   WT ? C::kMnLbo : 16, 16);
        wgmma_wait<1>();
        FG_TL(2);
        if (prev >= 0 && lane == 0) mbar_arrive(empty + prev);
        prev = s;
        if (++s == S) {
          s = 0;
          parity ^= 1;
        }
      }
      wgmma_wait<0>();
      pin_acc<CT::MI * CT::NI * 4>(&acc[0][0][0]);
      if (prev >= 0 && lane == 0) mbar_arrive(empty + prev);
      sw_store<CT>(p, acc, m->rows, m->n0, warp, lane);
      FG_TL(7);
      __syncwarp();
      if (lane == 0) mbar_arrive(&m->empty);
      continue;
    }
    float acc[C::MI][C::NI][4];
    zero_acc<C>(acc);
    int prev = -1;
    // After a stage's wgmma group is committed: once the previous stage's
    // group has retired, hand that stage back; then step to the next stage.
    auto hand_back = [&]() {
      wgmma_wait<1>();
      FG_TL(2);
      if (prev >= 0 && lane == 0) mbar_arrive(empty + prev);
      prev = s;
      if (++s == S) {
        s = 0;
        parity ^= 1;
      }
    };
    if constexpr (HS) {
      // One stage: wait until it is full, multiply it (mul) or commit an
      // empty wgmma group (the hand-back below counts groups), and hand
      // the previous stage back once its group has retired.
      auto stage = [&](auto mul) {
        mbar_wait(full + s, parity);
        fence_proxy_async();
        if constexpr (decltype(mul)::value)
          wgmma_stage<C, false, WT>(&acc[0][0][0], smem_addr(As + s * L::ASt + (warp >> 2) * 64 * BK),
                                    smem_addr(Bs + s * L::BSt), 16, C::kMnLbo);
        else
          wgmma_commit();
        hand_back();
      };
      // Bit i of live: this warpgroup multiplies the tile's i-th tap. An
      // unsplit launch's iterations run the taps in order, per stages
      // each; a tap's stages run in one of two loops, so that the loop
      // that multiplies is the plain kernel's.
      unsigned live = ~0u;
      int per = nIter;
      if (p.tbl && p.splits == 1) {
        per = (int)((p.Kc + BK - 1) / BK);
        const int nPos = per > 0 ? nIter / per : 0;
        live = 0;
        for (int i = 0; i < nPos; ++i) live |= (unsigned)rows64_live(index(k % MI)->sources(true, i).offset((warp >> 2) * 64), lane) << i;
      }
      for (int it = 0; it < nIter; live >>= 1) {
        const int end = min(nIter, it + per);
        if (live & 1) {
          for (; it < end; ++it) stage(BoolConst<true>{});
        } else {
          for (; it < end; ++it) stage(BoolConst<false>{});
        }
      }
    } else if constexpr (RA) {
      // This thread's rows of A (its warp's 16 of its warpgroup's 64: g and
      // g + 8) and its column quad t; a ring of R stages of A in
      // registers, each loaded R − 1 stages before it is multiplied: a slot
      // is reloaded once the group that read it has retired (wgmma_wait<1>).
      // Four slots, in the 240 registers the consumers take (setmaxnreg;
      // step 123's two slots under the launch bounds' 168 waited for their
      // loads every stage, and three spilled there).
      if (!p.vec || p.Kc % BK != 0) fail<RA>();  // the engine launches it on whole 32-column chunks only
      const int ra0 = (warp >> 2) * 64 + (warp & 3) * 16 + (lane >> 2), tq = lane & 3;
      const int nkc = (int)((p.Kc + BK - 1) / BK);
      int lpos = 0, lkc = m->kc0;  // the tap position and K chunk of the next stage to load
      constexpr int R = 4;
      unsigned ra[R][2][2][4];  // [slot][row g, g + 8][columns 4t…, 16 + 4t…][4]
      unsigned rm[R][2];        // [slot][row]: the tf32 bits, or 0 for an absent row
      const Index* ix = index(k % MI);
      auto load = [&](unsigned(&a)[2][2][4], unsigned(&am)[2]) {
        const RowSources src = ix->sources(p.tbl, lpos);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int sr = src[ra0 + 8 * h];
          const float* q = x + (long long)max(sr, 0) * p.Kc + lkc * BK + 4 * tq;
          ldg16_if(a[h][0], q, sr >= 0);
          ldg16_if(a[h][1], q + 16, sr >= 0);
          am[h] = sr >= 0 ? 0xffffe000u : 0u;
        }
        if (++lkc == nkc) {
          lkc = 0;
          ++lpos;
        }
      };
      auto stage = [&](const unsigned(&a4)[2][2][4], const unsigned(&am)[2]) {
        mbar_wait(full + s, parity);  // the weight's stage (bulk copies: async proxy, no fence)
        const unsigned long long db = wgmma_desc(smem_addr(Bs + s * L::BSt), 16, 1024);
        // The fragments of the four K steps, in wgmma's register order,
        // written before the fence that orders them before the wgmmas.
        unsigned a[BK / 8][4];
#pragma unroll
        for (int k = 0; k < BK / 8; ++k) {
          const int e = 2 * (k & 1);
          a[k][0] = and_late(a4[0][k >> 1][e], am[0]);
          a[k][1] = and_late(a4[1][k >> 1][e], am[1]);
          a[k][2] = and_late(a4[0][k >> 1][e + 1], am[0]);
          a[k][3] = and_late(a4[1][k >> 1][e + 1], am[1]);
        }
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < BK / 8; ++k) WgmmaTF32RegA<BN>::run(&acc[0][0][0], a[k], db + k * 2);  // 32 bytes of K a step
        wgmma_commit();
        hand_back();
      };
#pragma unroll
      for (int b = 0; b < R - 1; ++b)
        if (b < nIter) load(ra[b], rm[b]);
      for (int it = 0; it < nIter; it += R) {
#pragma unroll
        for (int b = 0; b < R; ++b) {
          if (it + b < nIter) {
            stage(ra[b], rm[b]);
            if (it + b + R - 1 < nIter) load(ra[(b + R - 1) % R], rm[(b + R - 1) % R]);
          }
        }
      }
    } else {
      for (int it = 0; it < nIter; ++it) {
        FG_TL(0);
        mbar_wait(full + s, parity);
        FG_TL(1);
        fence_proxy_async();
        // Warpgroup warp/4 multiplies tile rows 64·(warp/4) ….
        wgmma_stage<C, false, WT>(&acc[0][0][0], smem_addr(As + s * L::ASt + (warp >> 2) * 64 * BK),
                                  smem_addr(Bs + s * L::BSt), 16, C::kMnLbo);
        hand_back();
      }
    }
    wgmma_wait<0>();
    if (prev >= 0 && lane == 0) mbar_arrive(empty + prev);  // the producers may refill it for the next tile
    if (SK && (m->next & 3) != 0) {
      // Stream-K: this warp's accumulators, as float4 runs of its lanes.
      constexpr int kRuns = C::MI * C::NI;
      auto slot = [&](int bb) {
        return reinterpret_cast<float4*>(sk.slots) + ((long long)bb * C::kWarps + warp) * kRuns * 32 + lane;
      };
      if ((m->next & 3) == 1) {
        float4* dst = slot(blockIdx.x);
#pragma unroll
        for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < C::NI; ++ni)
            __stcg(dst + (mi * C::NI + ni) * 32,
                   make_float4(acc[mi][ni][0], acc[mi][ni][1], acc[mi][ni][2], acc[mi][ni][3]));
        __threadfence();
        __syncwarp();
        if (lane == 0) st_release(sk.flags + blockIdx.x * C::kWarps + warp, 1u);
        __syncwarp();
        if (lane == 0) mbar_arrive(&m->empty);
        continue;
      }
      // The tile's end: add the parts that groups first … (this group − 1)
      // stored (the same column tile), in that order, once each has stored
      // this warp's part.
      const int tilesN = (int)((p.N + BN - 1) / BN);
      for (int bb = (m->next >> 2) * tilesN + blockIdx.x % tilesN; bb < blockIdx.x; bb += tilesN) {
        if (lane == 0) {
          long long spins = 0;
          while (ld_acquire(sk.flags + bb * C::kWarps + warp) == 0) {
            if (++spins > (1ll << 26)) fail<RA>();  // a piece never stored: fail, do not hang
            __nanosleep(64);
          }
        }
        __syncwarp();
        const float4* src = slot(bb);
#pragma unroll
        for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < C::NI; ++ni) {
            const float4 v = __ldcg(src + (mi * C::NI + ni) * 32);
            acc[mi][ni][0] += v.x;
            acc[mi][ni][1] += v.y;
            acc[mi][ni][2] += v.z;
            acc[mi][ni][3] += v.w;
          }
      }
    }
    if (!SK && p.split_ctr)
      split_reduce<C, RA>(p, acc, m->rows, m->n0, warp, lane, tid, L::kCons);  // a split launch: one tile per block
    else
      gather_store<C>(p, acc, m->rows, m->n0, m->z, warp, 0, lane);
    FG_TL(7);
    __syncwarp();
    if (lane == 0) mbar_arrive(&m->empty);  // this warp is done with the description
  }
  FG_TL_FINISH();
}

// ws_gather is the body every warp-specialised gather kernel below runs
// after its fg_await_prior_grid(): the tile's descriptions and indices at
// MINB blocks per SM (ws_descriptions, ws_indices; where SMEM is not 0,
// checked against the Go tile table's shared memory, SmemBytes), then
// gather_gemm_ws with the kernel's twin flags.
template <Math M, int BM, int BN, int BK, int WM, int S, int PW, int MINB, int SMEM, bool WT, bool SK, bool HS = false,
          bool RA = false, bool SW = false>
__device__ __forceinline__ void ws_gather(const GatherParams& p, const WsMaps& maps, unsigned* next, const StreamK& sk) {
  using Cfg = TileCfg<M, BM, BN, BK, WM, 1, S, true>;
  constexpr int kDescriptions = ws_descriptions<Cfg, PW>(MINB);
  constexpr int kIndices = ws_indices<Cfg, PW>(MINB);
  static_assert(SMEM == 0 || WsLayout<Cfg, PW, kDescriptions, kIndices>::kSmem == SMEM,
                "shared memory differs from the Go tile table");
  gather_gemm_ws<Cfg, PW, WT, kDescriptions, kIndices, SK, HS, RA, SW>(p, maps, next, sk);
}

}  // namespace fg

// Warp-specialised Hopper gather kernels (tiles.go, Producers = PW, MINB
// blocks per SM): NAME reads the weight as stored, NAME_wt (16-bit
// arithmetics) transposed, and where the block is alone on its SM NAME_sk
// and NAME_wt_sk run stream-K launches. The launch bounds cap every
// thread's registers at the register file over the resident threads, and
// a tile's producer warps are limited by its accumulators. setmaxnreg
// lifts consumers above that cap only in a kernel without a trap (ptxas
// compiles a kernel with one wholly within the cap: session 9 call 2 saw a
// 64×256 wgmma refused under 154 registers; PERF_NOTES step 124): the
// register-A twin below is built that way.
#define FG_GATHER_WS_KERNEL(NAME, MATH, BM, BN, BK, WM, S, PW, MINB, SMEM)                                     \
  extern "C" __global__ void __launch_bounds__(32 * ((WM) + (PW)), MINB)                                       \
      NAME(const fg::GatherParams p, const __grid_constant__ fg::WsMaps maps, unsigned* next) {                \
    fg_await_prior_grid();                                                                                     \
    fg::ws_gather<MATH, BM, BN, BK, WM, S, PW, MINB, SMEM, false, false>(p, maps, next, fg::StreamK{});        \
  }
#define FG_GATHER_WS_WT_KERNEL(NAME, MATH, BM, BN, BK, WM, S, PW, MINB)                                        \
  extern "C" __global__ void __launch_bounds__(32 * ((WM) + (PW)), MINB)                                       \
      NAME##_wt(const fg::GatherParams p, const __grid_constant__ fg::WsMaps maps, unsigned* next) {           \
    fg_await_prior_grid();                                                                                     \
    fg::ws_gather<MATH, BM, BN, BK, WM, S, PW, MINB, 0, true, false>(p, maps, next, fg::StreamK{});            \
  }
// The half-skip twin (kernels.HalfSkipName; the weight as stored).
#define FG_GATHER_WS_HS_KERNEL(NAME, MATH, BM, BN, BK, WM, S, PW, MINB)                                        \
  extern "C" __global__ void __launch_bounds__(32 * ((WM) + (PW)), MINB)                                       \
      NAME(const fg::GatherParams p, const __grid_constant__ fg::WsMaps maps, unsigned* next) {                \
    fg_await_prior_grid();                                                                                     \
    fg::ws_gather<MATH, BM, BN, BK, WM, S, PW, MINB, 0, false, false, true>(p, maps, next, fg::StreamK{});     \
  }
// The register-A twin (kernels.RegisterAName; tf32, the weight as stored):
// two consumer warpgroups and one producer warpgroup, which only describes
// tiles and copies the weight and gives its registers to the consumers
// (setmaxnreg: kRaProducerRegs, kRaConsumerRegs; one block per SM).
#define FG_GATHER_WS_RA_KERNEL(NAME, MATH, BM, BN, BK, WM, S, MINB, SMEM)                                      \
  extern "C" __global__ void __launch_bounds__(32 * ((WM) + 4), MINB)                                          \
      NAME(const fg::GatherParams p, const __grid_constant__ fg::WsMaps maps, unsigned* next) {                \
    fg_await_prior_grid();                                                                                     \
    static_assert((WM) == 8 && (MINB) == 1, "the register budget is two consumer warpgroups' and one producer's"); \
    fg::ws_gather<MATH, BM, BN, BK, WM, S, 4, MINB, SMEM, false, false, false, true>(p, maps, next, fg::StreamK{}); \
  }
// The swapped twins (kernels.SwappedName; 128×64 and 256×128 tiles): a
// consumer warpgroup per 64 columns beside the producers. With WT, the
// twin of NAME_wt (kernels.SwappedTransposedName, 16-bit): the weight read
// transposed, its MN-major stage wgmma's A.
#define FG_GATHER_WS_SW_KERNEL(NAME, MATH, BM, BN, BK, WM, S, PW, MINB, WT)                                    \
  extern "C" __global__ void __launch_bounds__(32 * (4 * (BN) / 64 + (PW)), MINB)                              \
      NAME(const fg::GatherParams p, const __grid_constant__ fg::WsMaps maps, unsigned* next) {                \
    fg_await_prior_grid();                                                                                     \
    fg::ws_gather<MATH, BM, BN, BK, WM, S, PW, MINB, 0, WT, false, false, false, true>(p, maps, next,          \
                                                                                      fg::StreamK{});          \
  }
// The stream-K twins (MINB = 1 only: every block resident; WT as above).
#define FG_GATHER_WS_SK_KERNEL(NAME, MATH, BM, BN, BK, WM, S, PW, WT)                                          \
  extern "C" __global__ void __launch_bounds__(32 * ((WM) + (PW)), 1)                                          \
      NAME(const fg::GatherParams p, const __grid_constant__ fg::WsMaps maps, const fg::StreamK sk) {          \
    fg_await_prior_grid();                                                                                     \
    fg::ws_gather<MATH, BM, BN, BK, WM, S, PW, 1, 0, WT, true>(p, maps, nullptr, sk);                          \
  }
