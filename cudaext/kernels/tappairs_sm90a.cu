// Hopper weight gradient of a masked map by pairs of taps (16-bit only).
//
// The pairs kernels (gemm.cuh, pairs family) multiply one tap's pair list
// at a time: every product reads two gathered rows, dy[o] and x[i] (512
// bytes at 128 channels each). This kernel walks the forward's masked row
// tiles instead (the Gray order `order` in tiles of H rows and their tap
// unions, cudaext maskedTablesFor) and multiplies two taps a stage: the
// stage holds BK output rows' dy once and, for taps a and b, the rows of x
// their neighbour table entries name (zeros where a row has no such
// neighbour), so dy is read once for both taps and no pair list is built:
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
// Warp-specialised as the gathers (gather_ws.cuh, whose mbarrier wrappers
// it uses): PW producer warps issue every copy (cp.async, zero fill) of
// the stages in order — an iteration's order rows 2D iterations ahead,
// its table entries (read through those rows) D ahead, into index rings,
// then its operands — and arrive on full[s] when their copies landed; the
// consumer warpgroups (one per 64 rows of dy's columns M = Co) wait for
// full[s], multiply the stage by all BN columns of x for each tap the
// stage's tile holds (both operands MN-major), and hand the stage back
// through empty[s] once that wgmma group retired.
#include "gather_ws.cuh"

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

// The kernel's layout for tile C (16-bit Hopper, BK = 64) and PW producer
// warps.
template <class C, int PW> struct TapPairsCfg {
  static constexpr int kPT = 32 * PW;                 // producer threads
  static constexpr int kCT = C::kThreads;             // consumer threads
  static constexpr int kNT = kCT + kPT;               // threads
  static constexpr int D = 2 * C::S;                  // iterations the table entries are loaded ahead
  static constexpr int R = 8 * C::S;                  // index ring slots (≥ 3·D + 1)
  static_assert(R >= 3 * D + 1, "index ring too short");
  static constexpr int kASt = C::BK * C::BM, kBSt = C::BK * C::BN;  // elements per stage and operand
  static constexpr int kSmem =
      C::S * (kASt + 2 * kBSt) * C::kElem + 3 * R * C::BK * 4 + kTapPairsList * 4 + 16 * C::S + 16 + 1024;
  static_assert(kSmem <= 227 * 1024, "too much shared memory");
  static_assert(2 * C::BK <= kPT, "a producer thread per index of a stage's two taps");
};

// A producer thread's copies of one operand of CPR 16-byte chunks a row:
// chunk q of rows k0 + j·kStep (j < kRows); its rows' indices sit adjacent
// in an index ring slot (RingPos), read in 16-byte loads.
template <int PT, int BK, int CPR> struct ProducerCopy {
  static constexpr int kStep = PT / CPR, kRows = BK * CPR / PT;
  static_assert(PT % CPR == 0 && (BK * CPR) % PT == 0 && kStep % 8 == 0, "rows split evenly, 8-row steps");
  __host__ __device__ static constexpr int RingPos(int k) { return (k % kStep) * kRows + k / kStep; }
};

template <class C, int PW> __device__ __forceinline__ void tappairs_gemm(const TapPairsParams& p) {
  using T = typename C::T;
  using TC = TapPairsCfg<C, PW>;
  static_assert(C::kHopper && C::kElem == 2, "16-bit Hopper tiles only");
  constexpr int BK = C::BK, S = C::S, D = TC::D, R = TC::R, PT = TC::kPT, NT = TC::kNT;
  constexpr int ASt = TC::kASt, BSt = TC::kBSt;
  constexpr int kConsWarps = C::kWarps;
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* base = smem + ((1024 - (smem_addr(smem) & 1023)) & 1023);
  T* As = reinterpret_cast<T*>(base);  // [S] dy, MN-major swizzled
  T* Bas = As + S * ASt;               // [S] x through tap a
  T* Bbs = Bas + S * BSt;              // [S] x through tap b
  int* ringO = reinterpret_cast<int*>(Bbs + S * BSt);  // [R][BK] order rows
  int* ringA = ringO + R * BK;                         // [R][BK] table entries, tap a
  int* ringB = ringA + R * BK;                         // [R][BK] tap b
  int* list = ringB + R * BK;                          // [kTapPairsList] tile << 2 | has b << 1 | has a
  unsigned long long* full = reinterpret_cast<unsigned long long*>(list + kTapPairsList);  // [S]
  unsigned long long* empty = full + S;                                                  // [S]
  int* nList = reinterpret_cast<int*>(empty + S);                                        // [4]
  __shared__ int warpSum[32];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int pair = blockIdx.x, z = blockIdx.y;
  const long long tilesN = (p.ci + C::BN - 1) / C::BN;
  const long long m0 = (blockIdx.z / tilesN) * C::BM, n0 = (blockIdx.z % tilesN) * C::BN;
  const int ta = pair, tb = (int)p.V - 1 - pair;
  const bool single = ta == tb;

  if (tid == 0) {
    nList[0] = 0;
    for (int s = 0; s < S; ++s) {
      mbar_init(full + s, PT);
      mbar_init(empty + s, kConsWarps);
    }
  }
  __syncthreads();
  // This split's tiles whose union holds tap a or b, in order.
  const long long t0 = p.nt * z / p.splits, t1 = p.nt * (z + 1) / p.splits;
  for (long long tb0 = t0; tb0 < t1; tb0 += NT) {
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
      int sum = 0;
      for (int w = 0; w < NT / 32; ++w) sum += warpSum[w];
      nList[0] += sum;
    }
    __syncthreads();
  }
  const int SUB = (int)(p.H / BK);
  const int nIter = nList[0] * SUB;

  float accA[C::MI][C::NI][4], accB[C::MI][C::NI][4];
  zero_acc<C>(accA);
  zero_acc<C>(accB);

  if (warp >= kConsWarps) {
    // ---- producers ----
    const int pt = tid - TC::kCT;
    const T* x = reinterpret_cast<const T*>(p.x);
    const T* dy = reinterpret_cast<const T*>(p.dy);
    using PA = ProducerCopy<PT, BK, C::BM / C::kChunk>;
    using PB = ProducerCopy<PT, BK, C::BN / C::kChunk>;
    const int qA = pt % (C::BM / C::kChunk), kA = pt / (C::BM / C::kChunk);
    const int qB = pt % (C::BN / C::kChunk), kB = pt / (C::BN / C::kChunk);
    const char* srcA = reinterpret_cast<const char*>(dy + m0 + qA * C::kChunk);
    const char* srcB = reinterpret_cast<const char*>(x + n0 + qB * C::kChunk);
    const unsigned rowA = (unsigned)p.co * 2u, rowB = (unsigned)p.ci * 2u;
    const int nA = m0 + qA * C::kChunk < p.co ? 16 : 0, nB = n0 + qB * C::kChunk < p.ci ? 16 : 0;
    const unsigned dA = smem_addr(As + C::mnOff(kA, qA * C::kChunk, 0));
    const unsigned dBa = smem_addr(Bas + C::mnOff(kB, qB * C::kChunk, 0));
    const unsigned dBb = smem_addr(Bbs + C::mnOff(kB, qB * C::kChunk, 0));
    constexpr int kDstA = PA::kStep * 64, kDstB = PB::kStep * 64;  // elements between a thread's rows
    auto entry = [&](int j) { return list[j / SUB]; };
    auto firstRow = [&](int j, int e) { return (t0 + (e >> 2)) * p.H + (long long)(j % SUB) * BK; };
    // The order's rows of iteration j (pt < BK).
    auto load_order = [&](int j) {
      if (pt < BK) {
        const long long r = firstRow(j, entry(j)) + pt;
        const bool ok = r < p.M;
        cp_async4(ringO + (j % R) * BK + PA::RingPos(pt), p.order + (ok ? r : 0), ok);
      }
    };
    // The table entries of iteration j, tap a (pt < BK) and b (BK ≤ pt < 2·BK).
    auto load_tbl = [&](int j) {
      const int e = entry(j);
      const int k = pt % BK, h = pt / BK;
      if (h < 2 && (e & (1 << h))) {
        const long long r = firstRow(j, e) + k;
        const bool ok = r < p.M;
        const int row = ringO[(j % R) * BK + PA::RingPos(k)];
        cp_async4((h == 0 ? ringA : ringB) + (j % R) * BK + PB::RingPos(k),
                  p.tbl + (ok ? (unsigned long long)(unsigned)row * (unsigned)p.V + (h == 0 ? ta : tb) : 0), ok);
      }
    };
    // The operands of iteration j into stage s.
    auto load = [&](int j, int s) {
      const int e = entry(j);
      const long long r0 = firstRow(j, e);
      const int slot = (j % R) * BK;
      {
        unsigned row[PA::kRows];
        lds_ints<PA::kRows>(ringO + slot + kA * PA::kRows, row);
        const unsigned d = dA + (unsigned)(s * ASt * 2);
#pragma unroll
        for (int jj = 0; jj < PA::kRows; ++jj) {
          const int n = r0 + kA + jj * PA::kStep < p.M ? nA : 0;
          cp_async16_at(d + jj * kDstA * 2, row_addr(srcA, n ? row[jj] : 0u, rowA), n);
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (!(e & (1 << h))) continue;
        unsigned row[PB::kRows];
        lds_ints<PB::kRows>((h == 0 ? ringA : ringB) + slot + kB * PB::kRows, row);
        const unsigned d = (h == 0 ? dBa : dBb) + (unsigned)(s * BSt * 2);
#pragma unroll
        for (int jj = 0; jj < PB::kRows; ++jj) {
          const int n = (r0 + kB + jj * PB::kStep < p.M && (int)row[jj] >= 0) ? nB : 0;
          cp_async16_at(d + jj * kDstB * 2, row_addr(srcB, n ? row[jj] : 0u, rowB), n);
        }
      }
    };
    // Prologue: the order's rows of iterations 0 … 2D − 1, then the table
    // entries of 0 … D − 1. Then step j fills stage j mod S (once the
    // consumers handed it back), arrives on its full barrier when those
    // copies land, and loads the table entries of j + D and the order's
    // rows of j + 2D (one group; waited for D − 1 steps later, when step
    // j + 1 needs the entries of j + 1).
    for (int j = 0; j < 2 * D && j < nIter; ++j) load_order(j);
    cp_async_commit();
    cp_async_wait<0>();
    producers_sync(PT);
    for (int j = 0; j < D && j < nIter; ++j) load_tbl(j);
    cp_async_commit();
    cp_async_wait<0>();
    producers_sync(PT);
    for (int j = 0; j < nIter; ++j) {
      const int s = j % S;
      mbar_wait(empty + s, ((j / S) & 1) ^ 1);
      load(j, s);
      mbar_arrive_cp_async(full + s);
      if (j + D < nIter) load_tbl(j + D);
      if (j + 2 * D < nIter) load_order(j + 2 * D);
      cp_async_commit();
      cp_async_wait<D - 1>();
      producers_sync(PT);
    }
    cp_async_wait<0>();
  } else {
    // ---- consumers ----
    const int wg = warp >> 2;
    for (int it = 0; it < nIter; ++it) {
      const int s = it % S, e = list[it / SUB];
      mbar_wait(full + s, (it / S) & 1);
      fence_proxy_async();
      constexpr unsigned kStep = (16 * 128) >> 4;  // 16 k-lines of 128 bytes per instruction
      const unsigned long long da = wgmma_desc(smem_addr(As + s * ASt + wg * 64 * BK), C::kMnLbo, 1024);
      wgmma_fence();
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
      wgmma_commit();
      wgmma_wait<1>();
      __syncwarp();
      if (it > 0 && lane == 0) mbar_arrive(empty + (it - 1) % S);
    }
    wgmma_wait<0>();
    pin_acc<C::MI * C::NI * 4>(&accA[0][0][0]);
    pin_acc<C::MI * C::NI * 4>(&accB[0][0][0]);
  }

  // Epilogue: whole tiles through shared memory (the stages, free once
  // every thread passed the barrier), 16-byte stores of whole rows by all
  // threads; partial tiles by the consumers' fragments.
  __syncthreads();
  float* out = p.part + (long long)z * p.co * p.V * p.ci;
  const long long ldo = p.V * p.ci;
  if (m0 + C::BM <= p.co && n0 + C::BN <= p.ci && (p.ci & 3) == 0) {
    constexpr int kLd = C::BN + 4, kCpr = C::BN / 4;
    float* st = reinterpret_cast<float*>(base);
    const int g = lane >> 2, t4 = lane & 3;
    auto storeTap = [&](const float (&acc)[C::MI][C::NI][4], int v) {
      if (warp < kConsWarps) store_frags<C>(st + (warp * C::WTM + g) * kLd + 2 * t4, kLd, acc);
      __syncthreads();
      float* o = out + m0 * ldo + (long long)v * p.ci + n0;
      for (int c = tid; c < C::BM * kCpr; c += NT) {
        const int r = c / kCpr, q = c % kCpr;
        *reinterpret_cast<uint4*>(o + r * ldo + q * 4) = *reinterpret_cast<const uint4*>(st + r * kLd + q * 4);
      }
      __syncthreads();
    };
    storeTap(accA, ta);
    if (!single) storeTap(accB, tb);
  } else if (warp < kConsWarps) {
    PairsParams pp{};
    pp.M = p.co;
    pp.N = p.ci;
    pp.V = p.V;
    pp.part = p.part;
    pairs_store<C>(pp, accA, m0, n0, ta, z, warp, 0, lane);
    if (!single) pairs_store<C>(pp, accB, m0, n0, tb, z, warp, 0, lane);
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

#define FG_TAPPAIRS_KERNEL(NAME, MATH, BM, BN, WM, S, PW)                                            \
  extern "C" __global__ void __launch_bounds__(32 * ((WM) + (PW)), 1) NAME(const fg::TapPairsParams p) { \
    fg_await_prior_grid();                                                                               \
    fg::tappairs_gemm<fg::TileCfg<MATH, BM, BN, 64, WM, 1, S, true>, PW>(p);                             \
  }
FG_TAPPAIRS_KERNEL(spconv_tappairs_f16_m128n128k64s4p4, fg::Math::F16, 128, 128, 8, 4, 4)
FG_TAPPAIRS_KERNEL(spconv_tappairs_bf16_m128n128k64s4p4, fg::Math::BF16, 128, 128, 8, 4, 4)
FG_TAPPAIRS_KERNEL(spconv_tappairs_f16_m64n64k64s4p4, fg::Math::F16, 64, 64, 4, 4, 4)
FG_TAPPAIRS_KERNEL(spconv_tappairs_bf16_m64n64k64s4p4, fg::Math::BF16, 64, 64, 4, 4, 4)
#undef FG_TAPPAIRS_KERNEL
