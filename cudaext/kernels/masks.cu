// Neighbour bitmasks, Gray-code ranks and per-tile tap unions of the masked
// implicit GEMM (kmap.Masked and kmap.Tiles on the GPU; host side in
// cudaext/kmapgpu.go).
//
//   masks_build      mask[r·W + w] bit b = table[r, 64w + b] ≥ 0, and the
//                    rank of the mask in the reflected Gray sequence (bit j
//                    of the rank = XOR of the mask bits ≥ j, across words);
//                    with W == 1 and V ≤ 32 the rank is written as uint32;
//                    with both rank pointers null only the masks. For
//                    W == 1 (V ≤ 64) each warp takes 32 rows: it reads
//                    their 32·V entries coalesced, one ballot per 32
//                    entries into a bit string in shared memory, and lane
//                    i cuts row i's V bits out of it (no atomics)
//   masks_word       keys[j] = rank[order[j]·W + w] (one LSD word pass)
//   masks_union      OR of the masks of each tile of `rows` consecutive
//                    entries of the order; cnt[tile] += popcount
//   masks_taps       the set bits of each union, ascending, at seg[tile]
#include "gray.cuh"
#include "hashtable.cuh"

namespace fgm {

using namespace fgx;

constexpr int kBuildWarps = 8;  // masks_build runs 256-thread blocks

// build1 is build for W == 1. The loops are warp-uniform (r0 is the same
// for the 32 lanes), so every lane reaches every ballot and __syncwarp.
__device__ void build1(const int* table, i64 rows, int V, u64* mask, u64* rank64, u32* rank32) {
  __shared__ u32 bits[kBuildWarps][64 + 2];  // 32·V bits, two zero words of slack
  const int lane = threadIdx.x & 31;
  u32* b = bits[(threadIdx.x >> 5) % kBuildWarps];
  const i64 warps = gstride() >> 5;
  for (i64 r0 = (gtid() >> 5) << 5; r0 < rows; r0 += warps << 5) {
    const int nr = (int)min((i64)32, rows - r0);
    const int cnt = nr * V;  // entries of this group
    const int* base = table + r0 * V;
#pragma unroll 4
    for (int k = 0; k < V; ++k) {
      const int e = 32 * k + lane;
      const unsigned hit = __ballot_sync(0xffffffffu, e < cnt && base[e] >= 0);
      if (lane == 0) b[k] = hit;
    }
    if (lane < 2) b[V + lane] = 0;
    __syncwarp();
    if (lane < nr) {
      const int p = lane * V, w = p >> 5, s = p & 31;
      const u64 lo = (u64)b[w] | ((u64)b[w + 1] << 32);
      u64 m = lo >> s;
      if (s) m |= (u64)b[w + 2] << (64 - s);
      if (V < 64) m &= (1ull << V) - 1;
      mask[r0 + lane] = m;
      const u64 x = gray_to_binary(m);
      if (rank32)
        rank32[r0 + lane] = (u32)x;
      else if (rank64)
        rank64[r0 + lane] = x;
    }
    __syncwarp();
  }
}

__device__ void build(const int* table, i64 rows, int V, int W, u64* mask, u64* rank64, u32* rank32) {
  if (W == 1 && blockDim.x == 32 * kBuildWarps) {
    build1(table, rows, V, mask, rank64, rank32);
    return;
  }
  for (i64 r = gtid(); r < rows; r += gstride()) {
    const int* row = table + r * V;
    u64 carry = 0;  // parity of all higher words: 0 or all ones
    for (int w = W - 1; w >= 0; --w) {
      u64 m = 0;
      const int v0 = 64 * w, v1 = min(V, v0 + 64);
      for (int v = v0; v < v1; ++v)
        if (row[v] >= 0) m |= 1ull << (v - v0);
      mask[r * W + w] = m;
      const u64 x = gray_to_binary(m) ^ carry;
      if (rank32)
        rank32[r] = (u32)x;
      else if (rank64)
        rank64[r * W + w] = x;
      carry = 0ull - (x & 1);
    }
  }
}

__device__ void word(const u64* rank, const int* order, i64 rows, int W, int w, u64* keys) {
  for (i64 j = gtid(); j < rows; j += gstride()) keys[j] = rank[(i64)order[j] * W + w];
}

__device__ void tile_union(const u64* mask, const int* order, i64 rows, int W, int tile_rows, i64 nt, u64* unions,
                           int* cnt) {
  const i64 total = nt * W;
  for (i64 e = gtid(); e < total; e += gstride()) {
    const i64 tile = e / W;
    const int w = (int)(e - tile * W);
    const i64 r0 = tile * tile_rows, r1 = min(rows, r0 + tile_rows);
    u64 u = 0;
    for (i64 j = r0; j < r1; ++j) u |= mask[(i64)order[j] * W + w];
    unions[e] = u;
    if (u) atomicAdd(cnt + tile, __popcll(u));
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

}  // namespace fgm

extern "C" {

__global__ void masks_build(const int* table, long long rows, int V, int W, unsigned long long* mask,
                            unsigned long long* rank64, unsigned* rank32) {
  fgm::build(table, rows, V, W, mask, rank64, rank32);
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

}  // extern "C"
