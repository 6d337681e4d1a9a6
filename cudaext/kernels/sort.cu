// Device-wide primitives of the spatial kernels: exclusive scans, a stable
// LSD radix sort of 32- or 64-bit keys with int32 values, and run-length
// unique of sorted keys. The host sequences the launches (cudaext/sort.go).
//
// Every kernel works on tiles of kTile = 2048 elements, one block of 256
// threads per tile (the grid has one block per tile), so partitions depend
// only on n. A scan of one tile is one launch (scan_tile), and a sort of at
// most kRunSort = 65536 32-bit keys two (sort_runs, sort_merge). The scan
// is reduce → scan of the block sums (one block) → downsweep. A radix
// pass is histogram (per tile and digit) → exclusive scan of the
// digit-major counts → scatter, where each warp ranks its 256 keys in
// index order with __match_any_sync, so the sort is stable and
// deterministic. Up to 256 tiles a pass is one launch: wave_pass (two
// grid-wide barriers) where every tile fits the GPU at once, else
// onesweep_pass (decoupled look-back) after one histogram of every pass's
// digits; above 256 tiles the host runs CUB's onesweep agents instead
// (sort_cub.cuh, included at the end). Integer atomics only count; no
// result depends on their order.
#include <cub/block/block_load.cuh>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>

#include "hashtable.cuh"
#include "pdl.cuh"

namespace fgs {

using fgx::i64;
using fgx::u32;
using fgx::u64;

constexpr int kThreads = 256;
constexpr int kItems = 8;
constexpr int kTile = kThreads * kItems;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxRadix = 512;  // digits of at most 9 bits (cudaext/sort.go sortMaxDigit)
constexpr int kDigitsPerThread = kMaxRadix / kThreads;  // of the per-digit scan
static_assert(kMaxRadix % kThreads == 0, "whole digits per thread");

// part[b] = Σ in[b·kTile : (b+1)·kTile].
template <class In, class Out> __device__ void scan_reduce(const In* in, Out* part, i64 n) {
  using BR = cub::BlockReduce<Out, kThreads>;
  __shared__ typename BR::TempStorage tmp;
  const i64 base = (i64)blockIdx.x * kTile;
  Out s = 0;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const i64 i = base + j * kThreads + threadIdx.x;
    if (i < n) s += (Out)in[i];
  }
  const Out t = BR(tmp).Sum(s);
  if (threadIdx.x == 0) part[blockIdx.x] = t;
}

// Exclusive scan of part[0:nb] in place by one block; *total = Σ part.
template <class Out> __device__ void scan_partials(Out* part, i64 nb, Out* total) {
  using BS = cub::BlockScan<Out, kThreads>;
  __shared__ typename BS::TempStorage tmp;
  __shared__ Out carry;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (i64 base = 0; base < nb; base += kTile) {
    Out v[kItems];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const i64 i = base + (i64)threadIdx.x * kItems + j;
      v[j] = i < nb ? part[i] : Out(0);
    }
    Out agg;
    BS(tmp).ExclusiveSum(v, v, agg);
    const Out c = carry;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const i64 i = base + (i64)threadIdx.x * kItems + j;
      if (i < nb) part[i] = v[j] + c;
    }
    __syncthreads();
    if (threadIdx.x == 0) carry = c + agg;
    __syncthreads();
  }
  if (threadIdx.x == 0 && total) *total = carry;
}

// TileScan is the block-wide load, scan and store of one tile of In
// elements scanned as Out, shared by scan_final and scan_tile.
template <class In, class Out> struct TileScan {
  using BL = cub::BlockLoad<In, kThreads, kItems, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
  using BS = cub::BlockScan<Out, kThreads>;
  using BT = cub::BlockStore<Out, kThreads, kItems, cub::BLOCK_STORE_WARP_TRANSPOSE>;
  union Storage {
    typename BL::TempStorage load;
    typename BS::TempStorage scan;
    typename BT::TempStorage store;
  };
  // load reads the first valid elements at in (zero beyond) into v as
  // Out, blocked, and leaves tmp free for the scan.
  static __device__ __forceinline__ void load(Storage& tmp, const In* in, int valid, Out (&v)[kItems]) {
    In raw[kItems];
    BL(tmp.load).Load(in, raw, valid, In(0));
#pragma unroll
    for (int j = 0; j < kItems; ++j) v[j] = (Out)raw[j];
    __syncthreads();
  }
};

// out[i] = part[b] + Σ in[b·kTile : i] for tile b (in may equal out).
template <class In, class Out> __device__ void scan_final(const In* in, Out* out, const Out* part, i64 n) {
  using TS = TileScan<In, Out>;
  __shared__ typename TS::Storage tmp;
  const i64 base = (i64)blockIdx.x * kTile;
  const int valid = (int)min((i64)kTile, n - base);
  Out v[kItems];
  TS::load(tmp, in + base, valid, v);
  typename TS::BS(tmp.scan).ExclusiveSum(v, v);
  const Out off = part[blockIdx.x];
#pragma unroll
  for (int j = 0; j < kItems; ++j) v[j] += off;
  __syncthreads();
  typename TS::BT(tmp.store).Store(out + base, v, valid);
}

// A scan of one tile (n ≤ kTile) in one launch: out = exclusive prefix
// sums of in (in may equal out), *total = Σ in when total is not null.
template <class In, class Out> __device__ void scan_tile(const In* in, Out* out, i64 n, Out* total) {
  using TS = TileScan<In, Out>;
  __shared__ typename TS::Storage tmp;
  const int valid = (int)min((i64)kTile, n);
  Out v[kItems];
  TS::load(tmp, in, valid, v);
  Out agg;
  typename TS::BS(tmp.scan).ExclusiveSum(v, v, agg);
  __syncthreads();
  typename TS::BT(tmp.store).Store(out, v, valid);
  if (threadIdx.x == 0 && total) *total = agg;
}

// The sort of at most kRunSort 32-bit keys in two launches: sort_runs
// sorts each run of kRun consecutive keys in one block (CUB
// BlockRadixSort, stable) into temporaries, then sort_merge places every
// key: its place in its own run plus, in every other run, the keys that
// sort before it — the smaller ones of later runs (lower bound) and the
// smaller or equal ones of earlier runs (upper bound) — each run loaded
// into shared memory in turn and binary-searched by all threads (with
// many runs, split over blocks that each take a group of the other runs:
// sort_merge_ranks, sort_merge_place). Stable, like the radix passes, so
// both give the same order. H200, a RES 64
// map's 15 K Gray ranks: three radix passes, nine launches and about 80 µs
// of kernels (session 12's phase profiles); one CUB block sorting all of
// them 91 µs (session 13, call 2); a sort by counting (each key's place
// from comparisons with every key) 150 µs (call 3); these two launches
// 32 µs (call 4).
constexpr int kRunThreads = 256, kRunItems = 4, kRun = kRunThreads * kRunItems;
constexpr int kRunSort = 64 * kRun;  // cudaext/sort.go runSort
static_assert(kRun == 1024 && kRunSort == 65536 && kRunThreads == kThreads,
              "cudaext/sort.go runSortRun, runSort and sortThreads mirror kRun, kRunSort and kRunThreads");

__device__ void sort_runs(const u32* keys, const int* vals, int n, int bits, bool iota, u32* runK, int* runV) {
  using BRS = cub::BlockRadixSort<u32, kRunThreads, kRunItems, int>;
  __shared__ typename BRS::TempStorage tmp;
  const int base = blockIdx.x * kRun;
  u32 k[kRunItems];
  int v[kRunItems];
#pragma unroll
  for (int j = 0; j < kRunItems; ++j) {
    // Blocked arrangement (stability); the padding sorts last.
    const int i = base + (int)threadIdx.x * kRunItems + j;
    k[j] = i < n ? keys[i] : ~0u;
    v[j] = i < n ? (iota ? i : vals ? vals[i] : 0) : 0;
  }
  BRS(tmp).Sort(k, v, 0, bits);
#pragma unroll
  for (int j = 0; j < kRunItems; ++j) {
    const int i = base + (int)threadIdx.x * kRunItems + j;
    if (i < n) {
      runK[i] = k[j];
      runV[i] = v[j];
    }
  }
}

// merge_rank returns, for key k of run r (live: a key, not padding), the
// keys of runs q0, q0 + step, … (other than r) that sort before it: the
// smaller ones of later runs (lower bound) and the smaller or equal ones
// of earlier runs (upper bound), each run loaded into shared memory in
// turn and binary-searched by all kRun threads of the block.
__device__ int merge_rank(const u32* runK, int n, int r, int q0, int step, u32 k) {
  __shared__ u32 other[kRun];
  const int runs = (n + kRun - 1) / kRun;
  int rank = 0;
  for (int q = q0; q < runs; q += step) {
    if (q == r) continue;
    const int m = min(kRun, n - q * kRun);
    __syncthreads();
    if ((int)threadIdx.x < m) other[threadIdx.x] = runK[q * kRun + threadIdx.x];
    __syncthreads();
    const bool earlier = q < r;
    int lo = 0, hi = m;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      const u32 o = other[mid];
      if (o < k || (earlier && o == k)) lo = mid + 1; else hi = mid;
    }
    rank += lo;
  }
  return rank;
}

// sort_merge runs a block of kRun threads per run; thread t places key t of
// its run.
__device__ void sort_merge(const u32* runK, const int* runV, int n, u32* keys, int* vals) {
  const int r = blockIdx.x;
  const int i = r * kRun + (int)threadIdx.x;
  const bool live = i < n;
  const u32 k = live ? runK[i] : 0;
  const int rank = (int)threadIdx.x + merge_rank(runK, n, r, 0, 1, k);
  if (live) {
    keys[rank] = k;
    if (vals) vals[rank] = runV[i];
  }
}

// sort_merge's work split over groups of the other runs, for more runs
// than a wave of blocks should take one at a time: block (r, g) writes
// part[g·n + i], the keys of runs g, g + groups, … that sort before key i
// of run r (plus its place in its own run for g = 0); sort_merge_place
// then sums a key's groups in order and places it. The same places as
// sort_merge: integer sums, no atomics.
__device__ void sort_merge_ranks(const u32* runK, int n, int groups, int* part) {
  const int r = blockIdx.x, g = blockIdx.y;
  const int i = r * kRun + (int)threadIdx.x;
  const bool live = i < n;
  const u32 k = live ? runK[i] : 0;
  const int rank = (g == 0 ? (int)threadIdx.x : 0) + merge_rank(runK, n, r, g, groups, k);
  if (live) part[(i64)g * n + i] = rank;
}

__device__ void sort_merge_place(const u32* runK, const int* runV, const int* part, int n, int groups, u32* keys,
                                 int* vals) {
  for (i64 i = fgx::gtid(); i < n; i += fgx::gstride()) {
    int rank = 0;
    for (int g = 0; g < groups; ++g) rank += part[(i64)g * n + i];
    keys[rank] = runK[i];
    if (vals) vals[rank] = runV[i];
  }
}

// counts[d·ntiles + tile] = number of keys of the tile with digit d.
template <class K> __device__ void radix_hist(const K* keys, i64 n, int shift, int bits, int* counts, i64 ntiles) {
  __shared__ int h[kMaxRadix];
  const int radix = 1 << bits;
  for (int d = threadIdx.x; d < radix; d += kThreads) h[d] = 0;
  __syncthreads();
  const i64 base = (i64)blockIdx.x * kTile;
  const K mask = (K)(radix - 1);
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const i64 i = base + j * kThreads + threadIdx.x;
    if (i < n) atomicAdd(&h[(int)((keys[i] >> shift) & mask)], 1);
  }
  __syncthreads();
  for (int d = threadIdx.x; d < radix; d += kThreads) counts[(i64)d * ntiles + blockIdx.x] = h[d];
}

// The shared memory of a scatter pass over one tile: per-warp digit
// counts, a per-digit offset and the tile's keys and values in digit
// order.
template <class K> struct ScatterTile {
  using BS = cub::BlockScan<int, kThreads>;
  int whist[kWarps][kMaxRadix];
  // off[d]: the tile's first position of digit d while rank_tile places
  // the keys; then where that position goes, minus it (the caller's).
  int off[kMaxRadix];
  K keys[kTile];
  int vals[kTile];
  typename BS::TempStorage scan;
};

// rank_tile loads the tile of keys starting at base (values vin, or the
// keys' positions where vin is null) and places them stably by digit
// (bits bits from shift) into s.keys / s.vals: each warp ranks its 256
// keys in index order with __match_any_sync. total and start are the
// tile's count and first position of the digits thread t owns (t ·
// kDigitsPerThread …), zero beyond the radix. Ends with a barrier.
template <class K>
__device__ void rank_tile(ScatterTile<K>& s, const K* kin, const int* vin, i64 n, i64 base, int shift, int bits,
                          int (&total)[kDigitsPerThread], int (&start)[kDigitsPerThread]) {
  const int radix = 1 << bits;
  const K mask = (K)(radix - 1);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const u32 lt = (1u << lane) - 1;
  for (int e = threadIdx.x; e < kWarps * kMaxRadix; e += kThreads) (&s.whist[0][0])[e] = 0;
  __syncthreads();

  K key[kItems];
  int dig[kItems], rank[kItems], val[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const i64 i = base + warp * (32 * kItems) + j * 32 + lane;
    const bool valid = i < n;
    key[j] = valid ? kin[i] : K(0);
    val[j] = valid ? (vin ? vin[i] : (int)i) : 0;
    const int d = valid ? (int)((key[j] >> shift) & mask) : kMaxRadix;
    const u32 peers = __match_any_sync(0xffffffffu, d);
    const int before = valid ? s.whist[warp][d] : 0;
    rank[j] = before + __popc(peers & lt);
    __syncwarp();
    if (valid && lane == __ffs(peers) - 1) s.whist[warp][d] = before + __popc(peers);
    __syncwarp();
    dig[j] = d;
  }
  __syncthreads();
  // Per digit (kDigitsPerThread consecutive digits a thread): exclusive
  // prefix over warps, tile total.
#pragma unroll
  for (int e = 0; e < kDigitsPerThread; ++e) {
    const int d = threadIdx.x * kDigitsPerThread + e;
    total[e] = 0;
    if (d < radix) {
      for (int w = 0; w < kWarps; ++w) {
        const int c = s.whist[w][d];
        s.whist[w][d] = total[e];
        total[e] += c;
      }
    }
  }
  typename ScatterTile<K>::BS(s.scan).ExclusiveSum(total, start);
#pragma unroll
  for (int e = 0; e < kDigitsPerThread; ++e) {
    const int d = threadIdx.x * kDigitsPerThread + e;
    if (d < radix) s.off[d] = start[e];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int d = dig[j];
    if (d < kMaxRadix) {
      const int pos = s.off[d] + s.whist[warp][d] + rank[j];
      s.keys[pos] = key[j];
      s.vals[pos] = val[j];
    }
  }
  __syncthreads();
}

// write_tile stores the nv placed keys (and values, unless vout is null)
// of s at s.off[digit] + their position in the tile.
template <class K> __device__ void write_tile(const ScatterTile<K>& s, K* kout, int* vout, int nv, int shift, int bits) {
  const K mask = (K)((1 << bits) - 1);
  for (int p = threadIdx.x; p < nv; p += kThreads) {
    const K k = s.keys[p];
    const i64 out = (i64)s.off[(int)((k >> shift) & mask)] + p;
    kout[out] = k;
    if (vout) vout[out] = s.vals[p];
  }
}

// One stable scatter pass. offs is the exclusive scan of radix_hist's
// counts. vin == nullptr means value = index; vout == nullptr drops values.
template <class K>
__device__ void radix_scatter(const K* kin, const int* vin, K* kout, int* vout, i64 n, int shift, int bits,
                              const int* offs, i64 ntiles) {
  __shared__ ScatterTile<K> s;
  const i64 base = (i64)blockIdx.x * kTile;
  int total[kDigitsPerThread], start[kDigitsPerThread];
  rank_tile(s, kin, vin, n, base, shift, bits, total, start);
  const int radix = 1 << bits;
#pragma unroll
  for (int e = 0; e < kDigitsPerThread; ++e) {
    const int d = threadIdx.x * kDigitsPerThread + e;
    if (d < radix) s.off[d] = offs[(i64)d * ntiles + blockIdx.x] - start[e];
  }
  __syncthreads();
  write_tile(s, kout, vout, (int)min((i64)kTile, n - base), shift, bits);
}

// The single-pass ("onesweep") radix sort: one histogram launch counts
// the digits of every pass at once (onesweep_hist), then each pass is one
// launch (onesweep_pass) whose tiles find where their digits go by
// decoupled look-back instead of a histogram, a scan and a scatter
// launch per pass: 1 + passes launches against 5 per pass. Tiles take
// their index from a counter in the order they start, so every tile a
// tile looks back at has started and publishes without waiting for
// anyone: no deadlock whatever the block scheduler does. Each tile
// publishes, per digit, a 32-bit word: its count with kAggregate, and
// after its look-back the count of the digit in it and every earlier
// tile with kInclusive (tile 0 at once); a zero word is not yet
// published, so counts must stay below 2^30 (cudaext/sort.go
// onesweepMaxTiles keeps them far below). The look-back sums integers: the order is the
// classic passes' (stable), whatever the timing.
constexpr int kMaxPasses = 8;  // 64-bit keys in digits of at least 8 bits
constexpr u32 kAggregate = 1u << 30, kInclusive = 1u << 31, kCountBits = kAggregate - 1;

// counts[p·kMaxRadix + d] += keys whose digit p (width bits from p·width,
// the last pass the remaining bits below nbits) is d. counts must be
// zero before the launch; grid-stride over the keys. (Warp-aggregated
// adds, __match_any_sync per key and pass, were 2–2.5× slower on the
// H200: session 21, call 2.)
template <class K> __device__ void onesweep_hist(const K* keys, i64 n, int passes, int width, int nbits, int* counts) {
  __shared__ int h[kMaxPasses][kMaxRadix];
  for (int e = threadIdx.x; e < passes * kMaxRadix; e += kThreads) (&h[0][0])[e] = 0;
  __syncthreads();
  for (i64 i = fgx::gtid(); i < n; i += fgx::gstride()) {
    const K k = keys[i];
    for (int p = 0; p < passes; ++p) {
      const int shift = p * width, bits = min(width, nbits - shift);
      atomicAdd(&h[p][(int)((k >> shift) & (K)((1 << bits) - 1))], 1);
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < passes * kMaxRadix; e += kThreads) {
    const int c = (&h[0][0])[e];
    if (c) atomicAdd(&counts[e], c);
  }
}

// One pass of the onesweep sort: counts is the pass's row of
// onesweep_hist, status its ntiles × 2^bits words (zero before the
// launch), ticket its tile counter (zero before the launch).
template <class K>
__device__ void onesweep_pass(const K* kin, const int* vin, K* kout, int* vout, i64 n, int shift, int bits,
                              const int* counts, u32* status, int* ticket) {
  __shared__ ScatterTile<K> s;
  __shared__ int tile_s;
  if (threadIdx.x == 0) tile_s = atomicAdd(ticket, 1);
  __syncthreads();
  const int tile = tile_s;
  const i64 base = (i64)tile * kTile;
  const int radix = 1 << bits;
  int total[kDigitsPerThread], start[kDigitsPerThread];
  rank_tile(s, kin, vin, n, base, shift, bits, total, start);
  volatile u32* mine = status + (i64)tile * radix;
#pragma unroll
  for (int e = 0; e < kDigitsPerThread; ++e) {
    const int d = threadIdx.x * kDigitsPerThread + e;
    if (d < radix) mine[d] = (tile == 0 ? kInclusive : kAggregate) | (u32)total[e];
  }
  // Where each digit starts in the output: the scan of the pass's counts.
  int cnt[kDigitsPerThread], first[kDigitsPerThread];
#pragma unroll
  for (int e = 0; e < kDigitsPerThread; ++e) {
    const int d = threadIdx.x * kDigitsPerThread + e;
    cnt[e] = d < radix ? counts[d] : 0;
  }
  typename ScatterTile<K>::BS(s.scan).ExclusiveSum(cnt, first);
  // Look back one tile at a time per digit. (Sixteen tiles per step, the
  // loads in flight together, made the pass slower on the H200: the
  // polls of unpublished words cost more than the walk saved; session 21,
  // call 2.)
#pragma unroll
  for (int e = 0; e < kDigitsPerThread; ++e) {
    const int d = threadIdx.x * kDigitsPerThread + e;
    if (d >= radix) continue;
    u32 before = 0;
    if (tile > 0) {
      const volatile u32* col = status + d;
      for (i64 j = tile - 1;; --j) {
        u32 w;
        do {
          w = col[j * radix];
        } while (w == 0);
        before += w & kCountBits;
        if (w & kInclusive) break;
      }
      mine[d] = kInclusive | (before + (u32)total[e]);
    }
    s.off[d] = first[e] + (int)before - start[e];
  }
  __syncthreads();
  write_tile(s, kout, vout, (int)min((i64)kTile, n - base), shift, bits);
}

// The one-wave radix pass (sort_wave_*): for as many tiles as are
// resident on the GPU at once (cudaext/sort.go waveTiles; the host uses it
// up to 256 tiles), one launch per pass and no look-back. Each tile ranks
// its keys (rank_tile) and publishes its digit counts; after a grid-wide barrier, warps spread over
// the blocks scan one digit column each (the digit's counts in tile order)
// into every tile's exclusive prefix and the digit's total; after a second
// barrier every tile adds the exclusive scan of the totals (where each
// digit starts) and writes its keys. The onesweep's look-back instead
// walks one tile at a time per digit, as long as the tiles in flight
// (17–28 µs a pass at 124–489 tiles on the H200). Integer sums in a fixed
// order: the classic passes' stable order, whatever the timing. The
// barriers are safe only because every block is resident: the host
// launches at most the blocks that fit and never beside other work that
// waits for SMs (see waveTiles).

// grid_barrier waits, with the whole block, until target arrivals have
// reached *bar (this block's arrival included). The fences make every
// write of the blocks before their arrival visible to the reads after the
// wait; those reads must not come from L1 (__ldcg).
__device__ __forceinline__ void grid_barrier(unsigned* bar, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(bar, 1u);
    while (*reinterpret_cast<volatile unsigned*>(bar) < target) {
    }
    __threadfence();
  }
  __syncthreads();
}

// One pass of the one-wave sort: counts holds gridDim.x × 2^bits words,
// totals 2^bits, and bar counts the arrivals of this launch's barriers
// from arrived on (the host zeroes it once per sort; pass p starts at
// 2·p·gridDim.x).
template <class K>
__device__ void wave_pass(const K* kin, const int* vin, K* kout, int* vout, i64 n, int shift, int bits,
                          u32* counts, u32* totals, unsigned* bar, unsigned arrived) {
  __shared__ ScatterTile<K> s;
  const int tile = blockIdx.x, ntiles = gridDim.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const i64 base = (i64)tile * kTile;
  const int radix = 1 << bits;
  int total[kDigitsPerThread], start[kDigitsPerThread];
  rank_tile(s, kin, vin, n, base, shift, bits, total, start);
  u32* mine = counts + (i64)tile * radix;
#pragma unroll
  for (int e = 0; e < kDigitsPerThread; ++e) {
    const int d = threadIdx.x * kDigitsPerThread + e;
    if (d < radix) mine[d] = (u32)total[e];
  }
  grid_barrier(bar, arrived + ntiles);
  // Digit columns, a warp each: counts → exclusive prefixes over tiles.
  for (int d = tile * kWarps + warp; d < radix; d += ntiles * kWarps) {
    u32 carry = 0;
    for (int j0 = 0; j0 < ntiles; j0 += 32) {
      const int j = j0 + lane;
      const u32 c = j < ntiles ? __ldcg(counts + (i64)j * radix + d) : 0;
      u32 x = c;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const u32 y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
      }
      if (j < ntiles) counts[(i64)j * radix + d] = carry + x - c;
      carry += __shfl_sync(0xffffffffu, x, 31);
    }
    if (lane == 0) totals[d] = carry;
  }
  grid_barrier(bar, arrived + 2 * ntiles);
  int cnt[kDigitsPerThread], first[kDigitsPerThread];
#pragma unroll
  for (int e = 0; e < kDigitsPerThread; ++e) {
    const int d = threadIdx.x * kDigitsPerThread + e;
    cnt[e] = d < radix ? (int)__ldcg(totals + d) : 0;
  }
  typename ScatterTile<K>::BS(s.scan).ExclusiveSum(cnt, first);
#pragma unroll
  for (int e = 0; e < kDigitsPerThread; ++e) {
    const int d = threadIdx.x * kDigitsPerThread + e;
    if (d < radix) s.off[d] = first[e] + (int)__ldcg(mine + d) - start[e];
  }
  __syncthreads();
  write_tile(s, kout, vout, (int)min((i64)kTile, n - base), shift, bits);
}

// keep[i] = keys[i] != sentinel && (i == 0 || keys[i] != keys[i−1]).
template <class K> __device__ __forceinline__ int first_of_run(const K* keys, i64 i, K sentinel) {
  const K k = keys[i];
  return k != sentinel && (i == 0 || keys[i - 1] != k);
}

template <class K> __device__ void unique_flags(const K* keys, i64 n, K sentinel, int* flags) {
  for (i64 i = fgx::gtid(); i < n; i += fgx::gstride()) flags[i] = first_of_run(keys, i, sentinel);
}

// out[pos[i]] = keys[i] for the first key of every run (pos = scanned flags).
template <class K> __device__ void unique_write(const K* keys, const int* pos, i64 n, K sentinel, K* out) {
  for (i64 i = fgx::gtid(); i < n; i += fgx::gstride())
    if (first_of_run(keys, i, sentinel)) out[pos[i]] = keys[i];
}

}  // namespace fgs

extern "C" {

__global__ void __launch_bounds__(fgs::kThreads) scan_reduce_i32_i32(const int* in, int* part, long long n) {
  fg_await_prior_grid();
  fgs::scan_reduce(in, part, n);
}
__global__ void __launch_bounds__(fgs::kThreads) scan_reduce_i32_i64(const int* in, long long* part, long long n) {
  fg_await_prior_grid();
  fgs::scan_reduce(in, part, n);
}
__global__ void __launch_bounds__(fgs::kThreads) scan_reduce_i64_i64(const long long* in, long long* part, long long n) {
  fg_await_prior_grid();
  fgs::scan_reduce(in, part, n);
}
__global__ void __launch_bounds__(fgs::kThreads) scan_partials_i32(int* part, long long nb, int* total) {
  fg_await_prior_grid();
  fgs::scan_partials(part, nb, total);
}
__global__ void __launch_bounds__(fgs::kThreads) scan_partials_i64(long long* part, long long nb, long long* total) {
  fg_await_prior_grid();
  fgs::scan_partials(part, nb, total);
}
__global__ void __launch_bounds__(fgs::kThreads) scan_final_i32_i32(const int* in, int* out, const int* part, long long n) {
  fg_await_prior_grid();
  fgs::scan_final(in, out, part, n);
}
__global__ void __launch_bounds__(fgs::kThreads)
    scan_final_i32_i64(const int* in, long long* out, const long long* part, long long n) {
  fg_await_prior_grid();
  fgs::scan_final(in, out, part, n);
}
__global__ void __launch_bounds__(fgs::kThreads)
    scan_final_i64_i64(const long long* in, long long* out, const long long* part, long long n) {
  fg_await_prior_grid();
  fgs::scan_final(in, out, part, n);
}

__global__ void __launch_bounds__(fgs::kThreads)
    sort_hist_u32(const unsigned* keys, long long n, int shift, int bits, int* counts, long long ntiles) {
  fg_await_prior_grid();
  fgs::radix_hist(keys, n, shift, bits, counts, ntiles);
}
__global__ void __launch_bounds__(fgs::kThreads) sort_hist_u64(const unsigned long long* keys, long long n, int shift,
                                                              int bits, int* counts, long long ntiles) {
  fg_await_prior_grid();
  fgs::radix_hist(keys, n, shift, bits, counts, ntiles);
}
__global__ void __launch_bounds__(fgs::kThreads)
    sort_scatter_u32(const unsigned* kin, const int* vin, unsigned* kout, int* vout, long long n, int shift, int bits,
                     const int* offs, long long ntiles) {
  fg_await_prior_grid();
  fgs::radix_scatter(kin, vin, kout, vout, n, shift, bits, offs, ntiles);
}
__global__ void __launch_bounds__(fgs::kThreads)
    sort_scatter_u64(const unsigned long long* kin, const int* vin, unsigned long long* kout, int* vout, long long n,
                     int shift, int bits, const int* offs, long long ntiles) {
  fg_await_prior_grid();
  fgs::radix_scatter(kin, vin, kout, vout, n, shift, bits, offs, ntiles);
}

__global__ void __launch_bounds__(fgs::kThreads)
    sort_onesweep_hist_u32(const unsigned* keys, long long n, int passes, int width, int nbits, int* counts) {
  fg_await_prior_grid();
  fgs::onesweep_hist(keys, n, passes, width, nbits, counts);
}
__global__ void __launch_bounds__(fgs::kThreads) sort_onesweep_hist_u64(const unsigned long long* keys, long long n,
                                                                       int passes, int width, int nbits, int* counts) {
  fg_await_prior_grid();
  fgs::onesweep_hist(keys, n, passes, width, nbits, counts);
}
__global__ void __launch_bounds__(fgs::kThreads)
    sort_onesweep_u32(const unsigned* kin, const int* vin, unsigned* kout, int* vout, long long n, int shift, int bits,
                      const int* counts, unsigned* status, int* ticket) {
  fg_await_prior_grid();
  fgs::onesweep_pass(kin, vin, kout, vout, n, shift, bits, counts, status, ticket);
}
__global__ void __launch_bounds__(fgs::kThreads)
    sort_onesweep_u64(const unsigned long long* kin, const int* vin, unsigned long long* kout, int* vout, long long n,
                      int shift, int bits, const int* counts, unsigned* status, int* ticket) {
  fg_await_prior_grid();
  fgs::onesweep_pass(kin, vin, kout, vout, n, shift, bits, counts, status, ticket);
}

__global__ void __launch_bounds__(fgs::kThreads)
    sort_wave_u32(const unsigned* kin, const int* vin, unsigned* kout, int* vout, long long n, int shift, int bits,
                  unsigned* counts, unsigned* totals, unsigned* bar, unsigned arrived) {
  fg_await_prior_grid();
  fgs::wave_pass(kin, vin, kout, vout, n, shift, bits, counts, totals, bar, arrived);
}
__global__ void __launch_bounds__(fgs::kThreads)
    sort_wave_u64(const unsigned long long* kin, const int* vin, unsigned long long* kout, int* vout, long long n,
                  int shift, int bits, unsigned* counts, unsigned* totals, unsigned* bar, unsigned arrived) {
  fg_await_prior_grid();
  fgs::wave_pass(kin, vin, kout, vout, n, shift, bits, counts, totals, bar, arrived);
}

__global__ void sort_unique_flags_u32(const unsigned* keys, long long n, unsigned sentinel, int* flags) {
  fg_await_prior_grid();
  fgs::unique_flags(keys, n, sentinel, flags);
}
__global__ void sort_unique_flags_u64(const unsigned long long* keys, long long n, unsigned long long sentinel,
                                      int* flags) {
  fg_await_prior_grid();
  fgs::unique_flags(keys, n, sentinel, flags);
}
__global__ void sort_unique_write_u32(const unsigned* keys, const int* pos, long long n, unsigned sentinel,
                                      unsigned* out) {
  fg_await_prior_grid();
  fgs::unique_write(keys, pos, n, sentinel, out);
}
__global__ void sort_unique_write_u64(const unsigned long long* keys, const int* pos, long long n,
                                      unsigned long long sentinel, unsigned long long* out) {
  fg_await_prior_grid();
  fgs::unique_write(keys, pos, n, sentinel, out);
}

__global__ void __launch_bounds__(fgs::kThreads) scan_tile_i32_i32(const int* in, int* out, long long n, int* total) {
  fg_await_prior_grid();
  fgs::scan_tile(in, out, n, total);
}
__global__ void __launch_bounds__(fgs::kThreads)
    scan_tile_i32_i64(const int* in, long long* out, long long n, long long* total) {
  fg_await_prior_grid();
  fgs::scan_tile(in, out, n, total);
}
__global__ void __launch_bounds__(fgs::kThreads)
    scan_tile_i64_i64(const long long* in, long long* out, long long n, long long* total) {
  fg_await_prior_grid();
  fgs::scan_tile(in, out, n, total);
}
__global__ void __launch_bounds__(fgs::kRunThreads) sort_runs_u32(const unsigned* keys, const int* vals, long long n,
                                                                  int bits, int iota, unsigned* runK, int* runV) {
  fg_await_prior_grid();
  fgs::sort_runs(keys, vals, (int)n, bits, iota != 0, runK, runV);
}
__global__ void __launch_bounds__(fgs::kRun) sort_merge_u32(const unsigned* runK, const int* runV, long long n,
                                                            unsigned* keys, int* vals) {
  fg_await_prior_grid();
  fgs::sort_merge(runK, runV, (int)n, keys, vals);
}
__global__ void __launch_bounds__(fgs::kRun) sort_merge_ranks_u32(const unsigned* runK, long long n, int groups,
                                                                  int* part) {
  fg_await_prior_grid();
  fgs::sort_merge_ranks(runK, (int)n, groups, part);
}
__global__ void sort_merge_place_u32(const unsigned* runK, const int* runV, const int* part, long long n, int groups,
                                     unsigned* keys, int* vals) {
  fg_await_prior_grid();
  fgs::sort_merge_place(runK, runV, part, (int)n, groups, keys, vals);
}

// out[i] = i for i < n.
__global__ void sort_iota_i32(int* out, long long n) {
  fg_await_prior_grid();
  for (long long i = fgx::gtid(); i < n; i += fgx::gstride()) out[i] = (int)i;
}

// out[i] = (uint64) in[i] (widen 32-bit keys).
__global__ void sort_widen_u32(const unsigned* in, unsigned long long* out, long long n) {
  fg_await_prior_grid();
  for (long long i = fgx::gtid(); i < n; i += fgx::gstride()) out[i] = in[i];
}

}  // extern "C"

// The onesweep sort of many tiles on CUB's agents (Device.cubSort).
#include "sort_cub.cuh"
