// Hopper weight gradient of a masked map by pairs of taps (16-bit only).
//
// The pairs kernels (gemm.cuh, pairs family) multiply one tap's pair list
// at a time: every product reads two gathered rows, dy[o] and x[i] (512
// bytes at 128 channels each). This kernel walks the forward's masked row
// tiles instead (the Gray order `order` in tiles of H rows and their tap
// unions, cudaext maskedTablesFor) and multiplies two taps a stage: the
// stage holds BK output rows' dy once and, for taps a and b, the rows of x
// their neighbour table entries name (zeros where a row has no such
// neighbour), so a product reads one and a half rows (384 bytes at 128
// channels) and no pair list is built:
//
//   part[z, m, v, n] = Σ_{o ∈ tiles of split z} dy[o, m] · x[tbl[o, v], n]
//                      for v ∈ {a, b} = {p, V − 1 − p}, pair p = blockIdx.x
//
// (the centre tap of an odd V is a pair of its own, b = a). Split z of a
// pair covers the row tiles [z·nt/S, (z+1)·nt/S) whose tap union holds a
// or b (tile_bits), in order; every (z, tap) slice of part is written by
// exactly one block, zeros where it had no tile, and the engine sums the
// S slices in order (deterministic; cudaext/tappairs.go).
//
// Pipeline: as the Hopper pairs kernel (every thread copies with cp.async,
// each warpgroup multiplies 64 rows of dy's columns M = Co by all BN
// columns of x, both operands MN-major, S − 2 stages ahead), with three
// index rings: the order's rows of an iteration are loaded 2D iterations
// ahead, its table entries (read through those rows) D ahead, its operands
// (read through both) at distance 0.
#include "gemm.cuh"

namespace fg {

// TapPairsParams: every field 8 bytes (cudaext tapPairsParams mirrors it).
struct TapPairsParams {
  const void* x;              // [*, ci] layer input
  const void* dy;             // [M, co] output gradient
  float* part;                // [splits, co, V, ci] float32 partials
  const int* tbl;             // [M, V] neighbour table (-1: none)
  const int* order;           // [M] the masked row order
  const unsigned* tile_bits;  // [nt] tap union of each row tile of H entries of order (bit v: tap v)
  long long M, co, ci, V;     // rows, output and input channels, taps (at most 32)
  long long H, nt, splits;    // tile rows (a multiple of BK), tiles, split slices per pair
};
static_assert(sizeof(TapPairsParams) == 13 * 8, "TapPairsParams layout");

// Most row tiles one block lists (TapPairsParams: ⌈nt/splits⌉ at most).
constexpr int kTapPairsList = 1024;

template <class C> struct TapPairsCfg {
  static constexpr int R = 2 * C::S;  // index ring slots (≥ 3·kDist + 1)
  static_assert(R >= 3 * C::kDist + 1, "index ring too short");
  static constexpr int kASt = C::BK * C::BM, kBSt = C::BK * C::BN;  // elements per stage and operand
  static constexpr int kSmem =
      C::S * (kASt + 2 * kBSt) * C::kElem + 3 * R * C::BK * 4 + kTapPairsList * 4 + 16 + 1024;
  static_assert(kSmem <= 227 * 1024, "too much shared memory");
};

template <class C> __device__ __forceinline__ void tappairs_gemm(const TapPairsParams& p) {
  using T = typename C::T;
  using TC = TapPairsCfg<C>;
  static_assert(C::kHopper && C::kElem == 2, "16-bit Hopper tiles only");
  constexpr int BK = C::BK, S = C::S, D = C::kDist, R = TC::R;
  constexpr int ASt = TC::kASt, BSt = TC::kBSt;
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* base = smem + ((1024 - (smem_addr(smem) & 1023)) & 1023);
  T* As = reinterpret_cast<T*>(base);  // [S] dy, MN-major swizzled
  T* Bas = As + S * ASt;               // [S] x through tap a
  T* Bbs = Bas + S * BSt;              // [S] x through tap b
  int* ringO = reinterpret_cast<int*>(Bbs + S * BSt);  // [R][BK] order rows
  int* ringA = ringO + R * BK;                         // [R][BK] table entries, tap a
  int* ringB = ringA + R * BK;                         // [R][BK] tap b
  int* list = ringB + R * BK;                          // [kTapPairsList] tile << 2 | has b << 1 | has a
  int* nList = list + kTapPairsList;                   // [4]: list length, then warp sums scratch

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int pair = blockIdx.x, z = blockIdx.y;
  const long long tilesN = (p.ci + C::BN - 1) / C::BN;
  const long long m0 = (blockIdx.z / tilesN) * C::BM, n0 = (blockIdx.z % tilesN) * C::BN;
  const int ta = pair, tb = (int)p.V - 1 - pair;
  const bool single = ta == tb;

  // This split's tiles whose union holds tap a or b, in order.
  const long long t0 = p.nt * z / p.splits, t1 = p.nt * (z + 1) / p.splits;
  if (tid == 0) nList[0] = 0;
  __shared__ int warpSum[32];
  __syncthreads();
  for (long long tb0 = t0; tb0 < t1; tb0 += C::kThreads) {
    const long long t = tb0 + tid;
    int f = 0;
    if (t < t1) {
      const unsigned bits = p.tile_bits[t];
      f = ((bits >> ta) & 1) | (single ? 0 : ((bits >> tb) & 1) << 1);
    }
    const unsigned ball = __ballot_sync(0xffffffffu, f != 0);
    if (lane == 0) warpSum[warp] = __popc(ball);
    __syncthreads();
    int before = nList[0];
    for (int w = 0; w < warp; ++w) before += warpSum[w];
    if (f != 0) list[before + __popc(ball & ((1u << lane) - 1))] = (int)((t - t0) << 2) | f;
    __syncthreads();
    if (tid == 0) {
      int s = 0;
      for (int w = 0; w < C::kWarps; ++w) s += warpSum[w];
      nList[0] += s;
    }
    __syncthreads();
  }
  const int SUB = (int)(p.H / BK);
  const int nIter = nList[0] * SUB;

  const T* x = reinterpret_cast<const T*>(p.x);
  const T* dy = reinterpret_cast<const T*>(p.dy);
  constexpr int CPA = C::BM / C::kChunk, CPB = C::BN / C::kChunk;
  using SA = StageCopy<C, BK, CPA>;
  using SB = StageCopy<C, BK, CPB>;
  // A thread's copies: chunk q of lines k0 + jj·kStep of each operand.
  const int qA = tid % SA::kCpr, kA = tid / SA::kCpr;
  const int qB = tid % SB::kCpr, kB = tid / SB::kCpr;
  const char* srcA = reinterpret_cast<const char*>(dy + m0 + qA * C::kChunk);
  const char* srcB = reinterpret_cast<const char*>(x + n0 + qB * C::kChunk);
  const unsigned rowA = (unsigned)p.co * 2u, rowB = (unsigned)p.ci * 2u;
  const int nA = m0 + qA * C::kChunk < p.co ? 16 : 0, nB = n0 + qB * C::kChunk < p.ci ? 16 : 0;
  const unsigned dA = smem_addr(As + C::mnOff(kA, qA * C::kChunk, 0));
  const unsigned dBa = smem_addr(Bas + C::mnOff(kB, qB * C::kChunk, 0));
  const unsigned dBb = smem_addr(Bbs + C::mnOff(kB, qB * C::kChunk, 0));

  // Iteration j: list entry j / SUB, its rows r0 … r0 + BK − 1 of order.
  auto entry = [&](int j) { return list[j / SUB]; };
  auto firstRow = [&](int j, int e) { return (t0 + (e >> 2)) * p.H + (long long)(j % SUB) * BK; };
  // The order's rows of iteration j (tid < BK).
  auto load_order = [&](int j) {
    if (tid < BK) {
      const long long r = firstRow(j, entry(j)) + tid;
      const bool ok = r < p.M;
      cp_async4(ringO + (j % R) * BK + SA::RingPos(tid), p.order + (ok ? r : 0), ok);
    }
  };
  // The table entries of iteration j, tap a (tid < BK) and b (BK ≤ tid < 2·BK).
  auto load_tbl = [&](int j) {
    const int e = entry(j);
    const int k = tid % BK, h = tid / BK;
    if (h < 2 && (e & (1 << h))) {
      const long long r = firstRow(j, e) + k;
      const bool ok = r < p.M;
      const int row = ringO[(j % R) * BK + SA::RingPos(k)];
      int* ring = h == 0 ? ringA : ringB;
      const int v = h == 0 ? ta : tb;
      cp_async4(ring + (j % R) * BK + SB::RingPos(k), p.tbl + (ok ? (unsigned long long)(unsigned)row * (unsigned)p.V + v : 0), ok);
    }
  };
  // The operands of iteration j into stage s.
  auto load = [&](int j, int s) {
    const int e = entry(j);
    const long long r0 = firstRow(j, e);
    const int slot = (j % R) * BK;
    {
      unsigned row[SA::kRows];
      lds_ints<SA::kRows>(ringO + slot + kA * SA::kRows, row);
      const unsigned d = dA + (unsigned)(s * ASt * 2);
#pragma unroll
      for (int jj = 0; jj < SA::kRows; ++jj) {
        const int n = r0 + kA + jj * SA::kStep < p.M ? nA : 0;
        cp_async16_at(d + jj * SA::Dst(0) * 2, row_addr(srcA, n ? row[jj] : 0u, rowA), n);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!(e & (1 << h))) continue;
      unsigned row[SB::kRows];
      lds_ints<SB::kRows>((h == 0 ? ringA : ringB) + slot + kB * SB::kRows, row);
      const unsigned d = (h == 0 ? dBa : dBb) + (unsigned)(s * BSt * 2);
#pragma unroll
      for (int jj = 0; jj < SB::kRows; ++jj) {
        const int n = (r0 + kB + jj * SB::kStep < p.M && (int)row[jj] >= 0) ? nB : 0;
        cp_async16_at(d + jj * SB::Dst(0) * 2, row_addr(srcB, n ? row[jj] : 0u, rowB), n);
      }
    }
  };

  float accA[C::MI][C::NI][4], accB[C::MI][C::NI][4];
  zero_acc<C>(accA);
  zero_acc<C>(accB);

  // Prologue: the order's rows of iterations 0 … 2D − 1, then their table
  // entries of 0 … D − 1; then group g = the operands of g, the table
  // entries of g + D and the order's rows of g + 2D.
  for (int j = 0; j < 2 * D; ++j)
    if (j < nIter) load_order(j);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  for (int j = 0; j < D; ++j)
    if (j < nIter) load_tbl(j);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int s = 0; s < D; ++s) {
    if (s < nIter) load(s, s);
    if (s + D < nIter) load_tbl(s + D);
    if (s + 2 * D < nIter) load_order(s + 2 * D);
    cp_async_commit();
  }
  const int wg = warp >> 2;
  for (int it = 0; it < nIter; ++it) {
    cp_async_wait<D - 1>();
    fence_proxy_async();
    __syncthreads();
    const int s = it % S, e = entry(it);
    const unsigned a = smem_addr(As + s * ASt + wg * 64 * BK);
    wgmma_fence();
    {
      constexpr unsigned kStep = (16 * 128) >> 4;  // 16 k-lines of 128 bytes per instruction
      const unsigned long long da = wgmma_desc(a, C::kMnLbo, 1024);
      if (e & 1) {
        const unsigned long long db = wgmma_desc(smem_addr(Bas + s * BSt), C::kMnLbo, 1024);
#pragma unroll
        for (int k = 0; k < BK / 16; ++k) Wgmma<C::kMath, C::BN, true, true>::run(&accA[0][0][0], da + k * kStep, db + k * kStep);
      }
      if (e & 2) {
        const unsigned long long db = wgmma_desc(smem_addr(Bbs + s * BSt), C::kMnLbo, 1024);
#pragma unroll
        for (int k = 0; k < BK / 16; ++k) Wgmma<C::kMath, C::BN, true, true>::run(&accB[0][0][0], da + k * kStep, db + k * kStep);
      }
    }
    wgmma_commit();
    const int nx = it + D;
    if (nx < nIter) load(nx, nx % S);
    if (nx + D < nIter) load_tbl(nx + D);
    if (nx + 2 * D < nIter) load_order(nx + 2 * D);
    cp_async_commit();
    wgmma_wait<1>();
  }
  cp_async_wait<0>();
  wgmma_wait<0>();
  pin_acc<C::MI * C::NI * 4>(&accA[0][0][0]);
  pin_acc<C::MI * C::NI * 4>(&accB[0][0][0]);

  PairsParams pp{};
  pp.M = p.co;
  pp.N = p.ci;
  pp.V = p.V;
  pp.part = p.part;
  const int wm = warp;
  __syncthreads();
  if (m0 + C::BM <= p.co && n0 + C::BN <= p.ci && (p.ci & 3) == 0) {
    float* out = p.part + (long long)z * p.co * p.V * p.ci;
    pairs_store_staged<C, float>(out, pp, accA, m0, n0, ta, wm, lane, tid, base);
    if (!single) {
      __syncthreads();
      pairs_store_staged<C, float>(out, pp, accB, m0, n0, tb, wm, lane, tid, base);
    }
  } else {
    pairs_store<C>(pp, accA, m0, n0, ta, z, wm, 0, lane);
    if (!single) pairs_store<C>(pp, accB, m0, n0, tb, z, wm, 0, lane);
  }
}

}  // namespace fg

extern "C" {

// tile_bits[t] = OR of 1 << taps[i] over the taps [seg[t], seg[t+1]) of row
// tile t (the masked tiles' unions; taps < 32).
__global__ void spconv_tappairs_bits(const int* seg, const int* taps, long long nt, unsigned* tile_bits) {
  fg_await_prior_grid();
  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (t >= nt) return;
  unsigned b = 0;
  for (int i = seg[t]; i < seg[t + 1]; ++i) b |= 1u << taps[i];
  tile_bits[t] = b;
}

}  // extern "C"

#define FG_TAPPAIRS_KERNEL(NAME, MATH, BM, BN, WM, S)                                              \
  extern "C" __global__ void __launch_bounds__(32 * (WM), 1) NAME(const fg::TapPairsParams p) {    \
    fg_await_prior_grid();                                                                         \
    fg::tappairs_gemm<fg::TileCfg<MATH, BM, BN, 64, WM, 1, S, true>>(p);                           \
  }
FG_TAPPAIRS_KERNEL(spconv_tappairs_f16_m128n128k64s4, fg::Math::F16, 128, 128, 8, 4)
FG_TAPPAIRS_KERNEL(spconv_tappairs_bf16_m128n128k64s4, fg::Math::BF16, 128, 128, 8, 4)
FG_TAPPAIRS_KERNEL(spconv_tappairs_f16_m64n64k64s4, fg::Math::F16, 64, 64, 4, 4)
FG_TAPPAIRS_KERNEL(spconv_tappairs_bf16_m64n64k64s4, fg::Math::BF16, 64, 64, 4, 4)
#undef FG_TAPPAIRS_KERNEL
