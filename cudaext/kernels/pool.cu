// Sparse max/avg pooling over a kernel map and their gradients (host side:
// cudaext/pool.go), with the semantics of sparse/cpu/pool.go:
//
//   max   y[o,c] = max over present taps in tap order; ties keep the lowest
//         tap; the first NaN wins; argmax = that input row; no neighbour:
//         y = 0, argmax = −1
//   avg   y[o,c] = (Σ_v x[i,c]) / n_o summed in tap order (no division for
//         n_o ≤ 1)
//   grad  output-stationary over the reverse table, summed in tap order by
//         one thread per (i, c): deterministic, no atomics.
//
// Arithmetic is float32 for every storage type (float32, half, bfloat16);
// each thread handles one (row, channel) so that a warp reads consecutive
// channels.
#include "hashtable.cuh"
#include "pdl.cuh"

namespace fgp {

using namespace fgx;

template <class T>
__device__ void max_fwd(const T* x, const int* nbr, i64 n_out, int V, i64 C, T* y, int* argmax) {
  const i64 total = n_out * C;
  for (i64 e = gtid(); e < total; e += gstride()) {
    const i64 o = e / C, c = e - o * C;
    int a = -1;
    float best = 0.f;
    for (int v = 0; v < V; ++v) {
      const int i = nbr[o * V + v];
      if (i < 0) continue;
      const float val = to_f32(x[(i64)i * C + c]);
      if (a < 0 || (best == best && (val > best || val != val))) {
        best = val;
        a = i;
      }
    }
    y[e] = from_f32<T>(a < 0 ? 0.f : best);
    argmax[e] = a;
  }
}

template <class T> __device__ void avg_fwd(const T* x, const int* nbr, i64 n_out, int V, i64 C, T* y) {
  const i64 total = n_out * C;
  for (i64 e = gtid(); e < total; e += gstride()) {
    const i64 o = e / C, c = e - o * C;
    float s = 0.f;
    int n = 0;
    for (int v = 0; v < V; ++v) {
      const int i = nbr[o * V + v];
      if (i < 0) continue;
      ++n;
      s = __fadd_rn(s, to_f32(x[(i64)i * C + c]));
    }
    if (n > 1) s = __fdiv_rn(s, (float)n);
    y[e] = from_f32<T>(s);
  }
}

__device__ void counts(const int* nbr, i64 n_out, int V, int* cnt) {
  for (i64 o = gtid(); o < n_out; o += gstride()) {
    int n = 0;
    for (int v = 0; v < V; ++v) n += nbr[o * V + v] >= 0;
    cnt[o] = n;
  }
}

template <class T>
__device__ void max_grad(const T* dy, const int* argmax, const int* rev, i64 n_in, int V, i64 C, T* dx) {
  const i64 total = n_in * C;
  for (i64 e = gtid(); e < total; e += gstride()) {
    const i64 i = e / C, c = e - i * C;
    float s = 0.f;
    for (int v = 0; v < V; ++v) {
      const int o = rev[i * V + v];
      if (o < 0) continue;
      if (argmax[(i64)o * C + c] == (int)i) s = __fadd_rn(s, to_f32(dy[(i64)o * C + c]));
    }
    dx[e] = from_f32<T>(s);
  }
}

template <class T>
__device__ void avg_grad(const T* dy, const int* cnt, const int* rev, i64 n_in, int V, i64 C, T* dx) {
  const i64 total = n_in * C;
  for (i64 e = gtid(); e < total; e += gstride()) {
    const i64 i = e / C, c = e - i * C;
    float s = 0.f;
    for (int v = 0; v < V; ++v) {
      const int o = rev[i * V + v];
      if (o < 0) continue;
      s = __fadd_rn(s, __fdiv_rn(to_f32(dy[(i64)o * C + c]), (float)cnt[o]));
    }
    dx[e] = from_f32<T>(s);
  }
}

}  // namespace fgp

#define FG_POOL(SUF, T)                                                                                       \
  __global__ void pool_max_##SUF(const T* x, const int* nbr, long long n_out, int V, long long C, T* y,      \
                                 int* argmax) {                                                              \
    fg_await_prior_grid();                                                                                   \
    fgp::max_fwd(x, nbr, n_out, V, C, y, argmax);                                                            \
  }                                                                                                          \
  __global__ void pool_avg_##SUF(const T* x, const int* nbr, long long n_out, int V, long long C, T* y) {     \
    fg_await_prior_grid();                                                                                   \
    fgp::avg_fwd(x, nbr, n_out, V, C, y);                                                                    \
  }                                                                                                          \
  __global__ void pool_max_grad_##SUF(const T* dy, const int* argmax, const int* rev, long long n_in, int V, \
                                      long long C, T* dx) {                                                  \
    fg_await_prior_grid();                                                                                   \
    fgp::max_grad(dy, argmax, rev, n_in, V, C, dx);                                                          \
  }                                                                                                          \
  __global__ void pool_avg_grad_##SUF(const T* dy, const int* cnt, const int* rev, long long n_in, int V,    \
                                      long long C, T* dx) {                                                  \
    fg_await_prior_grid();                                                                                   \
    fgp::avg_grad(dy, cnt, rev, n_in, V, C, dx);                                                             \
  }

extern "C" {

FG_POOL(f32, float)
FG_POOL(f16, __half)
FG_POOL(bf16, __nv_bfloat16)

__global__ void pool_counts(const int* nbr, long long n_out, int V, int* cnt) {
  fg_await_prior_grid();
  fgp::counts(nbr, n_out, V, cnt);
}

}  // extern "C"
