// A stable LSD radix sort for many tiles built from CUB's onesweep agents
// (cub::AgentRadixSortHistogram, cub::AgentRadixSortOnesweep), included
// once, at the end of sort.cu (its kernels belong to the sort module). The
// sort of sort.cu for up to 256 tiles of 2,048 keys (sort_wave,
// sort_onesweep) looks back one tile at a time and slows as the tiles in
// flight grow, so above that the host (cudaext/sort.go, Device.cubSort)
// sequences these:
//
//   sort_cub_hist_<key>_b<bits>     one launch: the digit counts of every
//                                   pass (shared-memory histograms added
//                                   into global ones with integer atomics),
//                                   and, for an iota sort, vals[i] = i;
//   sort_cub_exsum_b<bits>          one block per pass: the counts become
//                                   each digit's first position;
//   sort_cub_pass_<key>[_keys]_b<bits>  one launch per pass: each tile
//                                   takes its index from a counter in the
//                                   order tiles start, ranks its keys
//                                   (match-any ranking, counts published
//                                   early for the tiles after it) and looks
//                                   back over the tiles before it, one bin
//                                   per thread, for the prefix of every digit.
//
// Tiles hold 384 threads × 21 keys (4-byte keys and values; fewer for
// 8-byte keys, scaled by CUB), digits have bits = 8 or 9 bits; the last
// pass takes the remaining bits. Integer sums only, in an order fixed by
// the keys: the result is the same stable order as every other sort path,
// whatever the timing. The scratch (bins, one counter and one look-back
// array per pass) must be zero before the histogram; the host zeroes it
// with one memset.
#pragma once

#include <cub/agent/agent_radix_sort_histogram.cuh>
#include <cub/agent/agent_radix_sort_onesweep.cuh>
#include <cub/block/block_scan.cuh>

#include "pdl.cuh"

namespace fgc {

constexpr int kPassThreads = 384;
constexpr int kPassItems4B = 21;  // keys per thread for 4-byte keys and values
constexpr int kHistThreads = 128;
constexpr int kHistItems4B = 16;
constexpr int kScanThreads = 256;

// Sort is the CUB configuration of a sort of Key keys carrying Value
// values (cub::NullType: keys only) by digits of Bits bits.
template <class Key, class Value, int Bits> struct Sort {
  // CUB scales the items per thread by the wider of key and value.
  using Dominant = typename cub::If<(sizeof(Value) > sizeof(Key)), Value, Key>::Type;
  using PassPolicy =
      cub::AgentRadixSortOnesweepPolicy<kPassThreads, kPassItems4B, Dominant, 1, cub::RADIX_RANK_MATCH_EARLY_COUNTS_ANY,
                                        cub::BLOCK_SCAN_RAKING_MEMOIZE, cub::RADIX_SORT_STORE_DIRECT, Bits>;
  using HistPolicy = cub::AgentRadixSortHistogramPolicy<kHistThreads, kHistItems4B, 1, Key, Bits>;
  using Pass = cub::AgentRadixSortOnesweep<PassPolicy, false, Key, Value, int, int>;
  using Hist = cub::AgentRadixSortHistogram<HistPolicy, false, Key, int>;
  static constexpr int kTileItems = PassPolicy::ITEMS_PER_THREAD * kPassThreads;
  static_assert(PassPolicy::BLOCK_THREADS == kPassThreads, "the kernels' launch bounds");
  // cudaext/sort.go cubPassTile: the host sizes the grid and the look-back by these.
  static_assert(kTileItems == (sizeof(Key) == 8 ? 384 * 10 : 384 * 21), "the host's tile size");
  static_assert(HistPolicy::BLOCK_THREADS == kHistThreads, "the kernels' launch bounds");
};

// hist adds the digit counts of keys[0:n] for the passes over bits
// [0, nbits) into bins (pass-major, 1 << Bits a pass); with iota != 0 it
// also writes iota[i] = i.
template <class Key, int Bits> __device__ void hist(int* bins, const Key* keys, int n, int nbits, int* iota) {
  using H = typename Sort<Key, int, Bits>::Hist;
  __shared__ typename H::TempStorage tmp;
  H(tmp, bins, keys, n, 0, nbits).Process();
  if (iota != nullptr) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) iota[i] = i;
  }
}

// exsum turns pass blockIdx.x's digit counts into exclusive prefix sums.
template <int Bits> __device__ void exsum(int* bins) {
  constexpr int kDigits = 1 << Bits;
  constexpr int kPer = (kDigits + kScanThreads - 1) / kScanThreads;
  using BS = cub::BlockScan<int, kScanThreads>;
  __shared__ typename BS::TempStorage tmp;
  int* b = bins + blockIdx.x * kDigits;
  int v[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int d = threadIdx.x * kPer + u;
    v[u] = d < kDigits ? b[d] : 0;
  }
  BS(tmp).ExclusiveSum(v, v);
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int d = threadIdx.x * kPer + u;
    if (d < kDigits) b[d] = v[u];
  }
}

// pass places keys_in (and values_in) by the digit of nbits bits at shift
// into keys_out (values_out); bins holds the pass's digit starts, lookback
// the pass's zeroed look-back words (one per tile and digit), ctr its
// zeroed tile counter.
template <class Key, class Value, int Bits>
__device__ void pass(int* lookback, int* ctr, const int* bins, Key* keys_out, const Key* keys_in, Value* values_out,
                     const Value* values_in, int n, int shift, int nbits) {
  using P = typename Sort<Key, Value, Bits>::Pass;
  __shared__ typename P::TempStorage tmp;
  P(tmp, lookback, ctr, nullptr, bins, keys_out, keys_in, values_out, values_in, n, shift, nbits).Process();
}

}  // namespace fgc

// One instantiation per key type and digit width: kernels are looked up by
// name (cudaext/sort.go cubKernel).
#define FG_CUB_SORT(KEY, SUF, BITS)                                                                               \
  extern "C" __global__ void __launch_bounds__(fgc::kHistThreads)                                                 \
      sort_cub_hist_##SUF##_b##BITS(int* bins, const KEY* keys, int n, int nbits, int* iota) {                    \
    fg_await_prior_grid();                                                                                        \
    fgc::hist<KEY, BITS>(bins, keys, n, nbits, iota);                                                             \
  }                                                                                                               \
  extern "C" __global__ void __launch_bounds__(fgc::kPassThreads)                                                 \
      sort_cub_pass_##SUF##_b##BITS(int* lookback, int* ctr, const int* bins, KEY* keys_out, const KEY* keys_in,  \
                                    int* values_out, const int* values_in, int n, int shift, int nbits) {         \
    fg_await_prior_grid();                                                                                        \
    fgc::pass<KEY, int, BITS>(lookback, ctr, bins, keys_out, keys_in, values_out, values_in, n, shift, nbits);    \
  }                                                                                                               \
  extern "C" __global__ void __launch_bounds__(fgc::kPassThreads)                                                 \
      sort_cub_pass_keys_##SUF##_b##BITS(int* lookback, int* ctr, const int* bins, KEY* keys_out,                 \
                                         const KEY* keys_in, int n, int shift, int nbits) {                       \
    fg_await_prior_grid();                                                                                        \
    fgc::pass<KEY, cub::NullType, BITS>(lookback, ctr, bins, keys_out, keys_in, nullptr, nullptr, n, shift,       \
                                        nbits);                                                                   \
  }

FG_CUB_SORT(unsigned, u32, 8)
FG_CUB_SORT(unsigned, u32, 9)
FG_CUB_SORT(unsigned long long, u64, 8)
FG_CUB_SORT(unsigned long long, u64, 9)

extern "C" __global__ void __launch_bounds__(fgc::kScanThreads) sort_cub_exsum_b8(int* bins) {
  fg_await_prior_grid();
  fgc::exsum<8>(bins);
}
extern "C" __global__ void __launch_bounds__(fgc::kScanThreads) sort_cub_exsum_b9(int* bins) {
  fg_await_prior_grid();
  fgc::exsum<9>(bins);
}
