// Neighbour bitmasks, Gray-code ranks and per-tile tap unions of the masked
// implicit GEMM (kmap.Masked and kmap.Tiles on the GPU; host side in
// cudaext/kmapgpu.go).
//
//   masks_build      mask[r·W + w] bit b = table[r, 64w + b] ≥ 0, and,
//                    when cnt is non-null, cnt[v] += the rows with tap v
//                    (integer atomics: deterministic). For W == 1 (V ≤ 64)
//                    each warp takes 32 rows: it reads their 32·V entries
//                    coalesced, one ballot per 32 entries into a bit string
//                    in shared memory, and lane i cuts row i's V bits out
//                    of it; the counts are ballots over the warp's masks
//   masks_key_taps   one block: key_taps[b] = the tap read as bit b of the
//                    Gray key: from the counts (kmap.KeyTaps: the least
//                    even splits of the rows first, ties in tap order), or
//                    b when cnt is null (table order); for V ≤ 32 also
//                    byte_key[j][x], the key bits that value x of mask byte
//                    j sets
//   masks_rank       the rank of each row's key (bit b = mask bit
//                    key_taps[b]) in the reflected Gray sequence (bit j of
//                    the rank = XOR of the key bits ≥ j, across words);
//                    with W == 1 and V ≤ 32 written as uint32, the key
//                    then four byte_key lookups. Dynamic shared memory: V
//                    ints
//   masks_word       keys[j] = rank[order[j]·W + w] (one LSD word pass)
//   masks_union      OR of the masks of each tile of `rows` consecutive
//                    entries of the order, a warp per tile; cnt[tile] =
//                    its popcount
//   masks_taps       the set bits of each union, ascending, at seg[tile]
//   masks_sched_keys keys[tile] = V − the tile's tap count, to sort the
//                    tiles longest first (the gathers' tile_sched)
//   masks_sched_rows keys[tile] = the tile's first row (table order), to
//                    sort the tiles by where their rows lie
//   masks_hybrid_count, masks_hybrid_taps, masks_hybrid_fill,
//   masks_hybrid_tiles  a hybrid gather's split of each tile's taps into
//                    dense (masked) and sparse (per-tap slots) and the
//                    slot tables of the sparse pairs (see "hybrid gathers"
//                    below)
//   masks_regroup32  the order regrouped in place window by window
//   masks_regroup64  (kmap.RegroupWindow), a 256-thread block per window
//                    of kRegroupWindow rows, W == 1: 32-bit masks
//                    (V ≤ 32) or 64-bit
//   masks_regroup{32,64}_t{512,1024}  the same with 512- or 1,024-thread
//                    blocks (an experiment: fewer classes per thread in
//                    the greedy's block-wide passes)
#include "gray.cuh"
#include "hashtable.cuh"
#include "pdl.cuh"

namespace fgm {

using namespace fgx;

constexpr int kBuildWarps = 8;  // masks_build runs 256-thread blocks

// add_counts adds a block's per-tap counts (shared, V entries) to cnt
// once every thread of the block is done with them.
__device__ __forceinline__ void add_counts(const u32* shared, int V, u32* cnt) {
  __syncthreads();
  for (int v = threadIdx.x; v < V; v += blockDim.x)
    if (shared[v]) atomicAdd(cnt + v, shared[v]);
}

// build1 is build for W == 1. The loops are warp-uniform (r0 is the same
// for the 32 lanes), so every lane reaches every ballot and __syncwarp.
__device__ void build1(const int* table, i64 rows, int V, u64* mask, u32* cnt) {
  __shared__ u32 bits[kBuildWarps][64 + 2];  // 32·V bits, two zero words of slack
  __shared__ u32 counts[64];
  const int lane = threadIdx.x & 31;
  if (cnt) {
    for (int v = threadIdx.x; v < V; v += blockDim.x) counts[v] = 0;
    __syncthreads();
  }
  u32 mine[2] = {0, 0};  // lane's counts of taps lane and lane + 32
  u32* b = bits[(threadIdx.x >> 5) % kBuildWarps];
  const i64 warps = gstride() >> 5;
  for (i64 r0 = (gtid() >> 5) << 5; r0 < rows; r0 += warps << 5) {
    const int nr = (int)min((i64)32, rows - r0);
    const int entries = nr * V;  // of this group
    const int* base = table + r0 * V;
#pragma unroll 4
    for (int k = 0; k < V; ++k) {
      const int e = 32 * k + lane;
      const unsigned hit = __ballot_sync(0xffffffffu, e < entries && base[e] >= 0);
      if (lane == 0) b[k] = hit;
    }
    if (lane < 2) b[V + lane] = 0;
    __syncwarp();
    u64 m = 0;
    if (lane < nr) {
      const int p = lane * V, w = p >> 5, s = p & 31;
      const u64 lo = (u64)b[w] | ((u64)b[w + 1] << 32);
      m = lo >> s;
      if (s) m |= (u64)b[w + 2] << (64 - s);
      if (V < 64) m &= (1ull << V) - 1;
      mask[r0 + lane] = m;
    }
    if (cnt) {
      for (int v = 0; v < V; ++v) {
        const u32 c = __popc(__ballot_sync(0xffffffffu, m >> v & 1));
        if ((v & 31) == lane) mine[v >> 5] += c;
      }
    }
    __syncwarp();
  }
  if (cnt) {
    if (lane < V && mine[0]) atomicAdd(counts + lane, mine[0]);
    if (lane + 32 < V && mine[1]) atomicAdd(counts + lane + 32, mine[1]);
    add_counts(counts, V, cnt);
  }
}

// build is masks_build; counts (dynamic shared memory, V entries) is used
// when W > 1 and cnt is non-null.
__device__ void build(const int* table, i64 rows, int V, int W, u64* mask, u32* cnt) {
  if (W == 1 && blockDim.x == 32 * kBuildWarps) {
    build1(table, rows, V, mask, cnt);
    return;
  }
  extern __shared__ u32 counts[];
  if (cnt) {
    for (int v = threadIdx.x; v < V; v += blockDim.x) counts[v] = 0;
    __syncthreads();
  }
  for (i64 r = gtid(); r < rows; r += gstride()) {
    const int* row = table + r * V;
    for (int w = 0; w < W; ++w) {
      u64 m = 0;
      const int v0 = 64 * w, v1 = min(V, v0 + 64);
      for (int v = v0; v < v1; ++v)
        if (row[v] >= 0) {
          m |= 1ull << (v - v0);
          if (cnt) atomicAdd(counts + v, 1u);
        }
      mask[r * W + w] = m;
    }
  }
  if (cnt) add_counts(counts, V, cnt);
}

// key_taps is masks_key_taps (one block): tap v's key bit is the number
// of taps that split the rows less evenly, or as unevenly with a lower
// index.
__device__ void key_taps(const u32* cnt, int V, i64 rows, int* out, u32* byte_key) {
  extern __shared__ int tapS[];  // V
  auto uneven = [&](int v) {
    const i64 d = 2 * (i64)cnt[v] - rows;
    return d < 0 ? -d : d;
  };
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    int bit = v;
    if (cnt) {
      const i64 ev = uneven(v);
      bit = 0;
      for (int u = 0; u < V; ++u) {
        const i64 eu = uneven(u);
        bit += eu > ev || (eu == ev && u < v);
      }
    }
    out[bit] = v;
    tapS[bit] = v;
  }
  if (!byte_key) return;
  __syncthreads();
  for (int e = threadIdx.x; e < 4 * 256; e += blockDim.x) {
    const int j = e >> 8, x = e & 255;
    u32 key = 0;
    for (int b = 0; b < V; ++b) {
      const int v = tapS[b] - 8 * j;
      if (v >= 0 && v < 8 && (x >> v & 1)) key |= 1u << b;
    }
    byte_key[e] = key;
  }
}

// rank is masks_rank: the key of row r has bit b = mask bit taps[b]; with
// 32-bit ranks (byte_key non-null, V ≤ 32) four lookups of its bytes.
__device__ void rank(const u64* mask, i64 rows, int V, int W, const int* taps, const u32* byte_key, u64* rank64,
                     u32* rank32) {
  if (byte_key) {
    __shared__ u32 byteKey[4 * 256];
    for (int e = threadIdx.x; e < 4 * 256; e += blockDim.x) byteKey[e] = byte_key[e];
    __syncthreads();
    for (i64 r = gtid(); r < rows; r += gstride()) {
      const u32 m = (u32)mask[r];
      const u32 key =
          byteKey[m & 255] | byteKey[256 + (m >> 8 & 255)] | byteKey[512 + (m >> 16 & 255)] | byteKey[768 + (m >> 24)];
      rank32[r] = (u32)gray_to_binary(key);
    }
    return;
  }
  extern __shared__ int tapS[];  // V
  for (int b = threadIdx.x; b < V; b += blockDim.x) tapS[b] = taps[b];
  __syncthreads();
  for (i64 r = gtid(); r < rows; r += gstride()) {
    const u64* m = mask + r * W;
    u64 carry = 0;  // parity of all higher words: 0 or all ones
    for (int w = W - 1; w >= 0; --w) {
      u64 key = 0;
      const int b0 = 64 * w, b1 = min(V, b0 + 64);
      for (int b = b0; b < b1; ++b) {
        const int v = tapS[b];
        key |= (m[v >> 6] >> (v & 63) & 1) << (b - b0);
      }
      const u64 x = gray_to_binary(key) ^ carry;
      rank64[r * W + w] = x;
      carry = 0ull - (x & 1);
    }
  }
}

__device__ void word(const u64* rank, const int* order, i64 rows, int W, int w, u64* keys) {
  for (i64 j = gtid(); j < rows; j += gstride()) keys[j] = rank[(i64)order[j] * W + w];
}

// tile_union runs a warp per tile: for each mask word the lanes OR the
// masks of every 32nd row of the tile (their order and mask loads
// independent, so a tile costs a few load latencies, not one per row),
// the warp reduces the word's halves, and lane 0 writes the unions and
// the tile's tap count (no atomics, no zero fill first). The loops are
// warp-uniform.
__device__ void tile_union(const u64* mask, const int* order, i64 rows, int W, int tile_rows, i64 nt, u64* unions,
                           int* cnt) {
  const int lane = threadIdx.x & 31;
  for (i64 tile = gtid() >> 5; tile < nt; tile += gstride() >> 5) {
    const i64 r0 = tile * tile_rows, r1 = min(rows, r0 + tile_rows);
    int taps = 0;
    for (int w = 0; w < W; ++w) {
      u64 u = 0;
      for (i64 j = r0 + lane; j < r1; j += 32) u |= mask[(i64)order[j] * W + w];
      const u64 all = (u64)__reduce_or_sync(0xffffffffu, (u32)(u >> 32)) << 32 | __reduce_or_sync(0xffffffffu, (u32)u);
      if (lane == 0) unions[tile * W + w] = all;
      taps += __popcll(all);
    }
    if (lane == 0) cnt[tile] = taps;
  }
}

__device__ void taps(const u64* unions, i64 nt, int W, const int* seg, int* out) {
  for (i64 tile = gtid(); tile < nt; tile += gstride()) {
    int p = seg[tile];
    for (int w = 0; w < W; ++w) {
      u64 x = unions[tile * W + w];
      while (x) {
        out[p++] = 64 * w + (__ffsll((long long)x) - 1);
        x &= x - 1;
      }
    }
  }
}

// ---- hybrid gathers (cudaext hybrid.go; kmap.Masked.Hybrid on the host) ----
//
// A tap of a tile's union that fewer than share of the tile's rows hold is
// sparse: its pairs leave the masked tile for per-tap slots. The three
// kernels run a warp per tile over masks of one word (V ≤ 64), the tile's
// rows (at most 32·kHybridGroups) a register each per lane.

constexpr int kHybridGroups = 8;  // tile rows ≤ 256

// hybrid_rows loads the masks and rows of tile's entries of order: lane l
// holds entries 32g + l (mask 0 and row −1 past the tile).
__device__ __forceinline__ void hybrid_rows(const u64* mask, const int* order, i64 r0, i64 r1, int lane,
                                            u64 (&m)[kHybridGroups], int (&row)[kHybridGroups]) {
#pragma unroll
  for (int g = 0; g < kHybridGroups; ++g) {
    const i64 j = r0 + 32 * g + lane;
    row[g] = j < r1 ? order[j] : -1;
    m[g] = j < r1 ? mask[row[g]] : 0;
  }
}

// hybrid_count writes, per tile: unions[tile] its dense taps (held by at
// least share of its rows) and cnt[tile] their number, sparse[tile] its
// sparse taps (held by some of its rows, fewer than share), spc[k·nt +
// tile] the pairs of sparse tap k (0 where k is not sparse) and
// listed[tile] the rows that hold a sparse tap.
__device__ void hybrid_count(const u64* mask, const int* order, i64 rows, int V, int tile_rows, i64 nt, double share,
                             u64* unions, int* cnt, u64* sparse, int* spc, int* listed) {
  const int lane = threadIdx.x & 31;
  for (i64 tile = gtid() >> 5; tile < nt; tile += gstride() >> 5) {
    const i64 r0 = tile * tile_rows, r1 = min(rows, r0 + tile_rows);
    const double least = share * (double)(r1 - r0);
    u64 m[kHybridGroups];
    int row[kHybridGroups];
    hybrid_rows(mask, order, r0, r1, lane, m, row);
    int c0 = 0, c1 = 0;  // the rows holding taps lane and lane + 32
    for (int k = 0; k < V; ++k) {
      int c = 0;
#pragma unroll
      for (int g = 0; g < kHybridGroups; ++g) c += __popc(__ballot_sync(0xffffffffu, (m[g] >> k) & 1));
      if (k == lane) c0 = c;
      if (k == lane + 32) c1 = c;
    }
    const bool s0 = c0 > 0 && (double)c0 < least, s1 = c1 > 0 && (double)c1 < least;
    const u64 sp = (u64)__ballot_sync(0xffffffffu, s1) << 32 | __ballot_sync(0xffffffffu, s0);
    const u64 dn = (u64)__ballot_sync(0xffffffffu, c1 > 0 && !s1) << 32 | __ballot_sync(0xffffffffu, c0 > 0 && !s0);
    int l = 0;
#pragma unroll
    for (int g = 0; g < kHybridGroups; ++g) l += __popc(__ballot_sync(0xffffffffu, (m[g] & sp) != 0));
    if (lane < V) spc[(i64)lane * nt + tile] = s0 ? c0 : 0;
    if (lane + 32 < V) spc[(i64)(lane + 32) * nt + tile] = s1 ? c1 : 0;
    if (lane == 0) {
      unions[tile] = dn;
      cnt[tile] = __popcll(dn);
      sparse[tile] = sp;
      listed[tile] = l;
    }
  }
}

// hybrid_taps (one thread) lays the sparse taps' segments out as whole
// tiles of tile_rows slots, in tap order, from spoff (the exclusive scan of
// spc, V·nt + 1 entries): info[k] = tap k's first tile (k ≤ V, info[V]
// the tiles), info[V + 1] = the listed rows (loff[nt]).
__device__ void hybrid_taps(const int* spoff, i64 nt, int V, int tile_rows, const int* loff, i64* info) {
  if (gtid() != 0) return;
  i64 first = 0;
  for (int k = 0; k < V; ++k) {
    info[k] = first;
    const i64 pairs = spoff[(i64)(k + 1) * nt] - spoff[(i64)k * nt];
    first += (pairs + tile_rows - 1) / tile_rows;
  }
  info[V] = first;
  info[V + 1] = loff[nt];
}

// hybrid_fill writes the slot tables of the sparse pairs (hybrid_count's
// split, hybrid_taps' layout): tap k's pairs of tile t, in the order's
// order, at slots info[k]·tile_rows + spoff[k·nt + t] − spoff[k·nt] on:
// tbl[s] = nbr[r, k] and slot[r·V + k] = s; and the rows that hold a
// sparse tap, tile by tile in the order's order, at rowlist[loff[t]…].
__device__ void hybrid_fill(const u64* mask, const int* order, i64 rows, int V, int tile_rows, i64 nt, const u64* sparse,
                            const int* spoff, const int* loff, const i64* info, const int* nbr, int* tbl, int* slot,
                            int* rowlist) {
  const int lane = threadIdx.x & 31;
  const unsigned below = (1u << lane) - 1;
  for (i64 tile = gtid() >> 5; tile < nt; tile += gstride() >> 5) {
    const u64 sp = sparse[tile];
    if (!sp) continue;
    const i64 r0 = tile * tile_rows, r1 = min(rows, r0 + tile_rows);
    u64 m[kHybridGroups];
    int row[kHybridGroups];
    hybrid_rows(mask, order, r0, r1, lane, m, row);
    i64 at = loff[tile];
#pragma unroll
    for (int g = 0; g < kHybridGroups; ++g) {
      const bool has = (m[g] & sp) != 0;
      const unsigned b = __ballot_sync(0xffffffffu, has);
      if (has) rowlist[at + __popc(b & below)] = row[g];
      at += __popc(b);
    }
    for (u64 x = sp; x; x &= x - 1) {
      const int k = __ffsll((long long)x) - 1;
      i64 s = info[k] * tile_rows + spoff[(i64)k * nt + tile] - spoff[(i64)k * nt];
#pragma unroll
      for (int g = 0; g < kHybridGroups; ++g) {
        const bool has = (m[g] >> k) & 1;
        const unsigned b = __ballot_sync(0xffffffffu, has);
        if (has) {
          const i64 mine = s + __popc(b & below);
          tbl[mine] = nbr[(i64)row[g] * V + k];
          slot[(i64)row[g] * V + k] = (int)mine;
        }
        s += __popc(b);
      }
    }
  }
}

// hybrid_tiles writes the per-tap tile tables of the slots: tile t of
// tap k (info[k] ≤ t < info[k + 1]) has ttap[t] = k and tseg[t] = t, and
// tseg[tiles] = tiles.
__device__ void hybrid_tiles(const i64* info, int V, int* tseg, int* ttap) {
  const i64 tiles = info[V];
  for (i64 t = gtid(); t <= tiles; t += gstride()) {
    tseg[t] = (int)t;
    if (t == tiles) continue;
    int k = 0;
    while (info[k + 1] <= t) ++k;
    ttap[t] = k;
  }
}

__device__ void sched_keys(const int* seg, i64 nt, int V, u32* keys) {
  for (i64 tile = gtid(); tile < nt; tile += gstride()) keys[tile] = (u32)(V - (seg[tile + 1] - seg[tile]));
}

__device__ void sched_rows(const int* order, i64 nt, int rows, u32* keys) {
  for (i64 tile = gtid(); tile < nt; tile += gstride()) keys[tile] = (u32)order[tile * rows];
}

// ---- regrouping (kmap.RegroupWindow) ------------------------------------------

constexpr int kRegroupWindow = 2048;   // the most rows of one window (kmap.RegroupWindowRows)
constexpr int kRegroupThreads = 256;   // a block per window: two warps on each SM sub-partition

__device__ __forceinline__ int popcount(u32 x) { return __popc(x); }
__device__ __forceinline__ int popcount(u64 x) { return __popcll(x); }

// warp_inclusive_scan returns op over x of lanes 0 … lane of the warp
// (every lane of the warp must call it); op is associative.
template <class T, class Op> __device__ __forceinline__ T warp_inclusive_scan(T x, int lane, Op op) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x = op(x, y);
  }
  return x;
}

// warp_inclusive_sum returns the sum of x over lanes 0 … lane of the warp
// (every lane of the warp must call it).
__device__ __forceinline__ int warp_inclusive_sum(int x, int lane) {
  return warp_inclusive_scan(x, lane, [](int a, int b) { return a + b; });
}

// RegroupShared is the shared memory of masks_regroup{32,64}: the window's
// rows and masks, the tile of each segment's first position (a segment:
// rows of one class placed together; 0xffff elsewhere), the first position
// of each mask class (a run of equal masks; kRegroupWindow + 1 entries)
// and the per-warp results of the block-wide steps of a block of Warps
// warps, double-buffered.
template <class M, int Warps> struct RegroupShared {
  M mask[kRegroupWindow];
  int row[kRegroupWindow];
  unsigned short seg[kRegroupWindow];
  unsigned short start[kRegroupWindow + 1];
  u32 z[2][Warps], k[2][Warps];
  int tiles;
};

// RegroupWide says whether a block of Warps warps combines the per-warp
// words of its block-wide steps lane-parallel (lane w reads warp w's word,
// then one warp reduction) rather than each thread reading all of them in
// turn (the 256-thread kernels' way, kept as it was).
template <int Warps> constexpr bool RegroupWide = Warps > 8;

// regroup_bar is the block-wide step's barrier of regroup_passes: the
// first aw warps of the block (named barrier 1; barrier 0 is
// __syncthreads, which every warp meets after the passes).
__device__ __forceinline__ void regroup_bar(int aw) { asm volatile("bar.sync 1, %0;\n" ::"r"(aw * 32) : "memory"); }

// regroup_take places the next n rows of a class (positions front …) in
// tile: it marks the segment's first position with the tile (the rows
// after it up to the next mark are the segment's) and advances the class
// past them.
__device__ __forceinline__ void regroup_take(unsigned short* seg, int& front, int& rem, int n, int tile) {
  if (n <= 0) return;
  seg[front] = (unsigned short)tile;
  front += n;
  rem -= n;
}

// regroup_key ranks a class for kmap.RegroupWindow's picks: fewest taps
// added to union, then most rows left, then earliest (the least key wins);
// ~0 for a class with no rows left. a ≤ 64 taps, rows ≤ kRegroupWindow and
// c < kRegroupWindow fit 7, 11 and 11 bits.
constexpr int kRegroupBits = 11;
static_assert(kRegroupWindow <= 1 << kRegroupBits, "regroup_key's fields");
template <class M> __device__ __forceinline__ u32 regroup_key(M m, int rows, int c, M uni) {
  return rows > 0 ? (u32)popcount(m & ~uni) << (2 * kRegroupBits) | (u32)(kRegroupWindow - rows) << kRegroupBits | (u32)c
                  : ~0u;
}
__device__ __forceinline__ int regroup_key_class(u32 key) { return (int)(key & ((1u << kRegroupBits) - 1)); }
__device__ __forceinline__ int regroup_key_rows(u32 key) {
  return kRegroupWindow - (int)(key >> kRegroupBits & ((1u << kRegroupBits) - 1));
}

// regroup_passes is kmap.RegroupWindow's greedy over the window's mask
// classes (the runs of equal masks in window order, nclasses of them):
// a class's remaining rows are a count and the position of the first.
// Thread t (kBlock: of the block, else lane t of warp 0, the only warp
// that calls it) holds classes P·t … (so thread order is class order). A
// step is one or two warp reductions; with kBlock their results per warp
// go through shared memory and one barrier (alternating buffers: a buffer
// is written again only after every thread has passed the barrier of the
// step in between, i.e. has read it). A tile's first class is one step,
// each pass one more: the zero-adders' rows and the next class's key
// come from the same reduction (the zero-adders are not candidates, and
// placing them changes no other class). Every loop is uniform over the
// threads that run it (filled, room, tile and the union are the same in
// each). With kBlock only the first aw warps of the block call it, those
// holding classes (aw·32·P ≥ nclasses): the others would only add empty
// work to every pass (at RES 64 a window's ~500 classes fill 4 of a
// 512-thread block's 16 warps), so the steps meet at a named barrier of
// aw warps. The prefix of zero-adders before a thread is reduced only
// when they overflow the tile (at most once a tile). Returns the number of
// tiles.
template <class M, int P, bool kBlock, int Warps>
__device__ int regroup_passes(RegroupShared<M, Warps>& s, int n, int nclasses, int tile_rows, int aw = 1) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c0 = (kBlock ? (int)threadIdx.x : lane) * P;
  M m[P];
  int front[P], rem[P];
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int c = c0 + i;
    front[i] = c < nclasses ? s.start[c] : 0;
    rem[i] = c < nclasses ? s.start[c + 1] - front[i] : 0;
    m[i] = c < nclasses ? s.mask[front[i]] : (M)0;
  }
  int filled = 0, tile = 0, buf = 0;
  M uni = 0;  // the last tile's union
  while (filled < n) {
    // A tile starts with the class with the most rows left or, for the
    // second tile of a pair, the one adding the fewest taps to the
    // first's union; as many of its rows as fit.
    const M seed = tile & 1 ? uni : ~(M)0;
    u32 f = ~0u;
#pragma unroll
    for (int i = 0; i < P; ++i) f = min(f, regroup_key(m[i], rem[i], c0 + i, seed));
    f = __reduce_min_sync(kAll, f);
    if (kBlock) {
      if (lane == 0) s.k[buf][warp] = f;
      regroup_bar(aw);
      if constexpr (RegroupWide<Warps>) {
        f = __reduce_min_sync(kAll, lane < aw ? s.k[buf][lane] : ~0u);
      } else {
#pragma unroll
        for (int w = 0; w < Warps; ++w)
          if (w < aw) f = min(f, s.k[buf][w]);
      }
      buf ^= 1;
    }
    const int fc = regroup_key_class(f), fk = min(regroup_key_rows(f), tile_rows);
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (c0 + i == fc) regroup_take(s.seg, front[i], rem[i], fk, tile);
    uni = s.mask[s.start[fc]];
    filled += fk;
    int room = tile_rows - fk;
    while (room > 0 && filled < n) {
      // A pass: the zero-adders' rows, earliest first, while there is
      // room; then as many rows as fit of the class adding the fewest.
      u32 zb = 0, key = ~0u;
      int z = 0;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const bool zero = rem[i] > 0 && (m[i] & ~uni) == 0;
        zb |= (u32)zero << i;
        z += zero ? rem[i] : 0;
        key = min(key, zero ? ~0u : regroup_key(m[i], rem[i], c0 + i, uni));
      }
      int total = (int)__reduce_add_sync(kAll, (u32)z), before = 0;
      u32 best = __reduce_min_sync(kAll, key), zw = 0;
      if (kBlock) {
        if (lane == 0) s.z[buf][warp] = (u32)total, s.k[buf][warp] = best;
        regroup_bar(aw);
        if constexpr (RegroupWide<Warps>) {
          zw = lane < aw ? s.z[buf][lane] : 0u;
          total = (int)__reduce_add_sync(kAll, zw);
          best = __reduce_min_sync(kAll, lane < aw ? s.k[buf][lane] : ~0u);
        } else {
          total = 0;
#pragma unroll
          for (int w = 0; w < Warps; ++w)
            if (w < aw) {
              const int zv = (int)s.z[buf][w];
              total += zv;
              before += w < warp ? zv : 0;
              best = min(best, s.k[buf][w]);
            }
        }
        buf ^= 1;
      }
      if (total <= room) {
#pragma unroll
        for (int i = 0; i < P; ++i)
          if (zb >> i & 1) regroup_take(s.seg, front[i], rem[i], rem[i], tile);
      } else {
        // Only the first room rows: those of the threads before, then
        // this thread's classes in order (every lane takes part in the
        // scan and the reduction: total is the same in each).
        if constexpr (kBlock && RegroupWide<Warps>) before = (int)__reduce_add_sync(kAll, lane < warp ? zw : 0u);
        int left = room - (before + warp_inclusive_sum(z, lane) - z);
#pragma unroll
        for (int i = 0; i < P; ++i)
          if (zb >> i & 1) {
            const int k = min(rem[i], max(left, 0));
            left -= rem[i];
            regroup_take(s.seg, front[i], rem[i], k, tile);
          }
      }
      const int placed = min(total, room);
      filled += placed;
      room -= placed;
      if (room == 0 || best == ~0u) break;
      const int bc = regroup_key_class(best), bk = min(regroup_key_rows(best), room);
#pragma unroll
      for (int i = 0; i < P; ++i)
        if (c0 + i == bc) regroup_take(s.seg, front[i], rem[i], bk, tile);
      uni |= s.mask[s.start[bc]];
      filled += bk;
      room -= bk;
    }
    ++tile;
  }
  return tile;
}

// regroup_on_warp0 runs regroup_passes with P classes per lane on warp 0
// alone (the other warps skip it) and leaves the number of tiles in
// s.tiles.
template <class M, int P, int Warps>
__device__ __forceinline__ void regroup_on_warp0(RegroupShared<M, Warps>& s, int n, int nclasses, int tile_rows,
                                                 int warp, int lane) {
  if (warp == 0) {
    const int t = regroup_passes<M, P, false, Warps>(s, n, nclasses, tile_rows);
    if (lane == 0) s.tiles = t;
  }
}

// regroup is masks_regroup{32,64}[_t{512,1024}] for the window of block
// blockIdx.x (masks of type M, blocks of Threads threads). Thread t loads
// positions t, t + Threads, … of the window, then holds positions P·t …
// (P = kRegroupWindow / Threads) to mark where mask classes start (a
// block-wide scan). The greedy runs over the classes
// (regroup_passes): on warp 0 alone where they fit it with two, four or
// eight per lane (no barriers: on the benchmark's shells a 2,048-row
// window holds about 50–160 classes at RES 256–128), else on the block
// with eight per thread. A placement marks only the first position of the
// rows it places, so a pass costs the same however many rows it places; a
// block-wide max-scan of the marks then gives every position its tile,
// and each tile's rows go to its slots in window order. Measured (H200,
// session 19): the greedy row by row on a 128-thread block over 1,024-row
// windows, 36–50 µs per map; on a warp alone with 32 positions per lane,
// about 1.1 µs per pass. The per-warp words are two arrays: packed into
// one 64-bit word, nvcc 11.8's sm_90 code stored the count's half unset
// (session 19, call 5). With 512 or 1,024 threads (an experiment, session
// 43) the block path holds four or two classes per thread and takes every
// window of more than 128 classes; it runs on the warps that hold classes
// only (regroup_passes). Nsight Compute, session 44: a pass of the
// 512-thread kernel at RES 64 took about 1,290 cycles with all 16 warps in
// it, each issuing some 180 instructions a pass.
template <class M, int Threads>
__device__ void regroup(const u64* mask, int* order, i64 rows, int tile_rows) {
  constexpr int P = kRegroupWindow / Threads, Warps = Threads / 32;
  static_assert(P * Threads == kRegroupWindow && Warps <= 32, "regroup's block");
  __shared__ RegroupShared<M, Warps> s;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const i64 w0 = (i64)blockIdx.x * kRegroupWindow;
  const int n = (int)min((i64)kRegroupWindow, rows - w0);
  int* out = order + w0;
  {
    // All of a thread's loads in flight at once: its rows, then their masks.
    int r[P];
    M v[P];
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int j = threadIdx.x + Threads * k;
      r[k] = j < n ? out[j] : 0;
    }
#pragma unroll
    for (int k = 0; k < P; ++k) v[k] = threadIdx.x + Threads * k < n ? (M)mask[r[k]] : (M)0;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      s.row[threadIdx.x + Threads * k] = r[k];
      s.mask[threadIdx.x + Threads * k] = v[k];
    }
  }
  __syncthreads();
  const int p0 = threadIdx.x * P;
  int nclasses;
  {
    // The classes: a position starts one where its mask differs from the
    // previous position's.
    u32 starts = 0;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int p = p0 + i;
      starts |= (u32)(p < n && (p == 0 || s.mask[p] != s.mask[p - 1])) << i;
    }
#pragma unroll
    for (int i = 0; i < P; ++i) s.seg[p0 + i] = 0xffffu;
    const int c = __popc(starts), inc = warp_inclusive_sum(c, lane);
    if (lane == 31) s.z[0][warp] = (u32)inc;
    __syncthreads();
    int before = 0;
    nclasses = 0;
    if constexpr (RegroupWide<Warps>) {
      const u32 zw = lane < Warps ? s.z[0][lane] : 0u;
      before = (int)__reduce_add_sync(0xffffffffu, lane < warp ? zw : 0u);
      nclasses = (int)__reduce_add_sync(0xffffffffu, zw);
    } else {
#pragma unroll
      for (int w = 0; w < Warps; ++w) {
        before += w < warp ? (int)s.z[0][w] : 0;
        nclasses += (int)s.z[0][w];
      }
    }
    int at = before + inc - c;
    for (u32 b = starts; b; b &= b - 1) s.start[at++] = (unsigned short)(p0 + __ffs(b) - 1);
    if (threadIdx.x == 0) s.start[nclasses] = (unsigned short)n;
  }
  __syncthreads();
  if (nclasses <= 2 * 32) {
    regroup_on_warp0<M, 2>(s, n, nclasses, tile_rows, warp, lane);
  } else if (nclasses <= 4 * 32) {
    regroup_on_warp0<M, 4>(s, n, nclasses, tile_rows, warp, lane);
  } else if (nclasses <= P * 32) {
    regroup_on_warp0<M, P>(s, n, nclasses, tile_rows, warp, lane);
  } else if (const int aw = (nclasses + 32 * P - 1) / (32 * P); warp < aw) {
    const int t = regroup_passes<M, P, true>(s, n, nclasses, tile_rows, aw);
    if (threadIdx.x == 0) s.tiles = t;
  }
  __syncthreads();
  const int tiles = s.tiles;
  // Each position's tile: that of the last segment mark at or before it,
  // a block-wide max-scan of (position + 1) << 16 | tile over the marks.
  // The per-warp words use s.z[1], then alternate (s.z[0] was last read
  // before the barrier above).
  unsigned short mine[P];
  int buf = 1;
  {
    u32 run = 0, at[P];
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int p = p0 + i;
      const u32 t = s.seg[p];
      if (p < n && t != 0xffffu) run = (u32)(p + 1) << 16 | t;
      at[i] = run;
    }
    const u32 inc = warp_inclusive_scan(run, lane, [](u32 a, u32 b) { return max(a, b); });
    if (lane == 31) s.z[buf][warp] = inc;
    u32 carry = __shfl_up_sync(0xffffffffu, inc, 1);
    if (lane == 0) carry = 0;
    __syncthreads();
    if constexpr (RegroupWide<Warps>) {
      carry = max(carry, __reduce_max_sync(0xffffffffu, lane < warp ? s.z[buf][lane] : 0u));
    } else {
#pragma unroll
      for (int w = 0; w < Warps; ++w) carry = w < warp ? max(carry, s.z[buf][w]) : carry;
    }
    buf ^= 1;
#pragma unroll
    for (int i = 0; i < P; ++i) mine[i] = p0 + i < n ? (unsigned short)(max(at[i], carry) & 0xffffu) : (unsigned short)0xffffu;
  }
  for (int t = 0; t < tiles; ++t) {
    int c = 0;
#pragma unroll
    for (int i = 0; i < P; ++i) c += mine[i] == t;
    const int inc = warp_inclusive_sum(c, lane);
    if (lane == 31) s.z[buf][warp] = (u32)inc;
    __syncthreads();
    int before = 0;
    if constexpr (RegroupWide<Warps>) {
      before = (int)__reduce_add_sync(0xffffffffu, lane < warp ? s.z[buf][lane] : 0u);
    } else {
#pragma unroll
      for (int w = 0; w < Warps; ++w) before += w < warp ? (int)s.z[buf][w] : 0;
    }
    buf ^= 1;
    int at = t * tile_rows + before + inc - c;
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (mine[i] == t) out[at++] = s.row[p0 + i];
  }
}

}  // namespace fgm

extern "C" {

__global__ void masks_build(const int* table, long long rows, int V, int W, unsigned long long* mask, unsigned* cnt) {
  fg_await_prior_grid();
  fgm::build(table, rows, V, W, mask, cnt);
}
__global__ void masks_key_taps(const unsigned* cnt, int V, long long rows, int* key_taps, unsigned* byte_key) {
  fg_await_prior_grid();
  fgm::key_taps(cnt, V, rows, key_taps, byte_key);
}
__global__ void masks_rank(const unsigned long long* mask, long long rows, int V, int W, const int* key_taps,
                           const unsigned* byte_key, unsigned long long* rank64, unsigned* rank32) {
  fg_await_prior_grid();
  fgm::rank(mask, rows, V, W, key_taps, byte_key, rank64, rank32);
}
__global__ void masks_word(const unsigned long long* rank, const int* order, long long rows, int W, int w,
                           unsigned long long* keys) {
  fg_await_prior_grid();
  fgm::word(rank, order, rows, W, w, keys);
}
__global__ void masks_union(const unsigned long long* mask, const int* order, long long rows, int W, int tile_rows,
                            long long nt, unsigned long long* unions, int* cnt) {
  fg_await_prior_grid();
  fgm::tile_union(mask, order, rows, W, tile_rows, nt, unions, cnt);
}
__global__ void masks_taps(const unsigned long long* unions, long long nt, int W, const int* seg, int* out) {
  fg_await_prior_grid();
  fgm::taps(unions, nt, W, seg, out);
}
__global__ void masks_hybrid_count(const unsigned long long* mask, const int* order, long long rows, int V, int tile_rows,
                                   long long nt, double share, unsigned long long* unions, int* cnt,
                                   unsigned long long* sparse, int* spc, int* listed) {
  fg_await_prior_grid();
  fgm::hybrid_count(mask, order, rows, V, tile_rows, nt, share, unions, cnt, sparse, spc, listed);
}
__global__ void masks_hybrid_taps(const int* spoff, long long nt, int V, int tile_rows, const int* loff, long long* info) {
  fg_await_prior_grid();
  fgm::hybrid_taps(spoff, nt, V, tile_rows, loff, info);
}
__global__ void masks_hybrid_fill(const unsigned long long* mask, const int* order, long long rows, int V, int tile_rows,
                                  long long nt, const unsigned long long* sparse, const int* spoff, const int* loff,
                                  const long long* info, const int* nbr, int* tbl, int* slot, int* rowlist) {
  fg_await_prior_grid();
  fgm::hybrid_fill(mask, order, rows, V, tile_rows, nt, sparse, spoff, loff, info, nbr, tbl, slot, rowlist);
}
__global__ void masks_hybrid_tiles(const long long* info, int V, int* tseg, int* ttap) {
  fg_await_prior_grid();
  fgm::hybrid_tiles(info, V, tseg, ttap);
}
__global__ void masks_sched_keys(const int* seg, long long nt, int V, unsigned* keys) {
  fg_await_prior_grid();
  fgm::sched_keys(seg, nt, V, keys);
}
__global__ void masks_sched_rows(const int* order, long long nt, int rows, unsigned* keys) {
  fg_await_prior_grid();
  fgm::sched_rows(order, nt, rows, keys);
}
// masks_regroup{32,64} and their _t512 / _t1024 twins: regroup over masks
// of type M with blocks of T threads.
#define FG_MASKS_REGROUP(name, M, T)                                                                     \
  __global__ void __launch_bounds__(T) name(const unsigned long long* mask, int* order, long long rows, \
                                            int tile_rows) {                                           \
    fg_await_prior_grid();                                                                               \
    fgm::regroup<M, T>(mask, order, rows, tile_rows);                                                    \
  }
FG_MASKS_REGROUP(masks_regroup32, unsigned, fgm::kRegroupThreads)
FG_MASKS_REGROUP(masks_regroup64, unsigned long long, fgm::kRegroupThreads)
FG_MASKS_REGROUP(masks_regroup32_t512, unsigned, 512)
FG_MASKS_REGROUP(masks_regroup64_t512, unsigned long long, 512)
FG_MASKS_REGROUP(masks_regroup32_t1024, unsigned, 1024)
FG_MASKS_REGROUP(masks_regroup64_t1024, unsigned long long, 1024)
#undef FG_MASKS_REGROUP

}  // extern "C"
