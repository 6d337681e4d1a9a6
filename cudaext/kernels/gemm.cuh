// Sparse-convolution GEMM kernels of FlexGEMM-Go.
//
// Two kernel families share one tile configuration (TileCfg), one cp.async
// pipeline and one set of warp-level multiply routines:
//
//   gather  out[r, n] = bias[n] + Σ_{v, c} in[tbl[r, v], c] · w[n, v, c]
//           forward (in = x, w = weight [Co, V, Ci], tbl = Nbr) and input
//           gradient (in = dy, tbl = Rev, w = the weight [Co, V, Ci] read
//           transposed, wt = 1: w[n, v, c] is stored at [c, v, n], staged
//           MN-major and multiplied through ldmatrix.trans; or, for the
//           explicit algorithm, a materialised transpose [Ci, V, Co]).
//           Optional: row order (masked algorithms store row order[r]),
//           per-tile tap lists (masked tap unions), split-K partials.
//           A null table is the identity (explicit GEMM on an im2col matrix).
//   pairs   out[m, v, n] = Σ_{p ∈ seg(v)} a[ia[p], m] · b[ib[p], n]
//           weight gradient (a = dy, b = x) over per-tap pair lists,
//           optional split-K partials; the accumulators go to float32
//           part whenever it is set (also with one split: a float32
//           result of narrow operands), to T out otherwise.
//
// Operands are staged in shared memory by cp.async (16-byte copies with
// zero fill) when rows are 16-byte aligned, and by plain loads otherwise, so
// any channel count works. Arithmetic: F32 = SIMT FMA, TF32 = mma.sync
// m16n8k8, F16/BF16 = mma.sync m16n8k16 with ldmatrix; Hopper tiles
// (TileCfg H = true, sm_90a only) = wgmma.mma_async from swizzled stages
// (wgmma.cuh); float32 accumulators everywhere. Split-K partials are
// float32 [splits, rows, cols] and are summed in split order by
// spconv_reduce_* (conv_aux.cu): results are deterministic. No atomics.
//
// Index arithmetic on feature rows is 64-bit, so N·C may exceed 2^31.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace fg {

enum class Math { F32, TF32, F16, BF16 };

template <Math M> struct MathTraits;
template <> struct MathTraits<Math::F32> {
  using T = float;
  static constexpr int kInstK = 1;
};
template <> struct MathTraits<Math::TF32> {
  using T = float;
  static constexpr int kInstK = 8;
};
template <> struct MathTraits<Math::F16> {
  using T = __half;
  static constexpr int kInstK = 16;
};
template <> struct MathTraits<Math::BF16> {
  using T = __nv_bfloat16;
  static constexpr int kInstK = 16;
};

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Raw bit container of an element, used to move elements without arithmetic.
template <int Bytes> struct RawOf;
template <> struct RawOf<2> { using type = unsigned short; };
template <> struct RawOf<4> { using type = unsigned int; };

// Tile configuration. Go mirror: kernels.Tile (tiles.go); the generated
// instantiations assert that the shared-memory sizes agree.
// H_: a Hopper tile (wgmma.cuh): operands staged in the 128-byte swizzled
// layouts, no padding — the gather operands K-major (BK·elem = 128), a
// weight read transposed and the pairs operands MN-major (16-bit only) —
// one warpgroup per 64 rows (WM = BM/16 warps, WN = 1), prefetching S − 2
// stages ahead.
template <Math M_, int BM_, int BN_, int BK_, int WM_, int WN_, int S_, bool H_ = false> struct TileCfg {
  static constexpr Math kMath = M_;
  static constexpr bool kHopper = H_;
  using T = typename MathTraits<M_>::T;
  using Raw = typename RawOf<sizeof(T)>::type;
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, S = S_;
  static constexpr int kWarps = WM * WN;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int WTM = BM / WM;  // warp tile rows
  static constexpr int WTN = BN / WN;  // warp tile cols
  static constexpr int MI = WTM / 16;  // 16-row fragments per warp
  static constexpr int NI = WTN / 8;   // 8-col fragments per warp
  static constexpr int kElem = (int)sizeof(T);
  static constexpr int kChunk = 16 / kElem;  // elements per 16-byte copy
  static constexpr int LdK = BK + kChunk;    // K-major row pitch (16-byte pad)
  static constexpr int LdMA = BM + 8;        // MN-major pitches (pairs family)
  static constexpr int LdMB = BN + 8;
  static constexpr int kIdxRing = 2 * S;    // index stages in flight (both families)
  // gather family: one B stage holds BN K-major rows, or BK MN-major rows
  // when the weight is read transposed (wt), whichever is larger.
  static constexpr int kGatherBStage = BN * LdK > BK * LdMB ? BN * LdK : BK * LdMB;
  // Elements of one A and one B stage of the gather family. A Hopper tile
  // also reserves 1 KiB to align its stages to the 1 KiB swizzle atom.
  static constexpr int kGatherAStage = H_ ? BM * BK : BM * LdK;
  static constexpr int kGatherBSt = H_ ? BN * BK : kGatherBStage;
  static constexpr int kGatherSmem =
      S * (kGatherAStage + kGatherBSt) * kElem + 4 * BM + 4 * kIdxRing * (BM + 1) + (H_ ? 1024 : 0);
  // Stages both pipelines prefetch ahead: S − 1, or S − 2 for a Hopper
  // tile (one wgmma group stays in flight over the refill).
  static constexpr int kDist = H_ ? S - 2 : S - 1;
  static constexpr int kPairsAStage = H_ ? BK * BM : BK * LdMA;
  static constexpr int kPairsBStage = H_ ? BK * BN : BK * LdMB;
  static constexpr int kPairsSmem = S * (kPairsAStage + kPairsBStage) * kElem + 2 * kIdxRing * BK * 4 + (H_ ? 1024 : 0);
  // Minimum resident blocks per SM promised to the compiler (launch
  // bounds) for the kernels that need a cap: 8-warp 16-bit tiles whose
  // warp tile holds at most 64 float32 accumulators (MI·NI ≤ 16, e.g.
  // 64×32) are held to 128 registers, two blocks per SM; larger warp
  // tiles (64×64: 128 accumulators) get the whole register file of one
  // block, since 128 registers would spill.
  static constexpr int kMinBlocks = (kWarps >= 8 && kElem == 2 && MI * NI <= 16) ? 2 : 1;
  // The same promise for the mma.sync pairs kernels, in every arithmetic,
  // where two blocks fit one SM by shared memory (233 472 bytes, 1 KiB
  // reserved per block); 0 elsewhere, which leaves ptxas its default (an
  // explicit 1 lets it take up to 255 registers: the tf32 128×64 tile went
  // from 128 to 170). The tf32 128×128 tile took 124 registers, two blocks
  // per SM, until the block order (pairs_block_of) raised it to 130: one
  // block per SM (session 26).
  static constexpr int kPairsMinBlocks =
      (kWarps >= 8 && MI * NI <= 16 && 2 * (kPairsSmem + 1024) <= 233472) ? 2 : 0;

  static_assert(kWarps >= 1 && kThreads <= 1024, "bad warp grid");
  static_assert(BM % (16 * WM) == 0, "BM must be a multiple of 16*WM");
  static_assert(BN % (16 * WN) == 0, "BN must be a multiple of 16*WN (even 8-col fragments)");
  static_assert(BK % 16 == 0 && BK % MathTraits<M_>::kInstK == 0, "BK must be a multiple of 16");
  static_assert(BM % kChunk == 0 && BN % kChunk == 0, "BM, BN must be multiples of a 16-byte chunk");
  static_assert(S >= 2, "need at least two pipeline stages");
  static_assert((LdK * kElem) % 16 == 0 && (LdMA * kElem) % 16 == 0 && (LdMB * kElem) % 16 == 0,
                "shared rows must stay 16-byte aligned");
  static_assert(kGatherSmem <= 227 * 1024 && kPairsSmem <= 227 * 1024, "too much shared memory");
  static_assert(!H_ || (BK * kElem == 128 && WN == 1 && BM == 16 * WM && BM % 64 == 0 && S >= 3 &&
                        (BN == 64 || BN == 128 || BN == 256) && M_ != Math::F32),
                "a Hopper tile has 128-byte K rows, one warp column, a warpgroup per 64 rows, BN 64, 128 or 256");

  // Element offset of (row i, k) in a K-major gather stage: padded rows of
  // LdK, or 128-byte rows with 16-byte chunks swizzled by i mod 8.
  __device__ __forceinline__ static int kOff(int i, int k) {
    if constexpr (H_) {
      return i * BK + ((((k / kChunk) ^ i) & 7) * kChunk) + k % kChunk;
    } else {
      return i * LdK + k;
    }
  }
  // Element offset of (k, r) in an MN-major stage (r along M or N): padded
  // lines of ld, or 128-byte lines (L elements) in blocks of L along r,
  // each block BK lines, 16-byte chunks swizzled by k mod 8.
  __device__ __forceinline__ static int mnOff(int k, int r, int ld) {
    if constexpr (H_) {
      constexpr int L = 128 / kElem;
      return (r / L) * (BK * L) + k * L + (((((r % L) / kChunk) ^ k) & 7) * kChunk) + r % kChunk;
    } else {
      return k * ld + r;
    }
  }
  // Bytes between the 64-element blocks along MN of an MN-major Hopper
  // stage (the descriptors' leading offset).
  static constexpr unsigned kMnLbo = BK * 128;
};

// Kernel parameters, passed by value. Every field is 8 bytes so the Go
// mirror (gatherParams / pairsParams in cudaext) has the same layout.
struct GatherParams {
  const void* x;          // [*, Kc] gathered operand
  const void* w;          // [N, V, Kc] weight, K-contiguous
  const void* bias;       // [N] or null
  void* y;                // [M, N] output (splits == 1)
  float* part;            // [splits, M, N] float32 partials (splits > 1); with split_ctr
                          // [tiles, splits, BM·BN] in fragment order instead
  const int* tbl;         // [M, V] neighbour table (-1 = absent); null = identity, V = 1
  const int* order;       // [M] row order (masked) or null
  const int* tile_seg;    // [tiles + 1] per-tile tap segments (masked) or null
  const int* tile_taps;   // taps of each tile, ascending
  const int* tile_sched;  // [tiles] the row tile of each blockIdx.x / column tiles (masked:
                          // the launch order, cudaext tileUnions), or null (identity)
  long long M, N, Kc, V;  // rows, output cols, channels per tap, taps
  long long splits;       // split-K factor (>= 1)
  long long vec;          // 1: Kc·elem (and N·elem when wt) is a multiple of 16 bytes (cp.async path)
  long long wt;           // 1: w is stored [Kc, V, N] (read transposed)
  long long mirror;       // 1: table tap v multiplies weight tap V − 1 − v (the input
                          // gradient of a submanifold map, gathered through Nbr)
  unsigned* split_ctr;    // splits > 1, warp-specialised tiles only: [tiles][2] arrival and
                          // departure counters, zero between launches — the split blocks of a
                          // tile sum each other's partials themselves (gather_ws.cuh
                          // split_reduce) instead of a reduction kernel; null otherwise
  long long slot_tbl;     // 1: tbl is [M], one entry per row, read whatever the tap (the
                          // per-tap gathers' slots, cudaext pertap.go: tiles of one tap each)
};
static_assert(sizeof(GatherParams) == 20 * 8, "GatherParams layout");

// tbl_entry returns the address of row orow's table entry for tap v.
__device__ __forceinline__ const int* tbl_entry(const GatherParams& p, int orow, int v) {
  const unsigned long long r = (unsigned)orow;  // row offsets: unsigned 32 × 32 → 64-bit products
  return p.tbl + (p.slot_tbl ? r : r * (unsigned)p.V + v);
}

struct PairsParams {
  const void* a;          // [*, M] operand gathered by ia (dy)
  const void* b;          // [*, N] operand gathered by ib (x)
  void* out;              // [M, V, N] result in T (used when part is null)
  float* part;            // [splits, M, V·N] float32 partials, or null. With
                          // splits == 1 it may be the float32 [M, V, N]
                          // result itself (float32 weight gradients of
                          // float16/bfloat16 operands, no rounding to T)
  const int* ia;          // pair rows into a; null = identity
  const int* ib;          // pair rows into b; null = identity
  const long long* seg;   // [V + 1] pair segments per tap; null = one segment [0, K)
  long long M, N, V, K;   // out rows, out cols per tap, taps, pairs (when seg is null)
  long long splits;       // split-K factor: every tap's, or (chunk > 0) the most any tap gets
  long long vec;          // 1: M·elem and N·elem are multiples of 16 bytes
  long long chunk;        // > 0: tap v gets min(splits, ⌈iters(v)/chunk⌉) splits (balanced
                          // work per block, PairsTap::slices); its other split slices are
                          // neither written nor read (spconv_reduce_taps_*)
  long long mirror;       // 1: the lists hold the taps v < H = (V − 1)/2 of a submanifold
                          // map only (seg [H + 1]): tap V − 1 − v multiplies the pairs of
                          // tap v with ia and ib swapped, and the centre tap H is the
                          // identity over K rows
  const long long* off;   // null, or with chunk == 0 and splits > 1 the first pair of each chunk of
                          // off_rows output rows of each list tap ([taps·nc], kmap_pairs_count's
                          // scan): split z of every tap then covers the pairs of the output rows
                          // of chunks [⌊z·nc/splits⌋, ⌊(z+1)·nc/splits⌋) (the identity of the
                          // centre those rows), the same rows for every tap
  long long nc;           // chunks per tap in off
  long long off_rows;     // output rows per chunk of off
  float* bias_part;       // null, or with mirror and a 16-bit Hopper tile [slices of the centre
                          // tap][M] float32: the sums of a's columns over each slice of the
                          // centre's pairs (the bias gradient of a submanifold map, whose
                          // centre pairs every output row once), written by the blocks of
                          // column tile 0 of the centre tap (pairs_col_sums)
  long long order_groups; // > 0 (27 taps only): the blocks run in groups of order_groups
                          // splits, each group's taps by the length of their offset (centre,
                          // faces, edges, corners), its splits, then its tiles (pairs_block_of);
                          // 0: the launch order (tile, tap, split)
  unsigned* tickets;      // null, or with splits > 1 and whole Hopper tiles of at most 8 warps (16 would
                          // spill): [V][tiles] counters, zero between launches; split z of (tap, tile)
                          // adds its products into part, a float32 [M, V, N] sum, once the counter
                          // reads z, then sets it to z + 1 (0 after the last split): the reduction
                          // kernel's sums in its order, no partials (pairs_store_ordered). part is
                          // the float32 result itself (== out), or a scratch sum whose last split
                          // rounds into out, in T
};
static_assert(sizeof(PairsParams) == 21 * 8, "PairsParams layout");

// ---- PTX wrappers -----------------------------------------------------------

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

// 16-byte asynchronous copy to shared-memory address dst of the first n
// bytes at src (n 16, or 0: zeros, src not read). A copy loop that keeps
// its destination address and n in registers issues each copy as its
// source address and one LDGSTS.
__device__ __forceinline__ void cp_async16_at(unsigned dst, const void* src, int n) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
// 16-byte asynchronous copy; copies zeros when !valid (src is not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  cp_async16_at(smem_addr(dst), src, valid ? 16 : 0);
}
// base + row · rowBytes: one IMAD.WIDE.U32 with base as its addend where
// base lives in a register pair (inline mad.wide.u32 PTX came out as a
// multiply and a separate 64-bit add).
__device__ __forceinline__ const char* row_addr(const char* base, unsigned row, unsigned rowBytes) {
  return base + (unsigned long long)row * rowBytes;
}
// Reads N consecutive ints at p (16-byte aligned where N is a multiple of
// 4, 8-byte where of 2) in the widest shared loads that fit.
template <int N> __device__ __forceinline__ void lds_ints(const int* p, unsigned (&r)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const int4 v = reinterpret_cast<const int4*>(p)[i];
      r[4 * i] = (unsigned)v.x, r[4 * i + 1] = (unsigned)v.y, r[4 * i + 2] = (unsigned)v.z, r[4 * i + 3] = (unsigned)v.w;
    }
  } else if constexpr (N % 2 == 0) {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const int2 v = reinterpret_cast<const int2*>(p)[i];
      r[2 * i] = (unsigned)v.x, r[2 * i + 1] = (unsigned)v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) r[i] = (unsigned)p[i];
  }
}
// 4-byte asynchronous copy (pair indices); copies zeros when !valid.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n));
}
// Global-memory flag handshakes across blocks (GPU scope).
__device__ __forceinline__ void st_release(unsigned* f, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(f), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* f) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(f) : "memory");
  return v;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// The tf32 operand of a float32 value: its bits as they are. mma.sync and
// wgmma read the tf32 bits (sign, exponent, the first 10 mantissa bits) and
// ignore the rest, so the operand is the value truncated toward zero — one
// instruction fewer per element than rounding it (cvt.rna), and the same
// operands the Hopper tiles multiply.
__device__ __forceinline__ unsigned to_tf32(float x) { return __float_as_uint(x); }

template <Math M> struct Mma;
template <> struct Mma<Math::F16> {
  __device__ __forceinline__ static void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <> struct Mma<Math::BF16> {
  __device__ __forceinline__ static void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <> struct Mma<Math::TF32> {
  __device__ __forceinline__ static void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// ---- Warp tile multiply ------------------------------------------------------
//
// One pipeline stage: acc[mi][ni] += A(warp rows, 0..BK) · B(0..BK, warp cols).
// A is [m][k] in shared memory when AK (K-major, pitch lda) or [k][m] (pitch
// lda) otherwise; likewise B is [n][k] when BKM or [k][n]. as/bs point at the
// warp's first row/col. The accumulator layout is the mma.sync C fragment
// for every arithmetic: acc[mi][ni][h·2 + j] is element
// (mi·16 + lane/4 + 8h, ni·8 + 2·(lane%4) + j) of the warp tile.
template <class C, bool AK, bool BKM>
__device__ __forceinline__ void warp_mma(float (&acc)[C::MI][C::NI][4], const typename C::T* as,
                                         const typename C::T* bs, int lda, int ldb, int lane) {
  using T = typename C::T;
  const int g = lane >> 2, t = lane & 3;
  if constexpr (C::kMath == Math::F16 || C::kMath == Math::BF16) {
#pragma unroll
    for (int kk = 0; kk < C::BK; kk += 16) {
      unsigned a[C::MI][4];
      unsigned b[C::NI][2];
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi) {
        if constexpr (AK) {
          const T* p = as + (mi * 16 + (lane & 15)) * lda + kk + (lane >> 4) * 8;
          ldsm_x4(a[mi], p);
        } else {
          const int i = lane >> 3, r = lane & 7;
          const T* p = as + (kk + r + (i >> 1) * 8) * lda + mi * 16 + (i & 1) * 8;
          ldsm_x4_trans(a[mi], p);
        }
      }
#pragma unroll
      for (int n2 = 0; n2 < C::NI / 2; ++n2) {
        unsigned r[4];
        if constexpr (BKM) {
          const T* p = bs + (n2 * 16 + (lane >> 4) * 8 + (lane & 7)) * ldb + kk + ((lane >> 3) & 1) * 8;
          ldsm_x4(r, p);
        } else {
          const int i = lane >> 3, rr = lane & 7;
          const T* p = bs + (kk + rr + (i & 1) * 8) * ldb + n2 * 16 + (i >> 1) * 8;
          ldsm_x4_trans(r, p);
        }
        b[2 * n2][0] = r[0];
        b[2 * n2][1] = r[1];
        b[2 * n2 + 1][0] = r[2];
        b[2 * n2 + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < C::NI; ++ni) Mma<C::kMath>::run(acc[mi][ni], a[mi], b[ni]);
    }
  } else if constexpr (C::kMath == Math::TF32) {
    auto A = [&](int m, int k) -> float { return AK ? as[m * lda + k] : as[k * lda + m]; };
    auto B = [&](int k, int n) -> float { return BKM ? bs[n * ldb + k] : bs[k * ldb + n]; };
#pragma unroll
    for (int kk = 0; kk < C::BK; kk += 8) {
      unsigned a[C::MI][4];
      unsigned b[C::NI][2];
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi) {
        a[mi][0] = to_tf32(A(mi * 16 + g, kk + t));
        a[mi][1] = to_tf32(A(mi * 16 + g + 8, kk + t));
        a[mi][2] = to_tf32(A(mi * 16 + g, kk + t + 4));
        a[mi][3] = to_tf32(A(mi * 16 + g + 8, kk + t + 4));
      }
#pragma unroll
      for (int ni = 0; ni < C::NI; ++ni) {
        b[ni][0] = to_tf32(B(kk + t, ni * 8 + g));
        b[ni][1] = to_tf32(B(kk + t + 4, ni * 8 + g));
      }
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < C::NI; ++ni) Mma<Math::TF32>::run(acc[mi][ni], a[mi], b[ni]);
    }
  } else {  // F32: SIMT FMA on the mma C-fragment layout
    auto A = [&](int m, int k) -> float { return AK ? as[m * lda + k] : as[k * lda + m]; };
    auto B = [&](int k, int n) -> float { return BKM ? bs[n * ldb + k] : bs[k * ldb + n]; };
#pragma unroll 4
    for (int k = 0; k < C::BK; ++k) {
      float a[C::MI][2], b[C::NI][2];
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi) {
        a[mi][0] = A(mi * 16 + g, k);
        a[mi][1] = A(mi * 16 + g + 8, k);
      }
#pragma unroll
      for (int ni = 0; ni < C::NI; ++ni) {
        b[ni][0] = B(k, ni * 8 + 2 * t);
        b[ni][1] = B(k, ni * 8 + 2 * t + 1);
      }
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < C::NI; ++ni) {
          acc[mi][ni][0] = fmaf(a[mi][0], b[ni][0], acc[mi][ni][0]);
          acc[mi][ni][1] = fmaf(a[mi][0], b[ni][1], acc[mi][ni][1]);
          acc[mi][ni][2] = fmaf(a[mi][1], b[ni][0], acc[mi][ni][2]);
          acc[mi][ni][3] = fmaf(a[mi][1], b[ni][1], acc[mi][ni][3]);
        }
    }
  }
}

// pairs_col_sums adds the columns of an MN-major Hopper A stage of the
// pairs family (BK lines of BM elements, its rows of a) into sum: thread
// tid keeps the chunk q = tid mod (BM / kChunk) of the kChunk columns
// q·kChunk … and reads it in the lines tid / (BM / kChunk) + i·kStep
// (kStep = kThreads·kChunk / BM), so its sums keep one fixed order.
template <class C>
__device__ __forceinline__ void pairs_col_sums(const typename C::T* as, int tid, float (&sum)[C::kChunk]) {
  using T = typename C::T;
  constexpr int CPA = C::BM / C::kChunk, kStep = C::kThreads / CPA;
  static_assert(C::kThreads % CPA == 0 && C::BK % kStep == 0, "column sums: whole lines per pass");
  const int q = tid % CPA, k0 = tid / CPA;
#pragma unroll
  for (int i = 0; i < C::BK / kStep; ++i) {
    const uint4 raw = *reinterpret_cast<const uint4*>(as + C::mnOff(k0 + i * kStep, q * C::kChunk, C::LdMA));
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < C::kChunk; ++j) sum[j] += to_f32(e[j]);
  }
}

// A compile-time bool passed as a value (a generic lambda's template
// argument).
template <bool B> struct BoolTag {
  static constexpr bool value = B;
};

// Zeroes a warp's accumulator fragments.
template <class C> __device__ __forceinline__ void zero_acc(float (&acc)[C::MI][C::NI][4]) {
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < C::NI; ++ni)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[mi][ni][j] = 0.f;
}

// pack16 returns v0 and v1 rounded to T (16 bits) as one word, v0 in the
// low half: the pair store2 writes.
template <class T> __device__ __forceinline__ unsigned pack16(float v0, float v1) {
  const T lo = from_f32<T>(v0), hi = from_f32<T>(v1);
  return (unsigned)*reinterpret_cast<const unsigned short*>(&lo) |
         ((unsigned)*reinterpret_cast<const unsigned short*>(&hi) << 16);
}

// Stores two adjacent output elements (col, col+1) of one row; col+1 may be
// out of range (n_valid = 1) or the pair may be unaligned (pair = false).
template <class T>
__device__ __forceinline__ void store2(T* dst, float v0, float v1, int n_valid, bool pair) {
  if (n_valid >= 2 && pair) {
    if constexpr (sizeof(T) == 4) {
      *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
    } else {
      *reinterpret_cast<unsigned*>(dst) = pack16<T>(v0, v1);
    }
  } else {
    dst[0] = from_f32<T>(v0);
    if (n_valid >= 2) dst[1] = from_f32<T>(v1);
  }
}

}  // namespace fg

#include "wgmma.cuh"
#include "pdl.cuh"

namespace fg {

// ---- stage copies ----------------------------------------------------------------

// Thread layout of the 16-byte stage copies (the vec paths of both
// families, every tile): ROWS rows of CPR 16-byte chunks — a K-major row
// of a gather stage, or one k-line of an MN-major stage. CPR consecutive
// lanes take the chunks of one row, so every warp-wide copy reads whole
// lines and fills whole shared-memory rows; a thread keeps chunk
// q = tid mod CPR of kRows rows kStep apart. Its column bounds and
// shared-memory offsets are then fixed: consecutive rows of a thread are
// Dst(ld) elements apart (kStep·ld in a padded mma.sync stage of pitch
// ld; in a Hopper tile kDst, since kStep is a multiple of 8 and the
// 128-byte swizzle, row mod 8, is the same for all of a thread's rows), and
// the caller advances global addresses by a constant stride where it can.
// The address arithmetic of a copy, issued by the warps that feed the
// tensor cores, is a few instructions per row instead of dozens. A layout
// that does not Fit (a Hopper tile must) takes the generic copy loops.
template <class C, int ROWS, int CPR> struct StageCopy {
  static constexpr bool Fits = CPR <= 32 && C::kThreads % CPR == 0 && (ROWS * CPR) % C::kThreads == 0 &&
                               (C::kThreads / CPR) % (C::kHopper ? 8 : 1) == 0;
  static constexpr int kCpr = CPR;
  static constexpr int kStep = C::kThreads / CPR;
  static constexpr int kRows = ROWS * CPR / C::kThreads;
  static constexpr int kDst = kStep * (128 / C::kElem);
  // Elements between a thread's consecutive rows in a stage of row pitch
  // ld (padded mma.sync stages) or of 128-byte rows (Hopper).
  __host__ __device__ static constexpr int Dst(int ld) { return C::kHopper ? kDst : kStep * ld; }
  // Slot of line k in a pairs index ring laid out for this copy: a
  // thread's lines k0 + jj·kStep (jj < kRows) adjacent, from k0·kRows, so
  // that it reads them in 16-byte shared loads; line k itself where the
  // layout does not Fit (the generic copy loops).
  __host__ __device__ static constexpr int RingPos(int k) { return Fits ? (k % kStep) * kRows + k / kStep : k; }
  static_assert(!C::kHopper || Fits, "StageCopy: rows of at most 32 chunks, split evenly over the threads, 8-row steps");
};

// ---- gather family --------------------------------------------------------------

// A gather block's output tile (blockIdx.x: row tile m0, through the
// schedule tile_sched when there is one, and column tile n0) and its share
// of the reduction (split z = blockIdx.y): K iterations [t0, t1) of nkc per
// tap over the tile's nTaps taps (all V, or its tap segment from tapBase of
// a masked GEMM), starting at tap position vi0.
template <class C> struct GatherBlock {
  long long tileM, m0, n0;
  int z, tapBase, nTaps, nkc, nIter;
  long long t0, t1, vi0;
  // The tile of this block; split() fills in the rest.
  __device__ __forceinline__ explicit GatherBlock(const GatherParams& p) : GatherBlock(p, blockIdx.x) {}
  // The tile of block index bx of the launch's x dimension (a persistent
  // block's bx runs over several, gather_ws.cuh).
  __device__ __forceinline__ GatherBlock(const GatherParams& p, long long bx) {
    const long long tilesN = (p.N + C::BN - 1) / C::BN;
    tileM = bx / tilesN;
    if (p.tile_sched) tileM = p.tile_sched[tileM];
    m0 = tileM * C::BM;
    n0 = (bx % tilesN) * C::BN;
    z = blockIdx.y;
  }
  // Row tile tm, column tile tn, unsplit, in the tiles' index order (no
  // launch order: a stream-K piece, gather_ws.cuh).
  __device__ __forceinline__ GatherBlock(long long tm, long long tn) : tileM(tm), m0(tm * C::BM), n0(tn * C::BN), z(0) {}
  // The tile's taps and this split's iterations.
  __device__ __forceinline__ void split(const GatherParams& p) {
    taps(p);
    const long long total = (long long)nTaps * nkc;
    range((total * z + p.splits - 1) / p.splits, (total * (z + 1) + p.splits - 1) / p.splits);
  }
  // The tile's taps (its union, or all V) and K chunks per tap.
  __device__ __forceinline__ void taps(const GatherParams& p) {
    tapBase = 0;
    nTaps = (int)p.V;
    if (p.tile_seg) {
      tapBase = p.tile_seg[tileM];
      nTaps = p.tile_seg[tileM + 1] - tapBase;
    }
    nkc = (int)((p.Kc + C::BK - 1) / C::BK);
  }
  // Iterations [a, b) of the tile's nTaps · nkc (after taps()).
  __device__ __forceinline__ void range(long long a, long long b) {
    t0 = a;
    t1 = b;
    nIter = (int)(b - a);
    vi0 = nkc > 0 ? a / nkc : 0;  // Kc = 0: no iterations
  }
};

// Fills rows[0, BM) with the output row of each tile row from m0 (the
// masked order's, or m0 + i), −1 past M; threads tid, tid + stride, ….
template <class C>
__device__ __forceinline__ void gather_rows(const GatherParams& p, int* rows, long long m0, int tid, int stride) {
  for (int i = tid; i < C::BM; i += stride) {
    long long r = m0 + i;
    rows[i] = r < p.M ? (p.order ? p.order[r] : (int)r) : -1;
  }
}

// quad_transpose transposes x across the four lanes of each quad (lanes
// with the same lane / 4): afterwards lane t4's x[k] is lane k's x[t4]
// before. Two exchanges of two words with the lane two, then one, apart;
// every lane of the warp must call it.
__device__ __forceinline__ void quad_transpose(unsigned (&x)[4], int t4) {
  const bool hi = t4 & 2, odd = t4 & 1;
  unsigned s0 = hi ? x[0] : x[2], s1 = hi ? x[1] : x[3];
  s0 = __shfl_xor_sync(0xffffffffu, s0, 2);
  s1 = __shfl_xor_sync(0xffffffffu, s1, 2);
  if (hi) {
    x[0] = s0, x[1] = s1;
  } else {
    x[2] = s0, x[3] = s1;
  }
  s0 = odd ? x[0] : x[1];
  s1 = odd ? x[2] : x[3];
  s0 = __shfl_xor_sync(0xffffffffu, s0, 1);
  s1 = __shfl_xor_sync(0xffffffffu, s1, 1);
  if (odd) {
    x[0] = s0, x[2] = s1;
  } else {
    x[1] = s0, x[3] = s1;
  }
}

// from16 returns the element of T whose bits are the low 16 of w.
template <class T> __device__ __forceinline__ T from16(unsigned w) {
  const unsigned short r = (unsigned short)w;
  return *reinterpret_cast<const T*>(&r);
}

// gather_store_wide is gather_store's path for whole tiles (every column
// in range, a row's output y of T, the GEMM's type or a split's float32
// partials, 16-byte aligned at every 8-column fragment): 16-byte stores
// instead of a 4-byte (16-bit T) or 8-byte (float) store per fragment and
// row. A lane holds two columns of
// each 8-column fragment; with 16-bit T the four lanes of a quad exchange
// four consecutive fragments' pairs (quad_transpose) so that each stores
// one whole fragment row, with float the two lanes of a pair exchange two
// fragments' pairs so that each stores four columns. Sums, bias and
// rounding are store2's, in the same order, so the result is bit for bit
// gather_store's; the bias pairs are read once a fragment (a read-only
// load, not again after every store). A fragment row's store then writes
// eight 16-byte pieces of eight rows where it wrote 4- or 8-byte ones:
// a quarter (half) of the store instructions for the same lines.
template <class C, class T>
__device__ __forceinline__ void gather_store_wide(const float (&acc)[C::MI][C::NI][4], const int* rows, T* y,
                                                  const T* bias, long long N, long long nb, int wm, int lane) {
  const int g = lane >> 2, t4 = lane & 3;
  if constexpr (sizeof(T) == 2) {
    static_assert(C::NI % 4 == 0, "gather_store_wide's quads");
    const unsigned* b2 = bias ? reinterpret_cast<const unsigned*>(bias + nb + 2 * t4) : nullptr;
#pragma unroll
    for (int q = 0; q < C::NI / 4; ++q) {
      float bl[4], bh[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const unsigned w = b2 ? __ldg(b2 + (4 * q + j) * 4) : 0u;
        bl[j] = to_f32(from16<T>(w));
        bh[j] = to_f32(from16<T>(w >> 16));
      }
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          unsigned x[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            float v0 = acc[mi][4 * q + j][2 * h], v1 = acc[mi][4 * q + j][2 * h + 1];
            if (b2) {
              v0 += bl[j];
              v1 += bh[j];
            }
            x[j] = pack16<T>(v0, v1);
          }
          quad_transpose(x, t4);
          const int orow = rows[wm * C::WTM + mi * 16 + g + 8 * h];
          if (orow >= 0)
            *reinterpret_cast<uint4*>(y + (long long)orow * N + nb + (4 * q + t4) * 8) = make_uint4(x[0], x[1], x[2], x[3]);
        }
    }
  } else {
    static_assert(C::NI % 2 == 0, "gather_store_wide's pairs");
    const bool odd = t4 & 1;
    const float2* b2 = bias ? reinterpret_cast<const float2*>(bias + nb + 2 * t4) : nullptr;
#pragma unroll
    for (int pp = 0; pp < C::NI / 2; ++pp) {
      float2 ba = make_float2(0.f, 0.f), bb = ba;
      if (b2) {
        ba = __ldg(b2 + (2 * pp) * 4);
        bb = __ldg(b2 + (2 * pp + 1) * 4);
      }
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float a0 = acc[mi][2 * pp][2 * h], a1 = acc[mi][2 * pp][2 * h + 1];
          float c0 = acc[mi][2 * pp + 1][2 * h], c1 = acc[mi][2 * pp + 1][2 * h + 1];
          if (b2) {
            a0 += ba.x, a1 += ba.y;
            c0 += bb.x, c1 += bb.y;
          }
          // The even lane keeps fragment 2pp's pair and takes its
          // partner's; the odd one keeps fragment 2pp + 1's.
          const float s0 = __shfl_xor_sync(0xffffffffu, odd ? a0 : c0, 1);
          const float s1 = __shfl_xor_sync(0xffffffffu, odd ? a1 : c1, 1);
          const float4 v = odd ? make_float4(s0, s1, c0, c1) : make_float4(a0, a1, s0, s1);
          const int orow = rows[wm * C::WTM + mi * 16 + g + 8 * h];
          if (orow >= 0)
            *reinterpret_cast<float4*>(y + (long long)orow * N + nb + (2 * pp + odd) * 8 + 2 * (t4 & 2)) = v;
        }
    }
  }
}

// Epilogue of a gather GEMM: direct stores of warp (wm, wn)'s accumulator
// fragments (mma.sync C-fragment order) to the tile rows' output rows
// (rows[i], −1 = none), with the bias added in float32 before rounding,
// or to split z's float32 partials when the GEMM is split.
template <class C>
__device__ __forceinline__ void gather_store(const GatherParams& p, const float (&acc)[C::MI][C::NI][4], const int* rows,
                                             long long n0, int z, int wm, int wn, int lane) {
  using T = typename C::T;
  const int g = lane >> 2, t4 = lane & 3;
  const T* bias = reinterpret_cast<const T*>(p.bias);
  T* y = reinterpret_cast<T*>(p.y);
  const bool pairOK = (p.N & 1) == 0;
  // each_row(f): f(mi, h, orow) for every fragment row of the warp that
  // has an output row.
  auto each_row = [&](auto&& f) {
#pragma unroll
    for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int orow = rows[wm * C::WTM + mi * 16 + g + 8 * h];
        if (orow >= 0) f(mi, h, orow);
      }
  };
  if (pairOK && n0 + C::BN <= p.N) {
    // Every column of the tile in range (N a multiple of BN): no column
    // bounds to test, each row's stores one base address and immediate
    // offsets (as pairs_store's whole tiles), 16 bytes a lane where the
    // rows and the bias are aligned for it.
    const long long nb = n0 + wn * C::WTN;
    if (p.splits != 1) {
      if constexpr (C::NI % 2 == 0) {
        float* part = p.part + (long long)z * p.M * p.N;
        if ((p.N & 3) == 0 && (reinterpret_cast<unsigned long long>(part) & 15) == 0) {
          gather_store_wide<C, float>(acc, rows, part, nullptr, p.N, nb, wm, lane);
          return;
        }
      }
    } else if constexpr (C::NI % (sizeof(T) == 2 ? 4 : 2) == 0) {
      if ((p.N & (16 / sizeof(T) - 1)) == 0 && (reinterpret_cast<unsigned long long>(y) & 15) == 0 &&
          (reinterpret_cast<unsigned long long>(bias) & (2 * sizeof(T) - 1)) == 0) {
        gather_store_wide<C, T>(acc, rows, y, bias, p.N, nb, wm, lane);
        return;
      }
    }
    const long long c0 = n0 + wn * C::WTN + 2 * t4;
    each_row([&](int mi, int h, int orow) {
      if (p.splits != 1) {
        float* r = p.part + ((long long)z * p.M + orow) * p.N + c0;
#pragma unroll
        for (int ni = 0; ni < C::NI; ++ni) store2<float>(r + ni * 8, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1], 2, true);
      } else {
        T* r = y + (long long)orow * p.N + c0;
#pragma unroll
        for (int ni = 0; ni < C::NI; ++ni) {
          float v0 = acc[mi][ni][2 * h], v1 = acc[mi][ni][2 * h + 1];
          if (bias) {
            v0 += to_f32(bias[c0 + ni * 8]);
            v1 += to_f32(bias[c0 + ni * 8 + 1]);
          }
          store2<T>(r + ni * 8, v0, v1, 2, true);
        }
      }
    });
    return;
  }
  each_row([&](int mi, int h, int orow) {
#pragma unroll
    for (int ni = 0; ni < C::NI; ++ni) {
      const long long col = n0 + wn * C::WTN + ni * 8 + 2 * t4;
      if (col >= p.N) continue;
      const int nv = col + 1 < p.N ? 2 : 1;
      float v0 = acc[mi][ni][2 * h], v1 = acc[mi][ni][2 * h + 1];
      if (p.splits == 1) {
        if (bias) {
          v0 += to_f32(bias[col]);
          if (nv == 2) v1 += to_f32(bias[col + 1]);
        }
        store2<T>(y + (long long)orow * p.N + col, v0, v1, nv, pairOK);
      } else {
        store2<float>(p.part + ((long long)z * p.M + orow) * p.N + col, v0, v1, nv, pairOK);
      }
    }
  });
}

// WT: the weight is stored [Kc, V, N] and read transposed (the _wt kernels,
// launched with p.wt = 1).
template <class C, bool WT> __device__ __forceinline__ void gather_gemm(const GatherParams& p) {
  using T = typename C::T;
  using Raw = typename C::Raw;
  static_assert(!(C::kHopper && WT) || C::kElem == 2, "a tf32 Hopper tile reads the weight as stored (dgrad multiplies a transpose)");
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int ASt = C::kGatherAStage, BSt = C::kGatherBSt;
  // A Hopper tile's stages start at the next 1 KiB boundary.
  unsigned char* base = C::kHopper ? smem + ((1024 - (smem_addr(smem) & 1023)) & 1023) : smem;
  T* As = reinterpret_cast<T*>(base);      // [S][BM][LdK], Hopper: [S][BM][BK] swizzled
  T* Bs = As + C::S * ASt;                 // [S][BN][LdK], or [S][BK][LdMB] when wt; Hopper: [S][BN][BK]
  int* rows = reinterpret_cast<int*>(Bs + C::S * BSt);  // [BM] output row or -1
  // Neighbour indices and tap of the taps in flight: a ring of kIdxRing
  // slots keyed by the tap's position in this block's tap sequence. The
  // indices tbl[rows[i], v] of a tap travel (4-byte cp.async) in the group
  // of the operands issued S − 1 iterations before the tap's first
  // iteration, so when its row gathers are issued the source rows are
  // already in shared memory: no global index load stalls an iteration.
  constexpr int R = C::kIdxRing;
  int* sSrc = rows + C::BM;   // [R][BM] source row of each tile row, −1 where absent or past M
  int* sTap = sSrc + R * C::BM;  // [R] weight tap of each slot

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / C::WN, wn = warp % C::WN;
  GatherBlock<C> blk(p);
  const long long m0 = blk.m0, n0 = blk.n0;
  const int z = blk.z;
  gather_rows<C>(p, rows, m0, tid, C::kThreads);
  blk.split(p);
  const int tapBase = blk.tapBase, nTaps = blk.nTaps, nkc = blk.nkc;
  const long long t0 = blk.t0;
  const int nIter = blk.nIter;
  const long long vi0 = blk.vi0;
  __syncthreads();

  const T* x = reinterpret_cast<const T*>(p.x);
  const T* w = reinterpret_cast<const T*>(p.w);

  // load_idx(j) issues the copies of the tap and neighbour indices needed
  // by iteration j when j starts a tap (its first iteration in this
  // split); load(s) the operands of the next iteration into stage s. Both
  // are called once per iteration, in order, so each keeps a cursor (tap
  // position, K chunk) advanced by one iteration per call instead of a
  // 64-bit division per call.
  long long ixV = vi0, ldV = vi0;
  int ixKc = (int)(t0 - vi0 * nkc), ldKc = ixKc;
  auto advance = [&](long long& vv, int& kc) {
    if (++kc == nkc) {
      kc = 0;
      ++vv;
    }
  };
  // The tap of the next tap position is read from global memory one
  // tap-starting call ahead (vNext): a load consumed in the same call
  // would put an L2 round trip before every tap's index copies, and the
  // next barrier makes every warp wait for it.
  auto tapAt = [&](long long vi) -> int {
    if (vi >= nTaps) return 0;
    return p.tile_taps ? p.tile_taps[tapBase + vi] : (int)vi;
  };
  int vNext = tapAt(vi0);
  auto load_idx = [&](int j) {
    const long long vi = ixV;
    const int kc = ixKc;
    advance(ixV, ixKc);
    if (j != 0 && kc != 0) return;
    const int slot = (int)(vi - vi0) % R;
    const int v = vNext;  // tap position vi: tap-starting calls visit vi0, vi0 + 1, …
    vNext = tapAt(vi + 1);
    if (tid == 0) sTap[slot] = p.mirror ? (int)p.V - 1 - v : v;  // the weight's tap
    if (p.tbl) {
      int* d = sSrc + slot * C::BM;
#pragma unroll
      for (int k = 0; k < (C::BM + C::kThreads - 1) / C::kThreads; ++k) {
        const int i = tid + k * C::kThreads;
        if (C::BM % C::kThreads == 0 || i < C::BM) {
          // Absent rows (past M) get −1 by a plain store (visible to the
          // readers after the barriers between), so a reader needs only
          // the slot.
          const int orow = rows[i];
          if (orow >= 0)
            cp_async4(d + i, tbl_entry(p, orow, v), true);
          else
            d[i] = -1;
        }
      }
    }
  };

  auto load = [&](int s) {
    const long long vi = ldV;
    const int kc = ldKc;
    advance(ldV, ldKc);
    const int slot = (int)(vi - vi0) % R;
    const int v = sTap[slot];
    const int* ss = sSrc + slot * C::BM;
    // Source row of tile row i for this tap, or -1 (absent / past M).
    auto srcOf = [&](int i) -> int { return p.tbl ? ss[i] : rows[i]; };
    // Element offset of source row src (clamped to row 0 when absent: the
    // copy is then masked off but its address stays inside x).
    auto rowOff = [&](int src) -> unsigned long long {
      return (unsigned long long)(unsigned)max(src, 0) * (unsigned)p.Kc;
    };
    const long long col0 = (long long)kc * C::BK;
    T* as = As + s * ASt;
    T* bs = Bs + s * BSt;
    constexpr int CPR = C::BK / C::kChunk;  // 16-byte chunks per tile row
    constexpr int CPB = C::BN / C::kChunk;  // 16-byte chunks per MN-major B row (wt)
    using SA = StageCopy<C, C::BM, CPR>;
    using SB = StageCopy<C, WT ? C::BK : C::BN, WT ? CPB : CPR>;
    if constexpr (SA::Fits && SB::Fits) {
      if (p.vec) {
        // A: tile rows gathered by source row (one shared-memory read and
        // one 32-bit multiply per row).
        const int q = tid % CPR, r0 = tid / CPR;
        const int kq = q * C::kChunk;
        const bool qok = col0 + kq < p.Kc;
        const T* xq = x + col0 + kq;
        T* da = as + C::kOff(r0, kq);
        // Every source row first, then the copies (as in pairs_gemm: a
        // shared read between copies waits for its own round trip).
        int src[SA::kRows];
#pragma unroll
        for (int j = 0; j < SA::kRows; ++j) src[j] = srcOf(r0 + j * SA::kStep);
#pragma unroll
        for (int j = 0; j < SA::kRows; ++j) cp_async16(da + j * SA::Dst(C::LdK), xq + rowOff(src[j]), qok && src[j] >= 0);
        // B: weight rows a constant stride apart.
        if constexpr (WT) {
          const int qb = tid % CPB, k0 = tid / CPB;
          const bool nok = n0 + qb * C::kChunk < p.N;
          const long long stride = p.V * p.N;
          const T* wp = w + ((col0 + k0) * p.V + v) * p.N + n0 + qb * C::kChunk;
          T* db = bs + C::mnOff(k0, qb * C::kChunk, C::LdMB);
#pragma unroll
          for (int j = 0; j < SB::kRows; ++j) {
            cp_async16(db + j * SB::Dst(C::LdMB), wp, nok && col0 + k0 + j * SB::kStep < p.Kc);
            wp += SB::kStep * stride;
          }
        } else {
          const long long stride = p.V * p.Kc;
          const T* wp = w + ((n0 + r0) * p.V + v) * p.Kc + col0 + kq;
          T* db = bs + C::kOff(r0, kq);
#pragma unroll
          for (int j = 0; j < SB::kRows; ++j) {
            cp_async16(db + j * SB::Dst(C::LdK), wp, qok && n0 + r0 + j * SB::kStep < p.N);
            wp += SB::kStep * stride;
          }
        }
        return;
      }
    }
    if (p.vec) {
#pragma unroll
      for (int c0 = 0; c0 < C::BM * CPR; c0 += C::kThreads) {
        const int c = c0 + tid;
        if (C::BM * CPR % C::kThreads == 0 || c < C::BM * CPR) {
          const int i = c / CPR, kk = (c % CPR) * C::kChunk;
          const int src = srcOf(i);
          const long long col = col0 + kk;
          const bool ok = src >= 0 && col < p.Kc;
          cp_async16(as + C::kOff(i, kk), ok ? x + rowOff(src) + col : x, ok);
        }
      }
      if constexpr (WT) {
#pragma unroll
        for (int c0 = 0; c0 < C::BK * CPB; c0 += C::kThreads) {
          const int c = c0 + tid;
          if (C::BK * CPB % C::kThreads == 0 || c < C::BK * CPB) {
            const int kk = c / CPB, nn = (c % CPB) * C::kChunk;
            const long long n = n0 + nn, col = col0 + kk;
            const bool ok = n < p.N && col < p.Kc;
            cp_async16(bs + C::mnOff(kk, nn, C::LdMB), ok ? w + (col * p.V + v) * p.N + n : w, ok);
          }
        }
      } else {
#pragma unroll
        for (int c0 = 0; c0 < C::BN * CPR; c0 += C::kThreads) {
          const int c = c0 + tid;
          if (C::BN * CPR % C::kThreads == 0 || c < C::BN * CPR) {
            const int i = c / CPR, kk = (c % CPR) * C::kChunk;
            const long long n = n0 + i, col = col0 + kk;
            const bool ok = n < p.N && col < p.Kc;
            cp_async16(bs + C::kOff(i, kk), ok ? w + (n * p.V + v) * p.Kc + col : w, ok);
          }
        }
      }
    } else {
      const Raw* xr = reinterpret_cast<const Raw*>(x);
      const Raw* wr = reinterpret_cast<const Raw*>(w);
      Raw* ar = reinterpret_cast<Raw*>(as);
      Raw* br = reinterpret_cast<Raw*>(bs);
      for (int c = tid; c < C::BM * C::BK; c += C::kThreads) {
        const int i = c / C::BK, kk = c % C::BK;
        const int src = srcOf(i);
        const long long col = col0 + kk;
        ar[C::kOff(i, kk)] = (src >= 0 && col < p.Kc) ? xr[(long long)src * p.Kc + col] : Raw(0);
      }
      if constexpr (WT) {
        for (int c = tid; c < C::BK * C::BN; c += C::kThreads) {
          const int kk = c / C::BN, nn = c % C::BN;
          const long long n = n0 + nn, col = col0 + kk;
          br[C::mnOff(kk, nn, C::LdMB)] = (n < p.N && col < p.Kc) ? wr[(col * p.V + v) * p.N + n] : Raw(0);
        }
      } else {
        for (int c = tid; c < C::BN * C::BK; c += C::kThreads) {
          const int i = c / C::BK, kk = c % C::BK;
          const long long n = n0 + i, col = col0 + kk;
          br[C::kOff(i, kk)] = (n < p.N && col < p.Kc) ? wr[(n * p.V + v) * p.Kc + col] : Raw(0);
        }
      }
    }
  };

  float acc[C::MI][C::NI][4];
  zero_acc<C>(acc);

  // Group g holds the operands of iteration g and the indices of
  // iteration g + D (when it starts a tap), D = kDist stages ahead; the
  // indices of iterations 0 … D − 1 come first, in a group of their own
  // that is waited for. A slot is rewritten at least one barrier after its
  // last reader (the ring holds 2·S taps and every tap takes at least one
  // iteration).
  constexpr int D = C::kDist;
  for (int j = 0; j < D; ++j)
    if (j < nIter) load_idx(j);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int s = 0; s < D; ++s) {
    if (s < nIter) load(s);
    if (s + D < nIter) load_idx(s + D);
    cp_async_commit();
  }
  for (int it = 0; it < nIter; ++it) {
    cp_async_wait<D - 1>();
    if constexpr (C::kHopper) fence_proxy_async();
    __syncthreads();
    const int s = it % C::S;
    if constexpr (C::kHopper)
      // Warpgroup warp/4 multiplies tile rows 64·(warp/4) … (its group
      // runs while the copies below are issued).
      wgmma_stage<C, false, WT>(&acc[0][0][0], smem_addr(As + s * ASt + (warp >> 2) * 64 * C::BK),
                                smem_addr(Bs + s * BSt), 16, C::kMnLbo);
    else if constexpr (WT)
      warp_mma<C, true, false>(acc, As + s * ASt + wm * C::WTM * C::LdK, Bs + s * BSt + wn * C::WTN, C::LdK,
                               C::LdMB, lane);
    else
      warp_mma<C, true, true>(acc, As + s * ASt + wm * C::WTM * C::LdK, Bs + s * BSt + wn * C::WTN * C::LdK,
                              C::LdK, C::LdK, lane);
    const int nx = it + D;
    if (nx < nIter) load(nx % C::S);
    if (nx + D < nIter) load_idx(nx + D);
    cp_async_commit();
    // Hopper: retire the previous iteration's group, whose stage the next
    // iteration's copies refill (the barrier there covers the other
    // warpgroups).
    if constexpr (C::kHopper) wgmma_wait<1>();
  }
  cp_async_wait<0>();
  if constexpr (C::kHopper) wgmma_wait<0>();
  gather_store<C>(p, acc, rows, n0, z, wm, wn, lane);
}

// ---- pairs family -----------------------------------------------------------------

// PairsTap is the pair list of tap v of a weight gradient over the lists
// seg (see PairsParams): its own segment [s0, s1); with mirror, for a tap
// past the centre H = (V − 1)/2 the segment of tap vs = V − 1 − v read the
// other way round (flip: a pair (i, o) of tap v is the pair (o, i) of its
// mirror tap), and for the centre (or without seg) [0, K), the identity.
struct PairsTap {
  long long s0, s1;
  int vs;
  bool centre, flip;
  __device__ __forceinline__ PairsTap(const long long* seg, long long mirror, long long V, long long K, int v) {
    const int H = (int)(V - 1) / 2;
    centre = mirror && v == H;
    flip = mirror && v > H;
    vs = flip ? (int)V - 1 - v : v;
    s0 = seg && !centre ? seg[vs] : 0;
    s1 = seg && !centre ? seg[vs + 1] : K;
  }
  // slices returns the split slices the tap uses: every one of splits, or
  // with chunk > 0 (the balanced split) about one per chunk reduction
  // steps of bk pairs, at least one. The pairs kernels and
  // spconv_reduce_taps_* both count with it (pairs_tap_slices), so a tap's
  // other slices are neither written nor read.
  __device__ __forceinline__ long long slices(long long bk, long long chunk, long long splits) const {
    if (chunk <= 0) return splits;
    const long long total = (s1 - s0 + bk - 1) / bk;
    return min(splits, max(1ll, (total + chunk - 1) / chunk));
  }
};

// pairs_tap_slices is PairsTap(seg, mirror, V, K, v).slices(bk, chunk,
// splits), without reading seg when every tap uses every slice.
__device__ __forceinline__ long long pairs_tap_slices(const long long* seg, long long mirror, long long V, long long K,
                                                      int v, long long bk, long long chunk, long long splits) {
  if (chunk <= 0) return splits;
  return PairsTap(seg, mirror, V, K, v).slices(bk, chunk, splits);
}

// taps_by_length_word packs the taps of a 3×3×3 kernel (index (a·3 + b)·3
// + c for offsets a, b, c − 1), sorted by the length |a − 1| + |b − 1| +
// |c − 1| of their offset and then by index, five bits each, twelve to a
// word: ranks 12·w to 12·w + 11 in word w. Built at compile time, so
// pairs_block_of reads a tap from an immediate (a loop over the 27 taps
// per block cost about 5 µs before the first load: session 26, call 2).
__host__ __device__ constexpr unsigned long long taps_by_length_word(int w) {
  unsigned long long word = 0;
  int k = 0;
  for (int len = 0; len < 4; ++len)
    for (int t = 0; t < 27; ++t)
      if ((t / 9 != 1) + (t / 3 % 3 != 1) + (t % 3 != 1) == len) {
        if (k / 12 == w) word |= (unsigned long long)t << (5 * (k % 12));
        ++k;
      }
  return word;
}

// pairs_block_of maps this block's place in the dispatch order (the
// linear index of blockIdx in a grid of tiles × 27 taps × splits, x
// fastest) to the tile bx, tap v and split z it computes when the blocks
// run in groups of g splits (PairsParams.order_groups): within a group the
// taps by the length |dx| + |dy| + |dz| of their offset (then by index),
// for each tap the group's splits, for each split its tiles. The long
// blocks (the centre and the taps in a slab's plane carry most pairs) then
// start first in every group instead of in the middle of each split, so
// fewer of them end the launch (bench pairsched models it). Every block
// still does exactly one (tile, tap, split) and writes the same partials.
__device__ __forceinline__ void pairs_block_of(long long g, long long& bx, int& v, int& z) {
  constexpr unsigned long long w0 = taps_by_length_word(0), w1 = taps_by_length_word(1),
                               w2 = taps_by_length_word(2);
  const long long T = gridDim.x, V = gridDim.y, S = gridDim.z;
  const long long L = blockIdx.x + T * (blockIdx.y + V * (long long)blockIdx.z);
  const long long per = g * V * T;  // blocks of a full group
  const long long grp = L / per, z0 = grp * g, gs = min(g, S - z0);
  const long long r = L - grp * per;
  const int rank = (int)(r / (gs * T));
  z = (int)(z0 + (r / T) % gs);
  bx = r % T;
  const unsigned long long word = rank < 12 ? w0 : rank < 24 ? w1 : w2;
  v = (int)((word >> (5 * (rank % 12))) & 31);
}

// A pairs block's output tile (blockIdx.x: row tile m0 and column tile
// n0 of the [M, N] product of tap v = blockIdx.y) and its share of the
// tap's pair list (split z = blockIdx.z): the lists ia / ib (null: the
// identity), the pair range [s0, s1) and the reduction steps [t0, t0 +
// nIter) of BK pairs. none: a balanced split's slice the tap does not use
// (the reduction skips it: spconv_reduce_taps_*).
template <class C> struct PairsBlock {
  long long m0, n0, s0, s1, t0;
  int v, z, nIter;
  const int* ia;
  const int* ib;
  bool none, centre;
  __device__ __forceinline__ explicit PairsBlock(const PairsParams& p) {
    const long long tilesN = (p.N + C::BN - 1) / C::BN;
    long long bx = blockIdx.x;
    v = blockIdx.y;
    z = blockIdx.z;
    if (p.order_groups > 0) pairs_block_of(p.order_groups, bx, v, z);
    m0 = (bx / tilesN) * C::BM;
    n0 = (bx % tilesN) * C::BN;
    const PairsTap tap(p.seg, p.mirror, p.V, p.K, v);
    const long long sv = tap.slices(C::BK, p.chunk, p.splits);
    none = z >= sv;
    centre = tap.centre;
    ia = centre ? nullptr : tap.flip ? p.ib : p.ia;
    ib = centre ? nullptr : tap.flip ? p.ia : p.ib;
    s0 = tap.s0;
    s1 = tap.s1;
    long long t1;
    if (p.off && p.chunk == 0 && p.splits > 1) {
      // Row slices: the pairs of this split's output rows (the lists are in
      // output-row order), so the blocks of one split read the same rows.
      const long long c0 = p.nc * z / p.splits, c1 = p.nc * (z + 1) / p.splits;
      if (centre) {
        s0 = min(c0 * p.off_rows, p.K);
        s1 = min(c1 * p.off_rows, p.K);
      } else {
        const long long* o = p.off + (long long)tap.vs * p.nc;
        const long long end = s1;
        s0 = o[c0];
        s1 = c1 < p.nc ? o[c1] : end;
      }
      t0 = 0;
      t1 = (s1 - s0 + C::BK - 1) / C::BK;
    } else {
      // Slice z of the tap's sv: an equal share of its reduction steps.
      const long long total = (s1 - s0 + C::BK - 1) / C::BK;
      t0 = (total * z + sv - 1) / sv;
      t1 = (total * (z + 1) + sv - 1) / sv;
    }
    nIter = none ? 0 : (int)(t1 - t0);
  }
};

// store_frags stores a warp's accumulator fragments (mma.sync C-fragment
// order) whose rows and columns are all in range: first points at the
// thread's element of fragment row 0, column 0 (row g, column 2·t4 of the
// warp tile), rows are ld elements apart and every pair of columns is
// aligned (even ld and column).
template <class C, class T>
__device__ __forceinline__ void store_frags(T* first, long long ld, const float (&acc)[C::MI][C::NI][4]) {
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      T* row = first + (mi * 16 + 8 * h) * ld;
#pragma unroll
      for (int ni = 0; ni < C::NI; ++ni) store2<T>(row + ni * 8, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1], 2, true);
    }
}

// pairs_store_staged stores a whole tile (rows m0 …, columns n0 … of tap
// v, all in range; out [M, V, N] of OT, a 16-byte multiple per row of
// N) of a Hopper pairs kernel (WN = 1) through shared memory at stage (the
// free pipeline stages; the caller has passed a barrier after the last
// wgmma): each warp writes its fragments into rows of BN + 16/sizeof(OT)
// elements (the pad makes both the fragment writes and the row reads free
// of bank conflicts), then every thread stores 16-byte chunks of whole
// rows, so each warp-wide store covers full 32-byte sectors of one row
// instead of half sectors of eight.
template <class C, class OT>
__device__ __forceinline__ void pairs_store_staged(OT* out, const PairsParams& p, const float (&acc)[C::MI][C::NI][4],
                                                   long long m0, long long n0, int v, int wm, int lane, int tid,
                                                   unsigned char* stage) {
  static_assert(C::WN == 1, "a Hopper tile's warps own whole rows");
  constexpr int kPad = 16 / (int)sizeof(OT), kLd = C::BN + kPad, kCpr = C::BN * (int)sizeof(OT) / 16;
  static_assert(C::BM * kLd * (int)sizeof(OT) <= C::S * (C::kPairsAStage + C::kPairsBStage) * C::kElem,
                "a staged tile fits the pipeline stages");
  OT* st = reinterpret_cast<OT*>(stage);
  const int g = lane >> 2, t4 = lane & 3;
  store_frags<C>(st + (wm * C::WTM + g) * kLd + 2 * t4, kLd, acc);
  __syncthreads();
  const long long ldo = p.V * p.N;
  OT* o = out + m0 * ldo + (long long)v * p.N + n0;
#pragma unroll 4
  for (int c = tid; c < C::BM * kCpr; c += C::kThreads) {
    const int r = c / kCpr, q = c % kCpr;
    const uint4 val = *reinterpret_cast<const uint4*>(st + r * kLd + q * (16 / (int)sizeof(OT)));
    *reinterpret_cast<uint4*>(o + r * ldo + q * (16 / (int)sizeof(OT))) = val;
  }
}

// pairs_store_ordered ends block (tile (m0, n0), tap v, split z) of a
// Hopper pairs kernel launched with PairsParams.tickets (whole tiles, part
// a float32 [M, V, N] sum): its fragments go to shared memory at stage (as
// pairs_store_staged), then, once split z − 1 of the same (tap, tile) has
// added its products (the tap's ticket reads z), every thread adds its
// 16-byte runs of the tile into part (split 0 into zeros) and the block
// sets the ticket to z + 1, or back to 0 after the last split. So part
// holds ((0 + p₀) + p₁) + … in split order: what spconv_reduce computes
// from the partials, bit for bit, with no partials and no reduction
// launch. When part is a scratch sum (out is in T, not float32: part !=
// out) the last split writes its sums rounded to T into out instead, as
// spconv_reduce rounds them. The blocks run split-major (the launch order, or
// pairs_block_of's groups, which keep a (tap, tile)'s splits in order), so
// split z − 1 was dispatched before split z and never waits for it: the
// wait ends. One that does not (a dispatch out of order) traps rather than
// hangs.
template <class C>
__device__ __forceinline__ void pairs_store_ordered(const PairsParams& p, const float (&acc)[C::MI][C::NI][4],
                                                    long long m0, long long n0, int v, int z, int wm, int lane,
                                                    int tid, unsigned char* stage) {
  static_assert(C::WN == 1, "a Hopper tile's warps own whole rows");
  constexpr int kLd = C::BN + 4, kCpr = C::BN / 4;
  static_assert(C::BM * kLd * 4 <= C::S * (C::kPairsAStage + C::kPairsBStage) * C::kElem,
                "a staged tile fits the pipeline stages");
  float* st = reinterpret_cast<float*>(stage);
  const int g = lane >> 2, t4 = lane & 3;
  store_frags<C>(st + (wm * C::WTM + g) * kLd + 2 * t4, kLd, acc);
  const long long tilesN = (p.N + C::BN - 1) / C::BN, tiles = (p.M + C::BM - 1) / C::BM * tilesN;
  unsigned* ticket = p.tickets + (long long)v * tiles + m0 / C::BM * tilesN + n0 / C::BN;
  if (tid == 0) {
    long long spins = 0;
    while (ld_acquire(ticket) != (unsigned)z) {
      if (++spins > (1ll << 22)) __trap();  // split z − 1 never added (seconds, against a block's µs to ms): fail, do not hang
      __nanosleep(64);
    }
  }
  __syncthreads();
  const long long ldo = p.V * p.N, at = m0 * ldo + (long long)v * p.N + n0;
  float* o = p.part + at;
  // The last split of a narrow result rounds its sums into out.
  using T = typename C::T;
  T* narrow = z + 1 == p.splits && static_cast<const void*>(p.part) != p.out ? reinterpret_cast<T*>(p.out) + at : nullptr;
#pragma unroll 4
  for (int c = tid; c < C::BM * kCpr; c += C::kThreads) {
    const int r = c / kCpr, q = c % kCpr;
    float4* dst = reinterpret_cast<float4*>(o + r * ldo + q * 4);
    const float4 a = *reinterpret_cast<const float4*>(st + r * kLd + q * 4);
    float4 sum = z == 0 ? make_float4(0.f, 0.f, 0.f, 0.f) : __ldcg(dst);
    sum.x += a.x;
    sum.y += a.y;
    sum.z += a.z;
    sum.w += a.w;
    if (narrow) {
      static_assert(sizeof(T) == 2, "Hopper pairs tiles are 16-bit");
      *reinterpret_cast<uint2*>(narrow + r * ldo + q * 4) = make_uint2(pack16<T>(sum.x, sum.y), pack16<T>(sum.z, sum.w));
    } else {
      __stcg(dst, sum);
    }
  }
  __threadfence();
  __syncthreads();
  if (tid == 0) st_release(ticket, z + 1 == p.splits ? 0u : (unsigned)z + 1);
}

// Epilogue of a pairs GEMM: warp (wm, wn)'s accumulator fragments
// (mma.sync C-fragment order) to rows m0 … and columns n0 … of tap v of
// the [M, V, N] result, or to split z's float32 partials.
template <class C>
__device__ __forceinline__ void pairs_store(const PairsParams& p, const float (&acc)[C::MI][C::NI][4], long long m0,
                                            long long n0, int v, int z, int wm, int wn, int lane) {
  using T = typename C::T;
  const int g = lane >> 2, t4 = lane & 3;
  const long long ldo = p.V * p.N;  // row pitch of [M, V, N]
  const bool pairOK = (p.N & 1) == 0;
  T* out = reinterpret_cast<T*>(p.out);
  if (pairOK && m0 + C::BM <= p.M && n0 + C::BN <= p.N) {
    // A whole tile inside the result (every tile of a weight gradient
    // whose M and N are multiples of the tile's): no bounds to test, and
    // each row's stores are one base address and immediate offsets. The
    // general path below spent about 2,200 instructions per warp here in
    // the 128×256 tile (71 % of a RES 8 block's stall samples, most of
    // them waiting for instruction fetch; H200, session 30, Nsight source
    // counters). A Hopper tile whose rows are 16-byte multiples stores
    // its whole tiles through shared memory instead (pairs_store_staged).
    const long long first = (m0 + wm * C::WTM + g) * ldo + (long long)v * p.N + n0 + wn * C::WTN + 2 * t4;
    if (p.part == nullptr)
      store_frags<C>(out + first, ldo, acc);
    else
      store_frags<C>(p.part + (long long)z * p.M * ldo + first, ldo, acc);
    return;
  }
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long m = m0 + wm * C::WTM + mi * 16 + g + 8 * h;
      if (m >= p.M) continue;
#pragma unroll
      for (int ni = 0; ni < C::NI; ++ni) {
        const long long n = n0 + wn * C::WTN + ni * 8 + 2 * t4;
        if (n >= p.N) continue;
        const int nv = n + 1 < p.N ? 2 : 1;
        const long long off = m * ldo + (long long)v * p.N + n;
        if (p.part == nullptr) {
          store2<T>(out + off, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1], nv, pairOK);
        } else {
          store2<float>(p.part + (long long)z * p.M * ldo + off, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1], nv,
                        pairOK);
        }
      }
    }
}

template <class C> __device__ __forceinline__ void pairs_gemm(const PairsParams& p) {
  using T = typename C::T;
  using Raw = typename C::Raw;
  static_assert(!C::kHopper || C::kElem == 2, "Hopper pairs tiles are 16-bit only (tf32 wgmma reads K-major operands)");
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int ASt = C::kPairsAStage, BSt = C::kPairsBStage;
  // A Hopper tile's stages start at the next 1 KiB boundary.
  unsigned char* base = C::kHopper ? smem + ((1024 - (smem_addr(smem) & 1023)) & 1023) : smem;
  T* As = reinterpret_cast<T*>(base);    // [S][BK][LdMA], Hopper: [S] MN-major swizzled
  T* Bs = As + C::S * ASt;               // [S][BK][LdMB], Hopper: [S] MN-major swizzled
  // Pair indices of the iterations in flight: ring of kIdxRing slots of BK
  // entries for ia and for ib. The indices of iteration j travel with the
  // operands of iteration j − (S − 1) (one cp.async group), so when the
  // operands of j are issued their rows are already in shared memory: no
  // global index load stalls the pipeline.
  constexpr int R = C::kIdxRing;
  int* sIA = reinterpret_cast<int*>(Bs + C::S * BSt);  // [R][BK]
  int* sIB = sIA + R * C::BK;                                         // [R][BK]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / C::WN, wn = warp % C::WN;
  const PairsBlock<C> blk(p);
  if (blk.none) return;
  const long long m0 = blk.m0, n0 = blk.n0, s0 = blk.s0, s1 = blk.s1, t0 = blk.t0;
  const int v = blk.v, z = blk.z, nIter = blk.nIter;
  const int* ia = blk.ia;
  const int* ib = blk.ib;

  const T* a = reinterpret_cast<const T*>(p.a);
  const T* b = reinterpret_cast<const T*>(p.b);
  // The copies of a stage: a thread's k-lines of a (SA) and of b (SB),
  // where the layouts fit; the index rings are laid out for them.
  constexpr int CPA = C::BM / C::kChunk, CPB = C::BN / C::kChunk;
  using SA = StageCopy<C, C::BK, CPA>;
  using SB = StageCopy<C, C::BK, CPB>;
  // A thread's part of those copies, the same in every stage: chunk q of
  // k-lines k0 + jj·kStep of src [*, width] from column c0; the chunk's
  // byte address in row 0, the row pitch in bytes, its shared address in
  // stage 0 and its size (16, or 0 past the column bound).
  struct LineCopy {
    const char* src;
    unsigned rowBytes, dst;
    int n, k0;
  };
  auto lineCopy = [&](auto layout, const T* src, long long c0, long long width, T* stage0, int ld) {
    using SC = decltype(layout);
    const int q = tid % SC::kCpr, k0 = tid / SC::kCpr;
    return LineCopy{reinterpret_cast<const char*>(src + c0 + q * C::kChunk), (unsigned)width * (unsigned)sizeof(T),
                    smem_addr(stage0 + C::mnOff(k0, q * C::kChunk, ld)), c0 + q * C::kChunk < width ? 16 : 0, k0};
  };
  const LineCopy lcA = lineCopy(SA{}, a, m0, p.M, As, C::LdMA);
  const LineCopy lcB = lineCopy(SB{}, b, n0, p.N, Bs, C::LdMB);

  // Issues the copies of the pair indices of iteration j (= t − t0) into
  // ring slot j % R, pair k of a at slot position SA::RingPos(k), of b at
  // SB::RingPos(k).
  auto load_idx = [&](long long t, int j) {
    const long long pb = s0 + t * C::BK;
    int* da = sIA + (j % R) * C::BK;
    int* db = sIB + (j % R) * C::BK;
    // Pairs past the segment (k ≥ lim) get index 0: their operand copies
    // are masked off, so the row they name is never read.
    const int lim = (int)min((long long)C::BK, s1 - pb);
#pragma unroll
    for (int r = 0; r < (C::BK + C::kThreads - 1) / C::kThreads; ++r) {
      const int k = tid + r * C::kThreads;
      if (C::BK % C::kThreads == 0 || k < C::BK) {
        const bool ok = k < lim;
        if (ia) cp_async4(da + SA::RingPos(k), ia + (ok ? pb + k : 0), ok);
        if (ib) cp_async4(db + SB::RingPos(k), ib + (ok ? pb + k : 0), ok);
      }
    }
  };

  auto load = [&](long long t, int s, int j) {
    const long long pb = s0 + t * C::BK;
    T* as = As + s * ASt;
    T* bs = Bs + s * BSt;
    const int* ria = sIA + (j % R) * C::BK;
    const int* rib = sIB + (j % R) * C::BK;
    if constexpr (SA::Fits && SB::Fits) {
      if (p.vec) {
        // One k-line per pair: a row of a (ia) and of b (ib), MN-major.
        // A thread copies chunk q of k-lines k0 + jj·kStep of one operand
        // (src [*, width], its columns c0 …, pair rows idx or pb + k): its
        // column bound and destinations are fixed, only the pair's row
        // changes. Each operand's rows are read from the index ring before
        // its first copy is issued: read between the copies, each read
        // waited for its own shared-memory round trip (ptxas keeps shared
        // loads behind earlier cp.async), which bounded the kernel
        // (session 27: a third of its warps' samples on the multiply that
        // took the row). The rows of b are read after a's copies, not
        // with a's: fewer registers live (the 128×256 tile 216 → 208, and
        // 3.7–5.4 % faster).
        //
        // Each copy is one multiply-add and one LDGSTS (session 28): a
        // thread's rows are adjacent in the ring (SA/SB::RingPos), read
        // in 16-byte loads; its source is row · row bytes added to the
        // chunk's address in row 0 (row_addr); destination and size are
        // set once per kernel (lcA, lcB), the size cut by the segment's
        // end only in the stage that holds it (lim < BK, a slice's last).
        const int lim = (int)min((long long)C::BK, s1 - pb);
        auto linesOf = [&](auto layout, const int* idx, const int* ring, int k0, unsigned (&row)[decltype(layout)::kRows]) {
          using SC = decltype(layout);
          if (idx) {
            lds_ints<SC::kRows>(ring + k0 * SC::kRows, row);
          } else {
#pragma unroll
            for (int jj = 0; jj < SC::kRows; ++jj) row[jj] = (unsigned)(pb + k0 + jj * SC::kStep);
          }
        };
        auto copyLines = [&](auto layout, auto fullTag, const LineCopy& lc, unsigned stageOff,
                             const unsigned (&row)[decltype(layout)::kRows], int ld) {
          using SC = decltype(layout);
          constexpr bool FULL = decltype(fullTag)::value;
          const unsigned d = lc.dst + stageOff;
#pragma unroll
          for (int jj = 0; jj < SC::kRows; ++jj) {
            const int nj = (FULL || lc.k0 + jj * SC::kStep < lim) ? lc.n : 0;
            cp_async16_at(d + jj * SC::Dst(ld) * (int)sizeof(T), row_addr(lc.src, row[jj], lc.rowBytes), nj);
          }
        };
        auto copyStage = [&](auto fullTag) {
          unsigned rowA[SA::kRows], rowB[SB::kRows];
          linesOf(SA{}, ia, ria, lcA.k0, rowA);
          copyLines(SA{}, fullTag, lcA, (unsigned)(s * ASt * (int)sizeof(T)), rowA, C::LdMA);
          linesOf(SB{}, ib, rib, lcB.k0, rowB);
          copyLines(SB{}, fullTag, lcB, (unsigned)(s * BSt * (int)sizeof(T)), rowB, C::LdMB);
        };
        if (lim == C::BK)
          copyStage(BoolTag<true>{});
        else
          copyStage(BoolTag<false>{});
        return;
      }
    }
    if (p.vec) {
#pragma unroll
      for (int c0 = 0; c0 < C::BK * CPA; c0 += C::kThreads) {
        const int c = c0 + tid;
        if (C::BK * CPA % C::kThreads == 0 || c < C::BK * CPA) {
          const int kk = c / CPA, mm = (c % CPA) * C::kChunk;
          const long long pi = pb + kk, m = m0 + mm;
          const bool ok = pi < s1 && m < p.M;
          const T* ar = ia ? a + (unsigned long long)(unsigned)ria[SA::RingPos(kk)] * (unsigned)p.M : a + pi * p.M;
          cp_async16(as + C::mnOff(kk, mm, C::LdMA), ok ? ar + m : a, ok);
        }
      }
#pragma unroll
      for (int c0 = 0; c0 < C::BK * CPB; c0 += C::kThreads) {
        const int c = c0 + tid;
        if (C::BK * CPB % C::kThreads == 0 || c < C::BK * CPB) {
          const int kk = c / CPB, nn = (c % CPB) * C::kChunk;
          const long long pi = pb + kk, n = n0 + nn;
          const bool ok = pi < s1 && n < p.N;
          const T* br = ib ? b + (unsigned long long)(unsigned)rib[SB::RingPos(kk)] * (unsigned)p.N : b + pi * p.N;
          cp_async16(bs + C::mnOff(kk, nn, C::LdMB), ok ? br + n : b, ok);
        }
      }
    } else {
      const Raw* ar = reinterpret_cast<const Raw*>(a);
      const Raw* br = reinterpret_cast<const Raw*>(b);
      Raw* asr = reinterpret_cast<Raw*>(as);
      Raw* bsr = reinterpret_cast<Raw*>(bs);
      for (int c = tid; c < C::BK * C::BM; c += C::kThreads) {
        const int kk = c / C::BM, mm = c % C::BM;
        const long long pi = pb + kk, m = m0 + mm;
        Raw val = Raw(0);
        if (pi < s1 && m < p.M) val = ar[(ia ? (long long)ria[SA::RingPos(kk)] : pi) * p.M + m];
        asr[C::mnOff(kk, mm, C::LdMA)] = val;
      }
      for (int c = tid; c < C::BK * C::BN; c += C::kThreads) {
        const int kk = c / C::BN, nn = c % C::BN;
        const long long pi = pb + kk, n = n0 + nn;
        Raw val = Raw(0);
        if (pi < s1 && n < p.N) val = br[(ib ? (long long)rib[SB::RingPos(kk)] : pi) * p.N + n];
        bsr[C::mnOff(kk, nn, C::LdMB)] = val;
      }
    }
  };

  float acc[C::MI][C::NI][4];
  zero_acc<C>(acc);
  // The bias gradient (PairsParams::bias_part): the blocks of column tile
  // 0 of the centre tap also sum the columns of a over their pairs, from
  // the A stages the wgmma groups read (pairs_col_sums), while those run.
  // The pipeline is instantiated twice, with the sums (SUM) and, for every
  // other block, without them.
  const bool colSum = C::kHopper && p.bias_part != nullptr && blk.centre && n0 == 0;
  auto run = [&](auto sumTag) {
    constexpr bool SUM = decltype(sumTag)::value;
    float sum[C::kChunk];
#pragma unroll
    for (int e = 0; e < C::kChunk; ++e) sum[e] = 0.f;
    // Group g holds the operands of iteration g and the indices of
    // iteration g + D (D = kDist stages ahead); the indices of iterations
    // 0 … D − 1 come first, in a group of their own that is waited for.
    constexpr int D = C::kDist;
    for (int j = 0; j < D; ++j)
      if (j < nIter) load_idx(t0 + j, j);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int s = 0; s < D; ++s) {
      if (s < nIter) load(t0 + s, s, s);
      if (s + D < nIter) load_idx(t0 + s + D, s + D);
      cp_async_commit();
    }
    for (int it = 0; it < nIter; ++it) {
      cp_async_wait<D - 1>();
      if constexpr (C::kHopper) fence_proxy_async();
      __syncthreads();
      const int s = it % C::S;
      if constexpr (C::kHopper)
        // Warpgroup warp/4 multiplies output rows 64·(warp/4) …: the
        // second 64-element block of the MN-major A stage.
        wgmma_stage<C, true, true>(&acc[0][0][0], smem_addr(As + s * ASt + (warp >> 2) * 64 * C::BK),
                                   smem_addr(Bs + s * BSt), C::kMnLbo, C::kMnLbo);
      else
        warp_mma<C, false, false>(acc, As + s * ASt + wm * C::WTM, Bs + s * BSt + wn * C::WTN, C::LdMA, C::LdMB, lane);
      const int nx = it + D;
      if (nx < nIter) load(t0 + nx, nx % C::S, nx);
      if (nx + D < nIter) load_idx(t0 + nx + D, nx + D);
      cp_async_commit();
      // Stage s stays unwritten until the barrier of iteration it + 2
      // (Hopper: kDist = S − 2), so its columns are summed here, beside
      // the wgmma group that reads it.
      if constexpr (SUM) pairs_col_sums<C>(As + s * ASt, tid, sum);
      if constexpr (C::kHopper) wgmma_wait<1>();
    }
    cp_async_wait<0>();
    if constexpr (C::kHopper) wgmma_wait<0>();

    bool staged = false;
    if constexpr (C::kHopper) {
      if (m0 + C::BM <= p.M && n0 + C::BN <= p.N && ((p.N * (p.part ? 4 : (long long)sizeof(T))) & 15) == 0) {
        // A whole tile: through shared memory (the free stages, once
        // every warpgroup's products are done), then 16-byte stores of
        // whole rows.
        __syncthreads();
        if (C::kWarps <= 8 && p.tickets != nullptr)
          pairs_store_ordered<C>(p, acc, m0, n0, v, z, wm, lane, tid, base);
        else if (p.part == nullptr)
          pairs_store_staged<C>(reinterpret_cast<T*>(p.out), p, acc, m0, n0, v, wm, lane, tid, base);
        else
          pairs_store_staged<C>(p.part + (long long)z * p.M * p.V * p.N, p, acc, m0, n0, v, wm, lane, tid, base);
        staged = true;
      }
    }
    if (!staged) {
      if (p.tickets != nullptr) __trap();  // the engine sets tickets for whole Hopper tiles of 8 warps at most only
      pairs_store<C>(p, acc, m0, n0, v, z, wm, wn, lane);
    }
    if constexpr (SUM) {
      // The kStep threads of each column chunk add their sums in the
      // order of their first lines, through shared memory (the A stages:
      // every copy and every wgmma group is done once all threads pass
      // the barrier).
      constexpr int CPA = C::BM / C::kChunk, kStep = C::kThreads / CPA;
      float* red = reinterpret_cast<float*>(As);  // [kStep][BM]
      __syncthreads();
#pragma unroll
      for (int e = 0; e < C::kChunk; ++e) red[(tid / CPA) * C::BM + (tid % CPA) * C::kChunk + e] = sum[e];
      __syncthreads();
      for (int c = tid; c < C::BM; c += C::kThreads) {
        float t = 0.f;
#pragma unroll
        for (int i = 0; i < kStep; ++i) t += red[i * C::BM + c];
        if (m0 + c < p.M) p.bias_part[(long long)z * p.M + m0 + c] = t;
      }
    }
  };
  if constexpr (C::kHopper && C::kElem == 2) {
    if (colSum) {
      run(BoolTag<true>{});
      return;
    }
  }
  run(BoolTag<false>{});
}

}  // namespace fg

// Instantiation macros used by the generated gemm_*.cu files.
// Each tile instantiates two gather kernels: NAME reads the weight as
// stored ([N, V, Kc]), NAME_wt reads it transposed ([Kc, V, N], p.wt = 1).
// They are separate symbols so each gets its own register allocation; the
// transposed one is held to TileCfg::kMinBlocks blocks per SM (128
// registers at 8 warps in half precision with 64×32 warp tiles: two
// resident blocks per SM, no spills).
#define FG_GATHER_KERNEL(NAME, MATH, BM, BN, BK, WM, WN, S, SMEM)                              \
  extern "C" __global__ void __launch_bounds__(32 * (WM) * (WN)) NAME(const fg::GatherParams p) { \
    fg_await_prior_grid();                                                                       \
    using Cfg = fg::TileCfg<MATH, BM, BN, BK, WM, WN, S>;                                        \
    static_assert(Cfg::kGatherSmem == (SMEM), "shared memory differs from the Go tile table");   \
    fg::gather_gemm<Cfg, false>(p);                                                              \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(                                                  \
      32 * (WM) * (WN), (fg::TileCfg<MATH, BM, BN, BK, WM, WN, S>::kMinBlocks))                  \
      NAME##_wt(const fg::GatherParams p) {                                                      \
    fg_await_prior_grid();                                                                       \
    using Cfg = fg::TileCfg<MATH, BM, BN, BK, WM, WN, S>;                                        \
    fg::gather_gemm<Cfg, true>(p);                                                               \
  }
// Hopper kernels (wgmma.cuh), compiled by build.sh for sm_90a, PTX only,
// from the *_sm90a.cu files: a gather kernel NAME (and, in the 16-bit
// arithmetics, NAME_wt reading the weight transposed, MN-major) and a
// pairs kernel (16-bit only).
#define FG_GATHER_H_KERNEL(NAME, MATH, BM, BN, BK, WM, WN, S, SMEM)                            \
  extern "C" __global__ void __launch_bounds__(32 * (WM) * (WN), 1) NAME(const fg::GatherParams p) { \
    fg_await_prior_grid();                                                                      \
    using Cfg = fg::TileCfg<MATH, BM, BN, BK, WM, WN, S, true>;                                 \
    static_assert(Cfg::kGatherSmem == (SMEM), "shared memory differs from the Go tile table");  \
    fg::gather_gemm<Cfg, false>(p);                                                             \
  }
#define FG_GATHER_H_WT_KERNEL(NAME, MATH, BM, BN, BK, WM, WN, S)                               \
  extern "C" __global__ void __launch_bounds__(32 * (WM) * (WN), 1) NAME##_wt(const fg::GatherParams p) { \
    fg_await_prior_grid();                                                                      \
    using Cfg = fg::TileCfg<MATH, BM, BN, BK, WM, WN, S, true>;                                 \
    fg::gather_gemm<Cfg, true>(p);                                                              \
  }
#define FG_PAIRS_H_KERNEL(NAME, MATH, BM, BN, BK, WM, WN, S, SMEM)                             \
  extern "C" __global__ void __launch_bounds__(32 * (WM) * (WN), 1) NAME(const fg::PairsParams p) { \
    fg_await_prior_grid();                                                                      \
    using Cfg = fg::TileCfg<MATH, BM, BN, BK, WM, WN, S, true>;                                 \
    static_assert(Cfg::kPairsSmem == (SMEM), "shared memory differs from the Go tile table");   \
    fg::pairs_gemm<Cfg>(p);                                                                     \
  }
#define FG_PAIRS_KERNEL(NAME, MATH, BM, BN, BK, WM, WN, S, SMEM)                               \
  extern "C" __global__ void __launch_bounds__(                                                  \
      32 * (WM) * (WN), (fg::TileCfg<MATH, BM, BN, BK, WM, WN, S>::kPairsMinBlocks))             \
      NAME(const fg::PairsParams p) {                                                            \
    fg_await_prior_grid();                                                                      \
    using Cfg = fg::TileCfg<MATH, BM, BN, BK, WM, WN, S>;                                       \
    static_assert(Cfg::kPairsSmem == (SMEM), "shared memory differs from the Go tile table");   \
    fg::pairs_gemm<Cfg>(p);                                                                     \
  }
