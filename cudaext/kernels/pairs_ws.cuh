// Warp-specialised Hopper weight gradient (pairs family, 16-bit; tiles.go
// HasPairsWS, kernels.PairsWSName *_ws): the plain Hopper pairs kernel's
// products (pairs_gemm in gemm.cuh: the same block, stages, index rings
// and wgmma groups, in the same order, so the same bits) computed by two
// kinds of warps, as the gathers of gather_ws.cuh are:
//
//   consumers  the tile's WM warps (BM/64 warpgroups) wait for a full
//              stage, multiply it (and, in the bias gradient's blocks,
//              sum its A columns), and hand the previous stage back once
//              that stage's wgmma group has retired; then they store the
//              tile through the free stages, with a barrier of their own;
//   producers  PW more warps load every iteration's pair indices D = S − 1
//              iterations ahead into the index rings and issue every
//              operand copy (cp.async, 16 bytes, zero fill past the pair
//              list), each stage once the consumers handed it back, and
//              leave when the last is issued.
//
// The plain kernel's eight warps copy and multiply in turn, with a
// block-wide barrier at every stage, and a block is alone on its SM: at
// RES 512 C 128 it moves the pairs' rows at 6.0 TB/s where the C 64
// kernel, three one-warpgroup blocks a SM, moves them at 8.8
// (docs/PERF_NOTES.md, "Designs for the seventy-second session").
//
// Needs p.vec (16-byte operand rows; the engine launches the plain kernel
// otherwise) and the sm_90a target.
#pragma once

#include "gather_ws.cuh"
#include "gemm.cuh"

namespace fg {

// PairsWsLayout: the threads and the shared memory of pairs_gemm_ws for
// tile C and PW producer warps: the plain kernel's (stages, two index
// rings, 1 KiB of alignment) and a full and an empty mbarrier per stage
// (kernels.PairsWSSmemBytes mirrors it).
template <class C, int PW> struct PairsWsLayout {
  static constexpr int kProd = 32 * PW;      // producer threads
  static constexpr int kCons = C::kThreads;  // consumer threads (WM warps)
  static constexpr int kSmem = C::kPairsSmem + 16 * C::S;
};

// ConsumerSync is the consumers' barrier (bar.sync 2 over NT threads): the
// epilogues' barrier once the producers have left.
template <int NT> struct ConsumerSync {
  __device__ __forceinline__ void operator()() const { consumers_sync(NT); }
};

template <class C, int PW> __device__ __forceinline__ void pairs_gemm_ws(const PairsParams& p) {
  using T = typename C::T;
  using L = PairsWsLayout<C, PW>;
  static_assert(C::kHopper && C::kElem == 2 && C::WN == 1, "16-bit Hopper tiles of one warp column");
  constexpr int S = C::S, BK = C::BK, R = C::kIdxRing;
  constexpr int D = S - 1;  // iterations the producers load indices ahead
  static_assert(R >= D + 1, "index ring too short");
  constexpr int ASt = C::kPairsAStage, BSt = C::kPairsBStage;
  constexpr int CPA = C::BM / C::kChunk, CPB = C::BN / C::kChunk;
  // The producers' copies: a thread's k-lines k0 + jj·kStep of each
  // operand, its rows adjacent in the index rings (RingPos).
  using SA = StageCopy<C, BK, CPA, L::kProd>;
  using SB = StageCopy<C, BK, CPB, L::kProd>;
  static_assert(SA::Fits && SB::Fits, "the producers share every stage's copies evenly in 8-row steps");
  static_assert(BK <= L::kProd, "a producer thread per pair index of a stage");
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* base = smem + ((1024 - (smem_addr(smem) & 1023)) & 1023);
  T* As = reinterpret_cast<T*>(base);  // [S] MN-major swizzled
  T* Bs = As + S * ASt;                // [S] MN-major swizzled
  int* sIA = reinterpret_cast<int*>(Bs + S * BSt);  // [R][BK]
  int* sIB = sIA + R * BK;                          // [R][BK]
  unsigned long long* full = reinterpret_cast<unsigned long long*>(sIB + R * BK);  // [S]
  unsigned long long* empty = full + S;                                           // [S]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const PairsBlock<C> blk(p);
  if (blk.none) return;  // the whole block
  const long long m0 = blk.m0, n0 = blk.n0, s0 = blk.s0, s1 = blk.s1, t0 = blk.t0;
  const int v = blk.v, z = blk.z, nIter = blk.nIter;
  if (!p.vec) __trap();  // the engine launches the plain kernel for rows that are not 16 bytes
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(full + s, L::kProd);     // every producer thread's cp.async arrival
      mbar_init(empty + s, C::kWarps);   // every consumer warp's hand-back
    }
  }
  __syncthreads();

  if (warp >= C::kWarps) {
    // ---- producers ----
    const int pt = tid - L::kCons;
    const int* ia = blk.ia;
    const int* ib = blk.ib;
    const T* a = reinterpret_cast<const T*>(p.a);
    const T* b = reinterpret_cast<const T*>(p.b);
    // Chunk q of this thread's k-lines of each operand: the chunk's byte
    // address in row 0, the row pitch, its shared address in stage 0 and
    // its size (16, or 0 past the column bound).
    const int qA = pt % SA::kCpr, kA = pt / SA::kCpr, qB = pt % SB::kCpr, kB = pt / SB::kCpr;
    const char* srcA = reinterpret_cast<const char*>(a + m0 + qA * C::kChunk);
    const char* srcB = reinterpret_cast<const char*>(b + n0 + qB * C::kChunk);
    const unsigned rowBytesA = (unsigned)p.M * (unsigned)sizeof(T), rowBytesB = (unsigned)p.N * (unsigned)sizeof(T);
    const unsigned dstA = smem_addr(As + C::mnOff(kA, qA * C::kChunk, C::LdMA));
    const unsigned dstB = smem_addr(Bs + C::mnOff(kB, qB * C::kChunk, C::LdMB));
    const int nA = m0 + qA * C::kChunk < p.M ? 16 : 0, nB = n0 + qB * C::kChunk < p.N ? 16 : 0;
    // The pair indices of iteration j into ring slot j mod R (pairs past
    // the segment get index 0: their copies are masked off).
    auto load_idx = [&](int j) {
      const long long pb = s0 + (t0 + j) * BK;
      const int lim = (int)min((long long)BK, s1 - pb);
      int* da = sIA + (j % R) * BK;
      int* db = sIB + (j % R) * BK;
      if (pt < BK) {
        const bool ok = pt < lim;
        if (ia) cp_async4(da + SA::RingPos(pt), ia + (ok ? pb + pt : 0), ok);
        if (ib) cp_async4(db + SB::RingPos(pt), ib + (ok ? pb + pt : 0), ok);
      }
    };
    // The operand copies of iteration j into stage s: each operand's rows
    // read from its ring before its copies are issued (the centre tap,
    // without indices, reads rows pb + k).
    auto copyLines = [&](auto layout, const int* idx, const int* ring, int k0, const char* src, unsigned rowBytes,
                         unsigned dst, int n, int ld, long long pb, int lim) {
      using SC = decltype(layout);
      unsigned row[SC::kRows];
      if (idx) {
        lds_ints<SC::kRows>(ring + k0 * SC::kRows, row);
      } else {
#pragma unroll
        for (int jj = 0; jj < SC::kRows; ++jj) row[jj] = (unsigned)(pb + k0 + jj * SC::kStep);
      }
#pragma unroll
      for (int jj = 0; jj < SC::kRows; ++jj)
        cp_async16_at(dst + jj * SC::Dst(ld) * (int)sizeof(T), row_addr(src, row[jj], rowBytes),
                      k0 + jj * SC::kStep < lim ? n : 0);
    };
    auto load = [&](int j, int s) {
      const long long pb = s0 + (t0 + j) * BK;
      const int lim = (int)min((long long)BK, s1 - pb);
      copyLines(SA{}, ia, sIA + (j % R) * BK, kA, srcA, rowBytesA, dstA + (unsigned)(s * ASt * (int)sizeof(T)), nA,
                C::LdMA, pb, lim);
      copyLines(SB{}, ib, sIB + (j % R) * BK, kB, srcB, rowBytesB, dstB + (unsigned)(s * BSt * (int)sizeof(T)), nB,
                C::LdMB, pb, lim);
    };
    // The indices of iterations 0 … D − 1 first, waited for; then group
    // g holds the copies of iteration g and the indices of g + D. Before
    // the copies of iteration it ≥ D, group it − D (its indices) has
    // landed once at most the D − 1 later groups are pending; the
    // producers' barrier makes every thread's indices visible to all, and
    // keeps them within one iteration of each other, so a ring slot is
    // rewritten (D iterations ahead, R > D) only after every producer has
    // read it.
    for (int j = 0; j < D && j < nIter; ++j) load_idx(j);
    cp_async_commit();
    cp_async_wait<0>();
    int s = 0;
    unsigned parity = 1;  // a fresh empty barrier's "previous phase" counts as complete
    for (int it = 0; it < nIter; ++it) {
      cp_async_wait<D - 1>();
      producers_sync(L::kProd);
      mbar_wait(empty + s, parity);
      load(it, s);
      if (it + D < nIter) load_idx(it + D);
      cp_async_commit();
      mbar_arrive_cp_async(full + s);
      if (++s == S) {
        s = 0;
        parity ^= 1;
      }
    }
    cp_async_wait<0>();
    return;
  }

  // ---- consumers ----
  float acc[C::MI][C::NI][4];
  zero_acc<C>(acc);
  using Sync = ConsumerSync<L::kCons>;
  const Sync sync{};
  const int wm = warp;
  // The bias gradient's blocks (column tile 0 of the centre tap) also sum
  // the columns of a over their pairs, as the plain kernel does.
  const bool colSum = p.bias_part != nullptr && blk.centre && n0 == 0;
  auto run = [&](auto sumTag) {
    constexpr bool SUM = decltype(sumTag)::value;
    float sum[C::kChunk];
#pragma unroll
    for (int e = 0; e < C::kChunk; ++e) sum[e] = 0.f;
    int s = 0, prev = -1;
    unsigned parity = 0;
    for (int it = 0; it < nIter; ++it) {
      mbar_wait(full + s, parity);
      // The stage was written through the generic proxy (cp.async); wgmma
      // reads it through the async proxy.
      fence_proxy_async();
      // Warpgroup warp/4 multiplies output rows 64·(warp/4) …: the second
      // 64-element block of the MN-major A stage.
      wgmma_stage<C, true, true>(&acc[0][0][0], smem_addr(As + s * ASt + (warp >> 2) * 64 * BK),
                                 smem_addr(Bs + s * BSt), C::kMnLbo, C::kMnLbo);
      if constexpr (SUM) pairs_col_sums<C>(As + s * ASt, tid, sum);
      wgmma_wait<1>();
      // The previous stage's group has retired (and its column sums were
      // taken last iteration): hand it back.
      if (prev >= 0 && lane == 0) mbar_arrive(empty + prev);
      prev = s;
      if (++s == S) {
        s = 0;
        parity ^= 1;
      }
    }
    wgmma_wait<0>();
    pin_acc<C::MI * C::NI * 4>(&acc[0][0][0]);

    bool staged = false;
    if (m0 + C::BM <= p.M && n0 + C::BN <= p.N && ((p.N * (p.part ? 4 : (long long)sizeof(T))) & 15) == 0) {
      // A whole tile through the free stages (every copy landed before its
      // stage's last wait; every consumer's products done at the barrier).
      sync();
      if (C::kWarps <= 8 && p.tickets != nullptr)
        pairs_store_ordered<C>(p, acc, m0, n0, v, z, wm, lane, tid, base, sync);
      else if (p.part == nullptr)
        pairs_store_staged<C>(reinterpret_cast<T*>(p.out), p, acc, m0, n0, v, wm, lane, tid, base, sync);
      else
        pairs_store_staged<C>(p.part + (long long)z * p.M * p.V * p.N, p, acc, m0, n0, v, wm, lane, tid, base, sync);
      staged = true;
    }
    if (!staged) {
      if (p.tickets != nullptr) __trap();  // the engine sets tickets for whole Hopper tiles of 8 warps at most only
      pairs_store<C>(p, acc, m0, n0, v, z, wm, 0, lane);
    }
    if constexpr (SUM) pairs_bias_store<C>(p, sum, m0, z, tid, reinterpret_cast<float*>(As), sync);
  };
  if (colSum) {
    run(BoolTag<true>{});
    return;
  }
  run(BoolTag<false>{});
}

}  // namespace fg

// The warp-specialised twin of a Hopper pairs kernel (kernels.PairsWSName):
// the tile's WM consumer warps and PW producer warps, one block per SM.
#define FG_PAIRS_WS_KERNEL(NAME, MATH, BM, BN, BK, WM, S, PW, SMEM)                                      \
  extern "C" __global__ void __launch_bounds__(32 * ((WM) + (PW)), 1) NAME(const fg::PairsParams p) {     \
    fg_await_prior_grid();                                                                                \
    using Cfg = fg::TileCfg<MATH, BM, BN, BK, WM, 1, S, true>;                                            \
    static_assert(fg::PairsWsLayout<Cfg, PW>::kSmem == (SMEM), "shared memory differs from the Go tile table"); \
    fg::pairs_gemm_ws<Cfg, PW>(p);                                                                        \
  }
