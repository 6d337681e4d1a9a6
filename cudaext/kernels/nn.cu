// Non-convolution kernels of a sparse network (host side: cudaext/nn.go):
// dtype conversion and column copies (channel concatenation), addition,
// ReLU, VoxelNorm statistics/forward/backward (optionally with a fused
// ReLU), softmax cross-entropy,
// Adam (per parameter, or every parameter in one launch), a non-finite
// check and a row argmax. The semantics are those of
// the device.NN contract in ops/device/kernels.go (and its CPU emulation,
// ops/device/fake.go).
//
// Storage dtypes are passed at run time as codes (0 float32, 1 float16,
// 2 bfloat16); the switch is uniform across a launch, and these kernels
// are bound by memory traffic, so one kernel per operation serves every
// combination. Arithmetic is float32; reductions accumulate in float64
// over a fixed partition (chunks of rows, then 32 lanes of chunks and a
// fixed tree over the lanes), so
// every result is deterministic without atomics. Scalar arguments are
// long long, int, float, or double passed as its 64-bit pattern.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "pdl.cuh"

namespace fgnn {

typedef long long i64;

__device__ __forceinline__ i64 gtid() { return (i64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ i64 gstride() { return (i64)gridDim.x * blockDim.x; }

// ld returns element i of a float buffer of dtype code dt as float32.
__device__ __forceinline__ float ld(const void* p, int dt, i64 i) {
  switch (dt) {
    case 1:
      return __half2float(static_cast<const __half*>(p)[i]);
    case 2:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// st stores v at element i, rounded to nearest even for the narrow types.
__device__ __forceinline__ void st(void* p, int dt, i64 i, float v) {
  switch (dt) {
    case 1:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      break;
    case 2:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
  }
}

// norm_affine is VoxelNorm's forward value x·sc + sh with sc = gamma·inv
// and sh = beta − mean·sc, every operation rounded (no fused multiply-add),
// so the forward and the ReLU mask of the backward agree bit for bit.
__device__ __forceinline__ float norm_affine(float x, float gamma, float beta, float mean, float inv) {
  const float sc = __fmul_rn(gamma, inv);
  const float sh = __fsub_rn(beta, __fmul_rn(mean, sc));
  return __fadd_rn(__fmul_rn(x, sc), sh);
}

// Block shape of the column reductions: 32 columns × 8 row lanes.
constexpr int kCols = 32;
constexpr int kLanes = 8;

// Sums (over the rows of one chunk) of up to two per-element quantities
// into part0/part1 [chunks, cols]; the 8 lanes are added in lane order.
template <class F>
__device__ void column_partials(i64 rows, i64 cols, i64 chunk_rows, double* part0, double* part1, F f) {
  __shared__ double red0[kLanes][kCols + 1];
  __shared__ double red1[kLanes][kCols + 1];
  const i64 c = (i64)blockIdx.x * kCols + threadIdx.x;
  const i64 chunk = blockIdx.y;
  const i64 r0 = chunk * chunk_rows;
  const i64 r1 = min(rows, r0 + chunk_rows);
  double s0 = 0, s1 = 0;
  if (c < cols)
    for (i64 r = r0 + threadIdx.y; r < r1; r += kLanes) f(r, c, s0, s1);
  red0[threadIdx.y][threadIdx.x] = s0;
  red1[threadIdx.y][threadIdx.x] = s1;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double t0 = 0, t1 = 0;
    for (int j = 0; j < kLanes; ++j) {
      t0 += red0[j][threadIdx.x];
      t1 += red1[j][threadIdx.x];
    }
    part0[chunk * cols + c] = t0;
    part1[chunk * cols + c] = t1;
  }
}

// Block shape of the chunk sums: 32 columns × 32 chunk lanes.
constexpr int kSumLanes = 32;

// chunk_sums adds the [chunks, cols] partials part0 and part1 of one
// column per threadIdx.x (column blockIdx.x·32 + threadIdx.x): lane y adds
// chunks y, y + 32, … in order, then the 32 lane sums are added by a
// fixed tree. The order depends only on chunks, so the result is
// deterministic; loads of a warp are coalesced and independent, so the
// stage is not one long chain of dependent loads. Returns the column for
// thread (x, 0) with the sums in s0, s1, and −1 for every other thread.
__device__ i64 chunk_sums(const double* part0, const double* part1, i64 chunks, i64 cols, double& s0, double& s1) {
  __shared__ double r0[kSumLanes][kCols + 1];
  __shared__ double r1[kSumLanes][kCols + 1];
  const i64 c = (i64)blockIdx.x * kCols + threadIdx.x;
  double a = 0, b = 0;
  if (c < cols) {
#pragma unroll 4
    for (i64 k = threadIdx.y; k < chunks; k += kSumLanes) {
      a += part0[k * cols + c];
      b += part1[k * cols + c];
    }
  }
  r0[threadIdx.y][threadIdx.x] = a;
  r1[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  for (int h = kSumLanes / 2; h > 0; h /= 2) {
    if (threadIdx.y < h) {
      r0[threadIdx.y][threadIdx.x] += r0[threadIdx.y + h][threadIdx.x];
      r1[threadIdx.y][threadIdx.x] += r1[threadIdx.y + h][threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.y != 0 || c >= cols) return -1;
  s0 = r0[0][threadIdx.x];
  s1 = r1[0][threadIdx.x];
  return c;
}

}  // namespace fgnn

using namespace fgnn;

extern "C" {

// dst[i] = src[i] for i < n, converting between float dtypes.
__global__ void nn_copy(const void* src, int sdt, void* dst, int ddt, i64 n) {
  fg_await_prior_grid();
  for (i64 i = gtid(); i < n; i += gstride()) st(dst, ddt, i, ld(src, sdt, i));
}

// dst[r, dcol + j] = src[r, scol + j] for r < rows, j < cols.
__global__ void nn_copy_cols(const void* src, int sdt, i64 scols, i64 scol, void* dst, int ddt, i64 dcols, i64 dcol,
                             i64 rows, i64 cols) {
  fg_await_prior_grid();
  const i64 n = rows * cols;
  for (i64 e = gtid(); e < n; e += gstride()) {
    const i64 r = e / cols, j = e - r * cols;
    st(dst, ddt, r * dcols + dcol + j, ld(src, sdt, r * scols + scol + j));
  }
}

// dst = a + b (dst may alias a or b).
__global__ void nn_add(const void* a, int adt, const void* b, int bdt, void* dst, int ddt, i64 n) {
  fg_await_prior_grid();
  for (i64 i = gtid(); i < n; i += gstride()) st(dst, ddt, i, ld(a, adt, i) + ld(b, bdt, i));
}

// dst = x > 0 ? x : 0 (NaN gives 0).
__global__ void nn_relu(const void* x, int xdt, void* dst, int ddt, i64 n) {
  fg_await_prior_grid();
  for (i64 i = gtid(); i < n; i += gstride()) {
    const float v = ld(x, xdt, i);
    st(dst, ddt, i, v > 0.f ? v : 0.f);
  }
}

// dx = x > 0 ? dy : 0.
__global__ void nn_relu_grad(const void* x, int xdt, const void* dy, int gdt, void* dx, int ddt, i64 n) {
  fg_await_prior_grid();
  for (i64 i = gtid(); i < n; i += gstride()) {
    const float v = ld(x, xdt, i);
    st(dx, ddt, i, v > 0.f ? ld(dy, gdt, i) : 0.f);
  }
}

// VoxelNorm statistics, stage 1: per chunk of rows, Σx and Σx² per column
// (float64). Block (32, 8), grid (ceil(cols/32), chunks).
__global__ void nn_norm_partial(const void* x, int xdt, i64 rows, i64 cols, i64 chunk_rows, double* psum, double* psq) {
  fg_await_prior_grid();
  column_partials(rows, cols, chunk_rows, psum, psq, [&](i64 r, i64 c, double& s0, double& s1) {
    const double v = ld(x, xdt, r * cols + c);
    s0 += v;
    s1 += v * v;
  });
}

// Stage 2: mean[c] = Σx/N and inv[c] = 1/√(max(Σx²/N − mean², 0) + eps)
// (N = 0: mean 0, inv 1/√eps). Block (32, 32), grid ceil(cols/32): see
// chunk_sums for the order of the additions.
__global__ void nn_norm_stats(const double* psum, const double* psq, i64 chunks, i64 rows, i64 cols, double eps,
                              float* mean, float* inv) {
  fg_await_prior_grid();
  double s, q;
  const i64 c = chunk_sums(psum, psq, chunks, cols, s, q);
  if (c < 0) return;
  double mu = 0, var = 0;
  if (rows > 0) {
    mu = s / (double)rows;
    var = fmax(q / (double)rows - mu * mu, 0.0);
  }
  mean[c] = (float)mu;
  inv[c] = (float)(1.0 / sqrt(var + eps));
}

// y = (x − mean)·inv·gamma + beta, as y = x·sc + sh with sc = gamma·inv,
// sh = beta − mean·sc (float32, norm_affine); relu ≠ 0 stores max(0, y)
// instead (NaN gives 0), the ReLU fused into the store.
__global__ void nn_norm_forward(const void* x, int xdt, const void* gamma, int gdt, const void* beta, int bdt,
                                const float* mean, const float* inv, void* y, int ydt, i64 rows, i64 cols, int relu) {
  fg_await_prior_grid();
  const i64 n = rows * cols;
  for (i64 e = gtid(); e < n; e += gstride()) {
    const i64 c = e % cols;
    float v = norm_affine(ld(x, xdt, e), ld(gamma, gdt, c), ld(beta, bdt, c), mean[c], inv[c]);
    if (relu && !(v > 0.f)) v = 0.f;
    st(y, ydt, e, v);
  }
}

// norm_dy returns dy[e], or 0 where the fused ReLU (relu ≠ 0) blocked the
// forward value of element e (channel c): the mask is recomputed from x
// with the forward's arithmetic, before any rounding to y's dtype.
__device__ __forceinline__ float norm_dy(const void* x, int xdt, const void* dy, int gdt, const void* gamma, int gmdt,
                                         const void* beta, int bdt, const float* mean, const float* inv, int relu, i64 e,
                                         i64 c) {
  if (relu && !(norm_affine(ld(x, xdt, e), ld(gamma, gmdt, c), ld(beta, bdt, c), mean[c], inv[c]) > 0.f)) return 0.f;
  return ld(dy, gdt, e);
}

// VoxelNorm backward, stage 1: per chunk, Σdy and Σdy·x̂ per column with
// x̂ = (x − mean)·inv (float64); with relu ≠ 0, dy is masked (norm_dy;
// beta is then read, and may be null otherwise).
__global__ void nn_norm_bwd_partial(const void* x, int xdt, const void* dy, int gdt, const float* mean, const float* inv,
                                    const void* gamma, int gmdt, const void* beta, int bdt, int relu, i64 rows, i64 cols,
                                    i64 chunk_rows, double* pb, double* pg) {
  fg_await_prior_grid();
  column_partials(rows, cols, chunk_rows, pb, pg, [&](i64 r, i64 c, double& s0, double& s1) {
    const i64 e = r * cols + c;
    const double d = norm_dy(x, xdt, dy, gdt, gamma, gmdt, beta, bdt, mean, inv, relu, e, c);
    const double xh = ((double)ld(x, xdt, e) - (double)mean[c]) * (double)inv[c];
    s0 += d;
    s1 += d * xh;
  });
}

// Stage 2: dbeta[c] = Σdy and dgamma[c] = Σdy·x̂. Block (32, 32), grid
// ceil(cols/32), as nn_norm_stats.
__global__ void nn_norm_bwd_sums(const double* pb, const double* pg, i64 chunks, i64 cols, float* dgamma, float* dbeta) {
  fg_await_prior_grid();
  double b, g;
  const i64 c = chunk_sums(pb, pg, chunks, cols, b, g);
  if (c < 0) return;
  dgamma[c] = (float)g;
  dbeta[c] = (float)b;
}

// Stage 3: dx = gamma·inv·(dy − (dbeta + x̂·dgamma)/N) (float32), dy
// masked as in stage 1 when relu ≠ 0.
__global__ void nn_norm_bwd_dx(const void* x, int xdt, const void* dy, int gdt, const void* gamma, int gmdt,
                               const float* mean, const float* inv, const float* dgamma, const float* dbeta, void* dx,
                               int ddt, i64 rows, i64 cols, const void* beta, int bdt, int relu) {
  fg_await_prior_grid();
  const i64 n = rows * cols;
  const float fn = (float)rows;
  for (i64 e = gtid(); e < n; e += gstride()) {
    const i64 c = e % cols;
    const float iv = inv[c];
    const float xh = __fmul_rn(__fsub_rn(ld(x, xdt, e), mean[c]), iv);
    const float corr = __fdiv_rn(__fadd_rn(dbeta[c], __fmul_rn(xh, dgamma[c])), fn);
    const float d = norm_dy(x, xdt, dy, gdt, gamma, gmdt, beta, bdt, mean, inv, relu, e, c);
    st(dx, ddt, e, __fmul_rn(__fmul_rn(ld(gamma, gmdt, c), iv), __fsub_rn(d, corr)));
  }
}

// Row weight of the cross-entropy: 0 for label −1, w[label] or 1.
__device__ __forceinline__ double xent_weight(const float* w, int l) {
  if (l < 0) return 0;
  return w ? (double)w[l] : 1.0;
}

// Row maximum and log Σ exp(z − max) of row i (float64).
__device__ __forceinline__ void xent_row(const void* z, int zdt, i64 i, i64 k, double& m, double& lse) {
  m = -INFINITY;
  for (i64 j = 0; j < k; ++j) m = fmax(m, (double)ld(z, zdt, i * k + j));
  double s = 0;
  for (i64 j = 0; j < k; ++j) s += exp((double)ld(z, zdt, i * k + j) - m);
  lse = log(s);
}

// Cross-entropy, stage 1: part[chunk] = Σ over the rows of the chunk of
// w[l]·(max + lse − z[l]); 256 threads per block, one chunk per block,
// a fixed-order tree reduction. Rows whose label is outside [0, k) do not
// count (the caller validates labels).
__global__ void nn_xent_partial(const void* z, int zdt, const int* labels, const float* w, i64 rows, i64 k,
                                i64 chunk_rows, double* part) {
  fg_await_prior_grid();
  __shared__ double red[256];
  const i64 r0 = (i64)blockIdx.x * chunk_rows;
  const i64 r1 = min(rows, r0 + chunk_rows);
  double s = 0;
  for (i64 i = r0 + threadIdx.x; i < r1; i += blockDim.x) {
    const int l = labels[i];
    const double wt = l < k ? xent_weight(w, l) : 0.0;
    if (wt == 0) continue;
    double m, lse;
    xent_row(z, zdt, i, k, m, lse);
    s += wt * (m + lse - (double)ld(z, zdt, i * k + l));
  }
  red[threadIdx.x] = s;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h /= 2) {
    if (threadIdx.x < h) red[threadIdx.x] += red[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) part[blockIdx.x] = red[0];
}

// Stage 2 (one thread): loss = scale·Σ part, the chunks in order.
__global__ void nn_xent_final(const double* part, i64 chunks, float scale, float* loss) {
  fg_await_prior_grid();
  if (gtid() != 0) return;
  double s = 0;
  for (i64 k = 0; k < chunks; ++k) s += part[k];
  loss[0] = (float)(s * (double)scale);
}

// dz[i, j] = scale·w[l]·(softmax(z[i])[j] − [j = l]); 0 for rows with
// weight 0 or a label outside [0, k). One thread per row.
__global__ void nn_xent_backward(const void* z, int zdt, const int* labels, const float* w, i64 rows, i64 k, float scale,
                                 void* dz, int ddt) {
  fg_await_prior_grid();
  for (i64 i = gtid(); i < rows; i += gstride()) {
    const int l = labels[i];
    const double wt = l < k ? xent_weight(w, l) : 0.0;
    if (wt == 0) {
      for (i64 j = 0; j < k; ++j) st(dz, ddt, i * k + j, 0.f);
      continue;
    }
    double m, lse;
    xent_row(z, zdt, i, k, m, lse);
    const double s = (double)scale * wt;
    for (i64 j = 0; j < k; ++j) {
      double p = exp((double)ld(z, zdt, i * k + j) - m - lse);
      if (j == l) p -= 1;
      st(dz, ddt, i * k + j, (float)(s * p));
    }
  }
}

}  // extern "C"

namespace fgnn {

// adam_elem applies one Adam update to element i (see device.NN.AdamStep).
__device__ __forceinline__ void adam_elem(float* w, const void* g, int gdt, float* m, float* v, i64 i, float lr,
                                          float beta1, float beta2, float eps, float corr1, float corr2, float gscale,
                                          float l2) {
  const float wi = w[i];
  const float gi = __fadd_rn(__fmul_rn(ld(g, gdt, i), gscale), __fmul_rn(l2, wi));
  const float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(__fsub_rn(1.f, beta1), gi));
  const float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fsub_rn(1.f, beta2), __fmul_rn(gi, gi)));
  m[i] = mi;
  v[i] = vi;
  const float num = __fmul_rn(-lr, __fmul_rn(mi, corr1));
  const float den = __fadd_rn(__fsqrt_rn(__fmul_rn(vi, corr2)), eps);
  w[i] = __fadd_rn(wi, __fdiv_rn(num, den));
}

// AdamTensor is one parameter of nn_adam_multi: its buffers, the index of
// its first element in the concatenation of all parameters, and the dtype
// code of its gradient. Layout: six 8-byte fields (cudaext/nn.go writes
// the table as 6 uint64 per parameter).
struct AdamTensor {
  float* w;
  const void* g;
  float* m;
  float* v;
  i64 start;
  i64 gdt;
};

}  // namespace fgnn

extern "C" {

// One Adam update per element (see device.NN.AdamStep); w, m, v float32.
__global__ void nn_adam(float* w, const void* g, int gdt, float* m, float* v, i64 n, float lr, float beta1, float beta2,
                        float eps, float corr1, float corr2, float gscale, float l2) {
  fg_await_prior_grid();
  for (i64 i = gtid(); i < n; i += gstride()) adam_elem(w, g, gdt, m, v, i, lr, beta1, beta2, eps, corr1, corr2, gscale, l2);
}

// nn_adam_multi updates count parameters (table t, starts ascending, t[0]
// starting at 0) over total elements in one grid-stride launch; element e
// belongs to the last parameter whose start is ≤ e (a binary search, so
// empty parameters are skipped). Same arithmetic as nn_adam.
__global__ void nn_adam_multi(const AdamTensor* t, int count, i64 total, float lr, float beta1, float beta2, float eps,
                              float corr1, float corr2, float gscale, float l2) {
  fg_await_prior_grid();
  for (i64 e = gtid(); e < total; e += gstride()) {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (t[mid].start <= e)
        lo = mid;
      else
        hi = mid - 1;
    }
    const AdamTensor p = t[lo];
    adam_elem(p.w, p.g, (int)p.gdt, p.m, p.v, e - p.start, lr, beta1, beta2, eps, corr1, corr2, gscale, l2);
  }
}

// flag[0] = 1 if any element is infinite or NaN (every writer writes 1).
__global__ void nn_nonfinite(const void* x, int xdt, i64 n, float* flag) {
  fg_await_prior_grid();
  for (i64 i = gtid(); i < n; i += gstride()) {
    if (!isfinite(ld(x, xdt, i))) flag[0] = 1.f;
  }
}

// dst[i] = the column of the largest element of row i (first on ties).
__global__ void nn_argmax_rows(const void* x, int xdt, i64 rows, i64 k, int* dst) {
  fg_await_prior_grid();
  for (i64 i = gtid(); i < rows; i += gstride()) {
    int best = 0;
    float bv = k > 0 ? ld(x, xdt, i * k) : 0.f;
    for (i64 j = 1; j < k; ++j) {
      const float v = ld(x, xdt, i * k + j);
      if (v > bv) {
        bv = v;
        best = (int)j;
      }
    }
    dst[i] = best;
  }
}

}  // extern "C"
