// Auxiliary kernels of the convolution engine: dtype conversion, weight
// transpose, im2col gather, split-K reductions and bias gradient.
//
// Every kernel takes 8-byte arguments only (pointers and long long) and
// uses 64-bit element indices with grid-stride loops.
#include "gemm.cuh"
#include "pdl.cuh"

namespace fg_aux {

using fg::from_f32;
using fg::to_f32;

__device__ __forceinline__ long long gtid() { return (long long)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ long long gstride() { return (long long)gridDim.x * blockDim.x; }

template <class S, class D> __device__ void convert(const S* in, D* out, long long n) {
  for (long long i = gtid(); i < n; i += gstride()) out[i] = from_f32<D>(to_f32(in[i]));
}

// The bits of a float32 that a tf32 product reads (sign, exponent, the
// first 10 mantissa bits): mma.sync and wgmma ignore the other 13, so an
// operand with them cleared multiplies to the same bits, and its copies
// toggle fewer wires (docs/PERF_NOTES.md, step 108).
constexpr unsigned kTF32Bits = 0xffffe000u;

// out[i] = in[i] & keep: 16-byte loads and stores where both pointers and n
// allow them (every engine allocation is 256-byte aligned).
__device__ void mask_bits(const unsigned* in, unsigned* out, long long n, unsigned keep) {
  long long done = 0;
  if ((((unsigned long long)in | (unsigned long long)out) & 15) == 0) {
    const long long n4 = n / 4;
    const uint4* in4 = reinterpret_cast<const uint4*>(in);
    uint4* out4 = reinterpret_cast<uint4*>(out);
    for (long long i = gtid(); i < n4; i += gstride()) {
      uint4 v = in4[i];
      v.x &= keep, v.y &= keep, v.z &= keep, v.w &= keep;
      out4[i] = v;
    }
    done = 4 * n4;
  }
  for (long long i = done + gtid(); i < n; i += gstride()) out[i] = in[i] & keep;
}

// out[ci, v, co] = in[co, v, ci] & keep: [Co, V, Ci] -> [Ci, V, Co], one
// 32×32 (co, ci) tile of tap v per block (grid ⌈Ci/32⌉ × ⌈Co/32⌉ × V, 32×8
// threads) through shared memory, so reads and writes are both coalesced.
template <class R> __device__ void transpose_w(const R* in, R* out, long long co_n, long long v_n, long long ci_n, R keep) {
  __shared__ R tile[32][33];
  const long long c0 = (long long)blockIdx.x * 32, o0 = (long long)blockIdx.y * 32, v = blockIdx.z;
  for (int j = threadIdx.y; j < 32; j += 8) {
    const long long o = o0 + j, c = c0 + threadIdx.x;
    if (o < co_n && c < ci_n) tile[j][threadIdx.x] = (R)(in[(o * v_n + v) * ci_n + c] & keep);
  }
  __syncthreads();
  for (int j = threadIdx.y; j < 32; j += 8) {
    const long long c = c0 + j, o = o0 + threadIdx.x;
    if (o < co_n && c < ci_n) out[(c * v_n + v) * co_n + o] = tile[threadIdx.x][j];
  }
}

// out[r, v·C + c] = tbl[r, v] >= 0 ? in[tbl[r, v], c] : 0  ([R, V·C]).
template <class R> __device__ void im2col(const R* in, const int* tbl, R* out, long long rows, long long v_n, long long c_n) {
  const long long n = rows * v_n * c_n;
  for (long long i = gtid(); i < n; i += gstride()) {
    const long long c = i % c_n;
    const long long rv = i / c_n;  // = r·V + v
    const int src = tbl[rv];
    out[i] = src >= 0 ? in[(long long)src * c_n + c] : R(0);
  }
}

// store4 writes four consecutive results at p (aligned to 4 elements).
template <class T> __device__ __forceinline__ void store4(T* p, const float4& v) {
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(p) = v;
  } else {
    union {
      T h[4];
      uint2 u;
    } w;
    w.h[0] = from_f32<T>(v.x);
    w.h[1] = from_f32<T>(v.y);
    w.h[2] = from_f32<T>(v.z);
    w.h[3] = from_f32<T>(v.w);
    *reinterpret_cast<uint2*>(p) = w.u;
  }
}

// add4 adds the four partial sums at p (16-byte aligned) to s, in place.
__device__ __forceinline__ void add4(float4& s, const float* p) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  s.x += v.x;
  s.y += v.y;
  s.z += v.z;
  s.w += v.w;
}

// sum_slices writes out[i] = Σ_{z < slices(i)} part[z·n + i], plus
// add(s, i), for the n elements, summed in split order. With vec a thread
// sums four consecutive elements (which share slices(i)) with 16-byte
// loads: the same sums in the same order. reduce and reduce_taps differ
// only in slices and add.
template <class T, class Slices, class Add>
__device__ __forceinline__ void sum_slices(const float* part, T* out, long long n, long long vec, Slices slices,
                                           Add add) {
  if (vec) {
    for (long long i = gtid() * 4; i < n; i += gstride() * 4) {
      const long long sv = slices(i);
      float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
      for (long long z = 0; z < sv; ++z) add4(s, part + z * n + i);
      add(s, i);
      store4(out + i, s);
    }
    return;
  }
  for (long long i = gtid(); i < n; i += gstride()) {
    const long long sv = slices(i);
    float s = 0.f;
    for (long long z = 0; z < sv; ++z) s += part[z * n + i];
    add(s, i);
    out[i] = from_f32<T>(s);
  }
}

// AddBias adds bias[c] (or nothing for a null bias) to the sum of element
// i of a [rows, cols] result, c = i mod cols: to one sum, or to four of
// consecutive elements.
template <class T> struct AddBias {
  const T* bias;
  long long cols;
  __device__ __forceinline__ void operator()(float4& s, long long i) const {
    if (!bias) return;
    const long long c = i % cols;
    s.x += to_f32(bias[c]);
    s.y += to_f32(bias[c + 1]);
    s.z += to_f32(bias[c + 2]);
    s.w += to_f32(bias[c + 3]);
  }
  __device__ __forceinline__ void operator()(float& s, long long i) const {
    if (bias) s += to_f32(bias[i % cols]);
  }
};

// out[r, c] = Σ_z part[z, r, c] (+ bias[c]), summed in split order. With
// vec (rows·cols and cols multiples of 4, part 16-byte and out 4-element
// aligned: the host checks) a thread sums four consecutive elements with
// 16-byte loads, the same sums in the same order.
template <class T>
__device__ void reduce(const float* part, T* out, const T* bias, long long rows, long long cols, long long splits,
                       long long vec) {
  sum_slices(part, out, rows * cols, vec, [=](long long) { return splits; }, AddBias<T>{bias, cols});
}

// The reduction of a weight gradient's balanced split (PairsParams.chunk
// > 0): out[r, v·N + n] = Σ_{z < slices(v)} part[z, r, v·N + n], summed in
// split order, where slices(v) is the split slices tap v used
// (fg::pairs_tap_slices with the pairs kernel's seg, mirror, V, K, bk,
// chunk and splits); its other slices were never written. Each block
// first tabulates slices(v) in shared memory (up to kReduceTapsTable
// taps), so an element costs one 32-bit division and its loads, not a
// chain of 64-bit divisions and segment loads.
constexpr int kReduceTapsTable = 1024;
template <class T>
__device__ void reduce_taps(const float* part, T* out, long long rows, long long V, long long N, long long splits,
                            const long long* seg, long long mirror, long long K, long long bk, long long chunk,
                            long long vec) {
  __shared__ int slices[kReduceTapsTable];
  const bool table = V <= kReduceTapsTable;
  if (table) {
    for (int v = threadIdx.x; v < V; v += blockDim.x)
      slices[v] = (int)fg::pairs_tap_slices(seg, mirror, V, K, v, bk, chunk, splits);
    __syncthreads();
  }
  const long long cols = V * N, n = rows * cols;
  const bool narrow = n < (1ll << 32);  // every index fits 32 bits
  // The slices of element i's tap.
  auto tapSlices = [&](long long i) -> long long {
    const int v = narrow ? (int)((unsigned)i % (unsigned)cols / (unsigned)N) : (int)((i % cols) / N);
    return table ? slices[v] : fg::pairs_tap_slices(seg, mirror, V, K, v, bk, chunk, splits);
  };
  // Four consecutive elements (vec: N a multiple of 4) are of one tap.
  sum_slices(part, out, n, vec, tapSlices, AddBias<T>{nullptr, cols});
}

// Bias gradient, stage 1: part[chunk, c] = Σ_{r in chunk} dy[r, c] for
// chunks of chunk_rows rows (chosen by the host). Block (32, 8): column c = blockIdx.x·32 + tx;
// thread ty sums rows ty, ty+8, … of the chunk, then the 8 partial sums are
// added in ty order. Fixed partition: deterministic.
template <class T>
__device__ void bias_grad1(const T* dy, float* part, long long rows, long long cols, long long chunk_rows) {
  __shared__ float red[8][33];
  const long long c = (long long)blockIdx.x * 32 + threadIdx.x;
  const long long chunk = blockIdx.y;
  const long long r0 = chunk * chunk_rows;
  const long long r1 = min(rows, r0 + chunk_rows);
  float s = 0.f;
  if (c < cols)
    for (long long r = r0 + threadIdx.y; r < r1; r += 8) s += to_f32(dy[r * cols + c]);
  red[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t = 0.f;
    for (int j = 0; j < 8; ++j) t += red[j][threadIdx.x];
    part[chunk * cols + c] = t;
  }
}

// Bias gradient, stage 1 with 16-byte loads (cols a multiple of
// V = 16/sizeof(T), dy 16-byte aligned): part[chunk, c] as bias_grad1.
// Block of 256 threads over gpb column groups of V columns (gpb a power of
// two, at most 32): thread t reads group t mod gpb of rows r0 + ⌊t/gpb⌋,
// r0 + ⌊t/gpb⌋ + 256/gpb, … of its chunk, one 16-byte load per row (four
// in flight), then the 256/gpb row lanes of every column are added in
// lane order. Fixed partition: deterministic.
template <class T>
__device__ void bias_grad1v(const T* dy, float* part, long long rows, long long cols, long long chunk_rows, long long gpb) {
  constexpr int V = 16 / sizeof(T);
  __shared__ float red[256 * V];
  const int t = threadIdx.x, q = t % (int)gpb, lanes = 256 / (int)gpb, r = t / (int)gpb;
  const long long c0 = ((long long)blockIdx.x * gpb + q) * V;
  const long long chunk = blockIdx.y;
  const long long r0 = chunk * chunk_rows, r1 = min(rows, r0 + chunk_rows);
  float acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = 0.f;
  if (c0 < cols) {
    // Four rows' loads in flight at a time, added in row order.
    long long i = r0 + r;
    for (; i + 3 * lanes < r1; i += 4 * lanes) {
      uint4 raw[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) raw[k] = *reinterpret_cast<const uint4*>(dy + (i + k * lanes) * cols + c0);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const T* e = reinterpret_cast<const T*>(&raw[k]);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += to_f32(e[j]);
      }
    }
    for (; i < r1; i += lanes) {
      const uint4 raw = *reinterpret_cast<const uint4*>(dy + i * cols + c0);
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += to_f32(e[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) red[t * V + j] = acc[j];
  __syncthreads();
  if (t < gpb * V) {
    const int g = t / V, j = t % V;
    const long long c = ((long long)blockIdx.x * gpb + g) * V + j;
    float sum = 0.f;
    for (int l = 0; l < lanes; ++l) sum += red[(l * (int)gpb + g) * V + j];
    if (c < cols) part[chunk * cols + c] = sum;
  }
}

// Bias gradient, stage 2: out[c] = Σ_chunk part[chunk, c], one warp per
// column (8 per 256-thread block): lane l sums chunks l, l + 32, … in
// order, then a fixed xor-shuffle tree adds the 32 lane sums. The order is
// fixed, so the result is deterministic; the chain of dependent loads per
// thread is 32 times shorter than one thread walking every chunk.
template <class T> __device__ void bias_grad2(const float* part, T* out, long long chunks, long long cols) {
  const int lane = threadIdx.x & 31;
  for (long long c = gtid() >> 5; c < cols; c += gstride() >> 5) {
    float s = 0.f;
    for (long long k = lane; k < chunks; k += 32) s += part[k * cols + c];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) out[c] = from_f32<T>(s);
  }
}

// ---- per-tap gathers (cudaext pertap.go) ----------------------------------
//
// A submanifold convolution's forward (and its input gradient, which
// gathers through the same table with mirrored weight taps) as one GEMM per
// tap over the rows that have the tap: slot s of tap k's segment (segments
// padded to multiples of bm, in tap order) holds one pair (in, out); the
// gather kernel multiplies slot rows through the slot table tbl [slots]
// (in, or −1 for padding; GatherParams.slot_tbl) with tiles of one tap
// each (tile_seg t → t, tile_taps t → k), writes each slot's product row,
// and pertap_reduce sums a row's products over its taps.

// pertap_tables fills the slots of tap k = blockIdx.y: tbl[s] = in,
// slot[out, k] = s, and for the first slot of each tile tile_taps and
// tile_seg (and tile_seg[tiles] from the last tap). A tap's pairs are
// those of fg::PairsTap over the lists (half: the lists hold the taps
// before the centre, a tap after it has its mirror's pairs swapped, the
// centre is the identity over n rows). tbl and slot are −1 beforehand;
// padding slots keep −1 (zero products, never read).
__device__ void pertap_tables(const int* pin, const int* pout, const long long* seg, long long half, long long n,
                              long long V, long long bm, int* tbl, int* slot, int* tseg, int* ttap) {
  // The tiles of the taps before k, counted by the block in parallel (a
  // chain of k 64-bit divisions per thread took ~9 µs at V = 27, session
  // 33); slots fit 32 bits (perTap's rule).
  __shared__ int before;
  const int k = blockIdx.y, b = (int)bm;
  if (threadIdx.x == 0) before = 0;
  __syncthreads();
  int mine = 0;
  for (int t = threadIdx.x; t < k; t += blockDim.x) {
    const fg::PairsTap p(seg, half, V, n, t);
    mine += (int)(p.s1 - p.s0 + b - 1) / b;
  }
  if (mine) atomicAdd(&before, mine);
  __syncthreads();
  const int off = before * b;
  const fg::PairsTap tap(seg, half, V, n, k);
  const int cnt = (int)(tap.s1 - tap.s0), end = (cnt + b - 1) / b * b;
  for (long long jj = gtid(); jj < end; jj += gstride()) {
    const int j = (int)jj, s = off + j;
    if (j % b == 0) {
      ttap[s / b] = k;
      tseg[s / b] = s / b;
    }
    if (j >= cnt) continue;
    const long long p = tap.s0 + j;
    const int in = tap.centre ? j : tap.flip ? pout[p] : pin[p];
    const int out = tap.centre ? j : tap.flip ? pin[p] : pout[p];
    tbl[s] = in;
    slot[(long long)out * V + k] = s;
  }
  if (k == V - 1 && gtid() == 0) tseg[(off + end) / b] = (off + end) / b;
}

// load4 reads four consecutive elements at p (aligned to four) as floats.
template <class T> __device__ __forceinline__ float4 load4(const T* p) {
  if constexpr (sizeof(T) == 4) {
    return *reinterpret_cast<const float4*>(p);
  } else {
    union {
      T h[4];
      uint2 u;
    } w;
    w.u = *reinterpret_cast<const uint2*>(p);
    return make_float4(to_f32(w.h[0]), to_f32(w.h[1]), to_f32(w.h[2]), to_f32(w.h[3]));
  }
}

// pertap_reduce sums the products of the slots in [s0, s1) (one group of
// a per-tap gather's tiles; part holds them from slot s0 on) over the taps
// k0 ≤ k < k1 that the group's tiles cover, in tap order, into float32
// running sums: a row's sum starts at 0 in the first group (first) and at
// acc[r, c] in the others, and after the last group (last) gets bias[c]
// and is rounded once into out[r, c]; before that it goes back to acc. A
// row's slots ascend with its taps, so groups in slot order sum every row
// in tap order and the result does not depend on the grouping; one group
// over all slots and taps (first and last) is the sum the per-tap gathers
// always made. acc may be out itself when T is float (the same element is
// read and then written by one thread). With vec (cols a multiple of 4)
// four columns per thread. With Listed (the rows of a hybrid gather that
// hold sparse pairs) only the rows rowlist[0..rows) are summed, the others
// are left as they are; without it rowlist is not read. Listed is a
// template switch, not a test of rowlist, so that the per-tap gathers'
// sum compiles to the plain loop: the row list's indexing in the same
// kernel took it from 32 to 44 registers and fp16 (16, 1024, 8) steps
// 4 % slower (H200, session 48). (Reading sixteen taps' slots before
// their products, for more loads in flight, was slower at RES 16: 18 µs
// against 13, session 32.)
template <class T, bool Listed>
__device__ void pertap_reduce(const T* part, const int* slot, long long s0, long long s1, long long k0, long long k1,
                              const T* bias, float* acc, T* out, const int* rowlist, long long rows, long long cols,
                              long long V, long long vec, long long first, long long last) {
  const long long n = rows * cols;
  const AddBias<T> add{bias, cols};
  if (vec) {
    for (long long i = gtid() * 4; i < n; i += gstride() * 4) {
      const long long r = Listed ? rowlist[i / cols] : i / cols, c = i % cols, e = Listed ? r * cols + c : i;
      float4 s = first ? make_float4(0.f, 0.f, 0.f, 0.f) : *reinterpret_cast<const float4*>(acc + e);
      for (long long k = k0; k < k1; ++k) {
        const long long sl = slot[r * V + k];
        if (sl < s0 || sl >= s1) continue;
        const float4 v = load4(part + (sl - s0) * cols + c);
        s.x += v.x;
        s.y += v.y;
        s.z += v.z;
        s.w += v.w;
      }
      if (last) {
        add(s, e);
        store4(out + e, s);
      } else {
        *reinterpret_cast<float4*>(acc + e) = s;
      }
    }
    return;
  }
  for (long long i = gtid(); i < n; i += gstride()) {
    const long long r = Listed ? rowlist[i / cols] : i / cols, c = i % cols, e = Listed ? r * cols + c : i;
    float s = first ? 0.f : acc[e];
    for (long long k = k0; k < k1; ++k) {
      const long long sl = slot[r * V + k];
      if (sl >= s0 && sl < s1) s += to_f32(part[(sl - s0) * cols + c]);
    }
    if (last) {
      add(s, e);
      out[e] = from_f32<T>(s);
    } else {
      acc[e] = s;
    }
  }
}

}  // namespace fg_aux

extern "C" {

__global__ void spconv_cvt_f32_f16(const float* in, __half* out, long long n) {
  fg_await_prior_grid();
  fg_aux::convert(in, out, n);
}
__global__ void spconv_cvt_f32_bf16(const float* in, __nv_bfloat16* out, long long n) {
  fg_await_prior_grid();
  fg_aux::convert(in, out, n);
}
__global__ void spconv_cvt_f16_f32(const __half* in, float* out, long long n) {
  fg_await_prior_grid();
  fg_aux::convert(in, out, n);
}
__global__ void spconv_cvt_bf16_f32(const __nv_bfloat16* in, float* out, long long n) {
  fg_await_prior_grid();
  fg_aux::convert(in, out, n);
}

__global__ void spconv_transpose_w_b32(const unsigned* in, unsigned* out, long long co, long long v, long long ci) {
  fg_await_prior_grid();
  fg_aux::transpose_w(in, out, co, v, ci, ~0u);
}
__global__ void spconv_transpose_w_b16(const unsigned short* in, unsigned short* out, long long co, long long v,
                                       long long ci) {
  fg_await_prior_grid();
  fg_aux::transpose_w(in, out, co, v, ci, (unsigned short)0xffffu);
}
// The transpose of a float32 weight as tf32 operands (the bits tf32
// products ignore cleared).
__global__ void spconv_transpose_w_tf32(const unsigned* in, unsigned* out, long long co, long long v, long long ci) {
  fg_await_prior_grid();
  fg_aux::transpose_w(in, out, co, v, ci, fg_aux::kTF32Bits);
}
// A copy of n float32 values as tf32 operands.
__global__ void spconv_tf32_operand(const unsigned* in, unsigned* out, long long n) {
  fg_await_prior_grid();
  fg_aux::mask_bits(in, out, n, fg_aux::kTF32Bits);
}

// A copy of n float32 values (n a multiple of 32: rows of whole 32-column
// chunks) as tf32 operands of the register-A gathers (gather_ws.cuh RA):
// column c = 8k + t + 4h (t < 4, h < 2) of every 32-column chunk holds the
// chunk's column 16⌊k/2⌋ + 4t + 2(k mod 2) + h.
__global__ void spconv_tf32_operand_ra(const unsigned* in, unsigned* out, long long n) {
  fg_await_prior_grid();
  for (long long i = fg_aux::gtid(); i < n; i += fg_aux::gstride()) {
    const int c = (int)(i & 31), k = c >> 3, t = c & 3, h = (c >> 2) & 1;
    out[i] = in[(i & ~31ll) + 16 * (k >> 1) + 4 * t + 2 * (k & 1) + h] & fg_aux::kTF32Bits;
  }
}

__global__ void spconv_im2col_b32(const unsigned* in, const int* tbl, unsigned* out, long long rows, long long v,
                                  long long c) {
  fg_await_prior_grid();
  fg_aux::im2col(in, tbl, out, rows, v, c);
}
__global__ void spconv_im2col_b16(const unsigned short* in, const int* tbl, unsigned short* out, long long rows,
                                  long long v, long long c) {
  fg_await_prior_grid();
  fg_aux::im2col(in, tbl, out, rows, v, c);
}

__global__ void spconv_pertap_tables(const int* pin, const int* pout, const long long* seg, long long half, long long n,
                                     long long V, long long bm, int* tbl, int* slot, int* tseg, int* ttap) {
  fg_await_prior_grid();
  fg_aux::pertap_tables(pin, pout, seg, half, n, V, bm, tbl, slot, tseg, ttap);
}

// The split-K reductions and the bias gradient's stages of one float
// dtype T, named by suffix SFX (f32, f16, bf16: cudaext's floatSuffix).
#define FG_AUX_FLOAT_KERNELS(SFX, T)                                                                              \
  __global__ void spconv_reduce_##SFX(const float* part, T* out, const T* bias, long long rows, long long cols,      \
                                      long long splits, long long vec) {                                          \
    fg_await_prior_grid();                                                                                        \
    fg_aux::reduce(part, out, bias, rows, cols, splits, vec);                                                     \
  }                                                                                                               \
  __global__ void spconv_reduce_taps_##SFX(const float* part, T* out, long long rows, long long V, long long N,     \
                                           long long splits, const long long* seg, long long mirror, long long K, \
                                           long long bk, long long chunk, long long vec) {                        \
    fg_await_prior_grid();                                                                                        \
    fg_aux::reduce_taps(part, out, rows, V, N, splits, seg, mirror, K, bk, chunk, vec);                           \
  }                                                                                                               \
  __global__ void spconv_bias_grad1v_##SFX(const T* dy, float* part, long long rows, long long cols,                \
                                           long long chunk_rows, long long gpb) {                                 \
    fg_await_prior_grid();                                                                                        \
    fg_aux::bias_grad1v(dy, part, rows, cols, chunk_rows, gpb);                                                   \
  }                                                                                                               \
  __global__ void spconv_bias_grad1_##SFX(const T* dy, float* part, long long rows, long long cols,                 \
                                          long long chunk_rows) {                                                 \
    fg_await_prior_grid();                                                                                        \
    fg_aux::bias_grad1(dy, part, rows, cols, chunk_rows);                                                         \
  }                                                                                                               \
  __global__ void spconv_bias_grad2_##SFX(const float* part, T* out, long long chunks, long long cols) {            \
    fg_await_prior_grid();                                                                                        \
    fg_aux::bias_grad2(part, out, chunks, cols);                                                                  \
  }                                                                                                               \
  __global__ void spconv_pertap_reduce_##SFX(const T* part, const int* slot, long long s0, long long s1,           \
                                             long long k0, long long k1, const T* bias, float* acc, T* out,       \
                                             const int* rowlist, long long rows, long long cols, long long V,     \
                                             long long vec, long long first, long long last) {                    \
    fg_await_prior_grid();                                                                                        \
    fg_aux::pertap_reduce<T, false>(part, slot, s0, s1, k0, k1, bias, acc, out, rowlist, rows, cols, V, vec,      \
                                    first, last);                                                                 \
  }                                                                                                               \
  __global__ void spconv_pertap_reduce_rows_##SFX(const T* part, const int* slot, long long s0, long long s1,     \
                                                  long long k0, long long k1, const T* bias, float* acc,          \
                                                  T* out, const int* rowlist, long long rows, long long cols,     \
                                                  long long V, long long vec, long long first, long long last) {  \
    fg_await_prior_grid();                                                                                        \
    fg_aux::pertap_reduce<T, true>(part, slot, s0, s1, k0, k1, bias, acc, out, rowlist, rows, cols, V, vec,       \
                                   first, last);                                                                  \
  }
FG_AUX_FLOAT_KERNELS(f32, float)
FG_AUX_FLOAT_KERNELS(f16, __half)
FG_AUX_FLOAT_KERNELS(bf16, __nv_bfloat16)
#undef FG_AUX_FLOAT_KERNELS

}  // extern "C"
