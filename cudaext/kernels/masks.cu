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
//   masks_regroup32  the order regrouped in place window by window
//   masks_regroup64  (kmap.RegroupWindow), a 128-thread block per window
//                    of kRegroupWindow rows, W == 1: 32-bit masks
//                    (V ≤ 32) or 64-bit
#include "gray.cuh"
#include "hashtable.cuh"

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

__device__ void sched_keys(const int* seg, i64 nt, int V, u32* keys) {
  for (i64 tile = gtid(); tile < nt; tile += gstride()) keys[tile] = (u32)(V - (seg[tile + 1] - seg[tile]));
}

__device__ void sched_rows(const int* order, i64 nt, int rows, u32* keys) {
  for (i64 tile = gtid(); tile < nt; tile += gstride()) keys[tile] = (u32)order[tile * rows];
}

// ---- regrouping (kmap.RegroupWindow) ------------------------------------------

constexpr int kRegroupWindow = 1024;   // the most rows of one window (kmap.RegroupWindowRows)
constexpr int kRegroupThreads = 128;   // a block per window: a warp on each SM sub-partition
constexpr int kRegroupPer = kRegroupWindow / kRegroupThreads;  // window positions per thread
constexpr int kRegroupWarps = kRegroupThreads / 32;

__device__ __forceinline__ int popcount(u32 x) { return __popc(x); }
__device__ __forceinline__ int popcount(u64 x) { return __popcll(x); }

// warp_inclusive_sum returns the sum of x over lanes 0 … lane of the warp
// (every lane of the warp must call it).
__device__ __forceinline__ int warp_inclusive_sum(int x, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  return x;
}

// regroup is masks_regroup{32,64} for the window of block blockIdx.x (masks
// of type M): thread t holds positions kRegroupPer·t … of the window (so
// thread order is window order), their masks in registers and a bit per
// position still to place. A block-wide step is one or two warp
// reductions, their results per warp in shared memory and one barrier;
// the results alternate
// between two buffers, so a buffer is written again only after every
// thread has passed the barrier of the step in between, i.e. has read it.
// A pass is one step (the zero-adders' count and the smallest (adds,
// position) key); only a pass with more zero-adders than room scans them.
// Each position records its tile; at the end each tile's rows go to its
// slots in window order. Every loop is block-uniform (filled, room, tile
// and the union are the same in every thread), so every thread reaches
// every barrier. Measured (H200, Nsight Compute, session 19): a warp per
// window with 32 positions per lane issued an instruction every 4 cycles
// (latency-bound), about 1.1 µs per pass. The two words per warp are two
// arrays: packed into one 64-bit word, nvcc 11.8's sm_90 code stored the
// count's half unset (session 19, call 5: wrong orders).
template <class M>
__device__ void regroup(const u64* mask, int* order, i64 rows, int tile_rows) {
  constexpr int P = kRegroupPer;
  constexpr unsigned kAll = 0xffffffffu;
  __shared__ M sMask[kRegroupWindow];
  __shared__ int sRow[kRegroupWindow];
  __shared__ unsigned short sTile[kRegroupWindow];
  __shared__ u32 sZ[2][kRegroupWarps], sK[2][kRegroupWarps];  // per warp: zero-adders, least key
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
      const int j = threadIdx.x + kRegroupThreads * k;
      r[k] = j < n ? out[j] : 0;
    }
#pragma unroll
    for (int k = 0; k < P; ++k) v[k] = threadIdx.x + kRegroupThreads * k < n ? (M)mask[r[k]] : (M)0;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      sRow[threadIdx.x + kRegroupThreads * k] = r[k];
      sMask[threadIdx.x + kRegroupThreads * k] = v[k];
    }
  }
  __syncthreads();
  const int p0 = threadIdx.x * P;
  M m[P];
  u32 alive = 0;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    m[i] = p0 + i < n ? sMask[p0 + i] : (M)0;
    if (p0 + i < n) alive |= 1u << i;
  }
  int filled = 0, tile = 0, buf = 0;
  while (filled < n) {
    // A tile starts with the first position still to place.
    const u32 f = __reduce_min_sync(kAll, alive ? (u32)(p0 + __ffs(alive) - 1) : ~0u);
    if (lane == 0) sK[buf][warp] = f;
    __syncthreads();
    u32 first = ~0u;
#pragma unroll
    for (int w = 0; w < kRegroupWarps; ++w) first = min(first, sK[buf][w]);
    buf ^= 1;
    if (first - (u32)p0 < (u32)P) {
      alive &= ~(1u << (first - p0));
      sTile[first] = (unsigned short)tile;
    }
    M uni = sMask[first];
    ++filled;
    int room = tile_rows - 1;
    while (room > 0 && filled < n) {
      // A pass: the rows adding no tap, earliest first, while there is
      // room; then the earliest row adding the fewest.
      u32 zb = 0, k[P];
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const u32 a = (u32)popcount(m[i] & ~uni);
        const bool on = alive >> i & 1;
        zb |= (u32)(on && a == 0) << i;
        k[i] = on && a != 0 ? a << 16 | (u32)(p0 + i) : ~0u;
      }
      static_assert(P == 8, "the tree below has three levels");
      const u32 key = min(min(min(k[0], k[1]), min(k[2], k[3])), min(min(k[4], k[5]), min(k[6], k[7])));
      const int z = __popc(zb);
      const u32 wz = __reduce_add_sync(kAll, (u32)z), wk = __reduce_min_sync(kAll, key);
      if (lane == 0) sZ[buf][warp] = wz, sK[buf][warp] = wk;
      __syncthreads();
      int total = 0, before = 0;
      u32 best = ~0u;
#pragma unroll
      for (int w = 0; w < kRegroupWarps; ++w) {
        const int zw = (int)sZ[buf][w];
        total += zw;
        before += w < warp ? zw : 0;
        best = min(best, sK[buf][w]);
      }
      buf ^= 1;
      if (total > room) {
        // Only the first room zero-adders: those of the warps and lanes
        // before, then this thread's earliest.
        const int inc = warp_inclusive_sum(z, lane);
        int take = min(z, max(0, room - (before + inc - z)));
        u32 keep = 0;
        for (; take > 0; --take) {
          keep |= zb & (0u - zb);
          zb &= zb - 1;
        }
        zb = keep;
      }
      alive &= ~zb;
      for (u32 b = zb; b; b &= b - 1) sTile[p0 + __ffs(b) - 1] = (unsigned short)tile;
      const int placed = min(total, room);
      filled += placed;
      room -= placed;
      if (room == 0 || best == ~0u) break;
      const u32 bp = best & 0xffffu;
      if (bp - (u32)p0 < (u32)P) {
        alive &= ~(1u << (bp - p0));
        sTile[bp] = (unsigned short)tile;
      }
      uni |= sMask[bp];
      ++filled;
      --room;
    }
    ++tile;
  }
  __syncthreads();
  // Tile t's rows, in window order, to out[t·tile_rows …].
  unsigned short mine[P];
#pragma unroll
  for (int i = 0; i < P; ++i) mine[i] = p0 + i < n ? sTile[p0 + i] : (unsigned short)0xffffu;
  for (int t = 0; t < tile; ++t) {
    int c = 0;
#pragma unroll
    for (int i = 0; i < P; ++i) c += mine[i] == t;
    const int inc = warp_inclusive_sum(c, lane);
    if (lane == 31) sZ[buf][warp] = (u32)inc;
    __syncthreads();
    int before = 0;
#pragma unroll
    for (int w = 0; w < kRegroupWarps; ++w) before += w < warp ? (int)sZ[buf][w] : 0;
    buf ^= 1;
    int at = t * tile_rows + before + inc - c;
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (mine[i] == t) out[at++] = sRow[p0 + i];
  }
}

}  // namespace fgm

extern "C" {

__global__ void masks_build(const int* table, long long rows, int V, int W, unsigned long long* mask, unsigned* cnt) {
  fgm::build(table, rows, V, W, mask, cnt);
}
__global__ void masks_key_taps(const unsigned* cnt, int V, long long rows, int* key_taps, unsigned* byte_key) {
  fgm::key_taps(cnt, V, rows, key_taps, byte_key);
}
__global__ void masks_rank(const unsigned long long* mask, long long rows, int V, int W, const int* key_taps,
                           const unsigned* byte_key, unsigned long long* rank64, unsigned* rank32) {
  fgm::rank(mask, rows, V, W, key_taps, byte_key, rank64, rank32);
}
__global__ void masks_word(const unsigned long long* rank, const int* order, long long rows, int W, int w,
                           unsigned long long* keys) {
  fgm::word(rank, order, rows, W, w, keys);
}
__global__ void masks_union(const unsigned long long* mask, const int* order, long long rows, int W, int tile_rows,
                            long long nt, unsigned long long* unions, int* cnt) {
  fgm::tile_union(mask, order, rows, W, tile_rows, nt, unions, cnt);
}
__global__ void masks_taps(const unsigned long long* unions, long long nt, int W, const int* seg, int* out) {
  fgm::taps(unions, nt, W, seg, out);
}
__global__ void masks_sched_keys(const int* seg, long long nt, int V, unsigned* keys) {
  fgm::sched_keys(seg, nt, V, keys);
}
__global__ void masks_sched_rows(const int* order, long long nt, int rows, unsigned* keys) {
  fgm::sched_rows(order, nt, rows, keys);
}
__global__ void __launch_bounds__(fgm::kRegroupThreads) masks_regroup32(const unsigned long long* mask, int* order, long long rows,
                                                     int tile_rows) {
  fgm::regroup<unsigned>(mask, order, rows, tile_rows);
}
__global__ void __launch_bounds__(fgm::kRegroupThreads) masks_regroup64(const unsigned long long* mask, int* order, long long rows,
                                                     int tile_rows) {
  fgm::regroup<unsigned long long>(mask, order, rows, tile_rows);
}

}  // extern "C"
