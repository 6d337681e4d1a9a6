// Grid sampling of sparse voxel features on the GPU (host side:
// cudaext/gridsample.go), with the semantics of sparse/cpu/gridsample.go.
//
// A plan holds, for M query points, K corner rows idx [M, K] (−1 absent)
// and final weights w [M, K] (float64):
//
//   nearest    voxel trunc(q), weight 1 if present (K = 1)
//   trilinear  corners floor(q − 0.5) + {0,1}³, w_c = Π(1 − |q − c − 0.5|),
//              renormalised by max(Σ w_c, 1e-12) over present corners (K = 8)
//
// Plans are computed in float64 with explicitly rounded operations (no
// contraction into FMA), so they equal the host plan bit for bit.
//
//   gs_check_*       the first non-finite point coordinate goes to
//                    status[kAux] (flat index into [M, 3])
//   gs_plan_*        idx and w of every query (hash lookups)
//   gs_fwd_*         out[m, c] = Σ_k float(w[m,k]) · feats[idx[m,k], c]
//   gs_rev_keys      sort keys of the reverse CSR: idx, or N for absent
//   gs_rev_seg       seg[r] = first sorted entry of row r (seg[N] = count)
//   gs_feat_grad_*   dF[r, c] = Σ float(w[j]) · dy[j / K, c] over the entries
//                    j of row r in ascending order (stable sort): no atomics
//   gs_point_grad_*  dPoints of the trilinear blend (float64 dot products
//                    and derivatives, as on the host)
#include "hashtable.cuh"
#include "pdl.cuh"

namespace fgg {

using namespace fgx;

constexpr double kFloor = 1e-12;

struct Cell {
  i64 base[3];
  double t[3];
  bool far;

  // free_setup is setup without bounds: the point gradient relies on the
  // plan's corner rows, which are all absent for a far query (so its
  // gradient is 0 either way).
  __device__ __forceinline__ void free_setup(const double* q) {
    far = false;
    for (int a = 0; a < 3; ++a) {
      const double f = floor(__dsub_rn(q[a], 0.5));
      base[a] = 0;
      t[a] = __dsub_rn(__dsub_rn(q[a], 0.5), f);
    }
  }
  __device__ __forceinline__ void setup(const double* q, const Ext& ext) {
    const i64 dims[3] = {ext.X, ext.Y, ext.Z};
    far = false;
    for (int a = 0; a < 3; ++a) {
      const double f = floor(__dsub_rn(q[a], 0.5));
      if (f < -1 || f > (double)(dims[a] - 1)) {
        far = true;
        return;
      }
      base[a] = (i64)f;
      t[a] = __dsub_rn(__dsub_rn(q[a], 0.5), f);
    }
  }
  static __device__ __forceinline__ int bit(int k, int a) { return (k >> (2 - a)) & 1; }
  __device__ __forceinline__ bool corner(int k, const Ext& ext, i64* v) const {
    if (far) return false;
    const i64 dims[3] = {ext.X, ext.Y, ext.Z};
    for (int a = 0; a < 3; ++a) {
      v[a] = base[a] + bit(k, a);
      if (v[a] < 0 || v[a] >= dims[a]) return false;
    }
    return true;
  }
  __device__ __forceinline__ double factor(int k, int a) const { return bit(k, a) ? t[a] : __dsub_rn(1.0, t[a]); }
  __device__ __forceinline__ double weight(int k) const {
    return __dmul_rn(__dmul_rn(factor(k, 0), factor(k, 1)), factor(k, 2));
  }
  __device__ __forceinline__ double dweight(int k, int a) const {
    const double d = __dmul_rn(factor(k, (a + 1) % 3), factor(k, (a + 2) % 3));
    return bit(k, a) ? d : -d;
  }
};

template <class P> __device__ __forceinline__ void point(const P* pts, i64 m, double* q) {
  q[0] = (double)pts[3 * m];
  q[1] = (double)pts[3 * m + 1];
  q[2] = (double)pts[3 * m + 2];
}

template <class P> __device__ void check_points(const P* pts, i64 n, int* status) {
  for (i64 j = gtid(); j < n; j += gstride()) {
    const double x = (double)pts[j];
    if (isnan(x) || isinf(x)) {
      atomicOr(status + kFlags, kFlagAux);
      atomicMin(status + kAux, (int)j);
    }
  }
}

template <class P>
__device__ void plan_nearest(const P* pts, i64 M, i64 per_batch, Ext ext, Table t, int* idx, double* w) {
  const i64 dims[3] = {ext.X, ext.Y, ext.Z};
  for (i64 m = gtid(); m < M; m += gstride()) {
    double q[3];
    point(pts, m, q);
    int r = -1;
    bool in = true;
    i64 v[3];
    for (int a = 0; a < 3; ++a) {
      if (!(q[a] > -1 && q[a] < (double)dims[a])) {
        in = false;
        break;
      }
      v[a] = (i64)q[a];
    }
    if (in) r = table_find(t, ext.key(m / per_batch, v[0], v[1], v[2]));
    idx[m] = r;
    w[m] = r >= 0 ? 1.0 : 0.0;
  }
}

template <class P>
__device__ void plan_trilinear(const P* pts, i64 M, i64 per_batch, Ext ext, Table t, int* idx, double* w) {
  for (i64 m = gtid(); m < M; m += gstride()) {
    double q[3];
    point(pts, m, q);
    Cell cell;
    cell.setup(q, ext);
    const i64 b = m / per_batch;
    int r[8];
    double wk[8];
    double sum = 0;
    for (int k = 0; k < 8; ++k) {
      r[k] = -1;
      wk[k] = 0;
      i64 v[3];
      if (!cell.corner(k, ext, v)) continue;
      const int found = table_find(t, ext.key(b, v[0], v[1], v[2]));
      if (found >= 0) {
        r[k] = found;
        wk[k] = cell.weight(k);
        sum = __dadd_rn(sum, wk[k]);
      }
    }
    const double inv = __ddiv_rn(1.0, fmax(sum, kFloor));
    for (int k = 0; k < 8; ++k) {
      idx[8 * m + k] = r[k];
      w[8 * m + k] = __dmul_rn(wk[k], inv);
    }
  }
}

template <class T>
__device__ void fwd(const T* feats, i64 C, const int* idx, const double* w, i64 M, int K, T* out) {
  const i64 total = M * C;
  for (i64 e = gtid(); e < total; e += gstride()) {
    const i64 m = e / C, c = e - m * C;
    float s = 0.f;
    for (int k = 0; k < K; ++k) {
      const int r = idx[m * K + k];
      if (r < 0) continue;
      s = __fadd_rn(s, __fmul_rn((float)w[m * K + k], to_f32(feats[(i64)r * C + c])));
    }
    out[e] = from_f32<T>(s);
  }
}

__device__ void rev_keys(const int* idx, i64 n, u32 N, u32* keys) {
  for (i64 j = gtid(); j < n; j += gstride()) {
    const int r = idx[j];
    keys[j] = r >= 0 ? (u32)r : N;
  }
}

// seg[r] = number of sorted keys < r, for r ≤ N.
__device__ void rev_seg(const u32* keys, i64 n, u32 N, int* seg) {
  if (n == 0) {
    for (i64 r = gtid(); r <= N; r += gstride()) seg[r] = 0;
    return;
  }
  for (i64 j = gtid(); j <= n; j += gstride()) {
    const i64 lo = j == 0 ? -1 : (i64)keys[j - 1];
    const i64 hi = j == n ? (i64)N : (i64)keys[j];
    for (i64 r = lo + 1; r <= hi; ++r) seg[r] = (int)j;
  }
}

template <class T>
__device__ void feat_grad(const T* dy, i64 C, const int* seg, const int* ent, const double* w, int K, i64 N, T* df) {
  const i64 total = N * C;
  for (i64 e = gtid(); e < total; e += gstride()) {
    const i64 r = e / C, c = e - r * C;
    float s = 0.f;
    for (int p = seg[r]; p < seg[r + 1]; ++p) {
      const int j = ent[p];
      s = __fadd_rn(s, __fmul_rn((float)w[j], to_f32(dy[(i64)(j / K) * C + c])));
    }
    df[e] = from_f32<T>(s);
  }
}

// dot is sparse/cpu's sampleDot: four float64 partial sums.
template <class T> __device__ __forceinline__ double dot(const T* x, const T* y, i64 n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  i64 j = 0;
  for (; j + 4 <= n; j += 4) {
    s0 = __dadd_rn(s0, __dmul_rn((double)to_f32(x[j]), (double)to_f32(y[j])));
    s1 = __dadd_rn(s1, __dmul_rn((double)to_f32(x[j + 1]), (double)to_f32(y[j + 1])));
    s2 = __dadd_rn(s2, __dmul_rn((double)to_f32(x[j + 2]), (double)to_f32(y[j + 2])));
    s3 = __dadd_rn(s3, __dmul_rn((double)to_f32(x[j + 3]), (double)to_f32(y[j + 3])));
  }
  for (; j < n; ++j) s0 = __dadd_rn(s0, __dmul_rn((double)to_f32(x[j]), (double)to_f32(y[j])));
  return __dadd_rn(__dadd_rn(s0, s1), __dadd_rn(s2, s3));
}

template <class P, class T>
__device__ void point_grad(const P* pts, const T* feats, const T* dy, i64 C, const int* idx, const double* w, i64 M,
                           float* dp) {
  for (i64 m = gtid(); m < M; m += gstride()) {
    double dq[3] = {0, 0, 0};
    double q[3];
    point(pts, m, q);
    Cell cell;
    cell.free_setup(q);
    {
      double g[8];
      double sum = 0, dy_out = 0;
      const T* dym = dy + m * C;
      for (int k = 0; k < 8; ++k) {
        const int r = idx[8 * m + k];
        g[k] = 0;
        if (r < 0) continue;
        const double s = dot(dym, feats + (i64)r * C, C);
        g[k] = s;
        sum = __dadd_rn(sum, cell.weight(k));
        dy_out = __dadd_rn(dy_out, __dmul_rn(w[8 * m + k], s));
      }
      if (sum > kFloor) {
        for (int k = 0; k < 8; ++k) {
          if (idx[8 * m + k] < 0) continue;
          const double e = __ddiv_rn(__dsub_rn(g[k], dy_out), sum);
          for (int a = 0; a < 3; ++a) dq[a] = __dadd_rn(dq[a], __dmul_rn(cell.dweight(k, a), e));
        }
      }
    }
    for (int a = 0; a < 3; ++a) dp[3 * m + a] = __double2float_rn(dq[a]);
  }
}

}  // namespace fgg

#define FG_GS_PLAN(SUF, P)                                                                                    \
  __global__ void gs_check_##SUF(const P* pts, long long n, int* status) {                                   \
    fg_await_prior_grid();                                                                                    \
    fgg::check_points(pts, n, status);                                                                        \
  }                                                                                                           \
  __global__ void gs_plan_nearest_##SUF(const P* pts, long long M, long long per_batch, fgx::Ext ext,         \
                                        fgx::Table t, int* idx, double* w) {                                  \
    fg_await_prior_grid();                                                                                    \
    fgg::plan_nearest(pts, M, per_batch, ext, t, idx, w);                                                     \
  }                                                                                                           \
  __global__ void gs_plan_trilinear_##SUF(const P* pts, long long M, long long per_batch, fgx::Ext ext,       \
                                          fgx::Table t, int* idx, double* w) {                                \
    fg_await_prior_grid();                                                                                    \
    fgg::plan_trilinear(pts, M, per_batch, ext, t, idx, w);                                                   \
  }

#define FG_GS_FEAT(SUF, T)                                                                                    \
  __global__ void gs_fwd_##SUF(const T* feats, long long C, const int* idx, const double* w, long long M,      \
                               int K, T* out) {                                                               \
    fg_await_prior_grid();                                                                                    \
    fgg::fwd(feats, C, idx, w, M, K, out);                                                                    \
  }                                                                                                           \
  __global__ void gs_feat_grad_##SUF(const T* dy, long long C, const int* seg, const int* ent, const double* w, \
                                     int K, long long N, T* df) {                                             \
    fg_await_prior_grid();                                                                                    \
    fgg::feat_grad(dy, C, seg, ent, w, K, N, df);                                                             \
  }

#define FG_GS_PGRAD(PS, P, TS, T)                                                                             \
  __global__ void gs_point_grad_##PS##_##TS(const P* pts, const T* feats, const T* dy, long long C,           \
                                            const int* idx, const double* w, long long M, float* dp) {        \
    fg_await_prior_grid();                                                                                    \
    fgg::point_grad(pts, feats, dy, C, idx, w, M, dp);                                                        \
  }

extern "C" {

FG_GS_PLAN(f32, float)
FG_GS_PLAN(f64, double)
FG_GS_FEAT(f32, float)
FG_GS_FEAT(f16, __half)
FG_GS_FEAT(bf16, __nv_bfloat16)
FG_GS_PGRAD(f32, float, f32, float)
FG_GS_PGRAD(f32, float, f16, __half)
FG_GS_PGRAD(f32, float, bf16, __nv_bfloat16)
FG_GS_PGRAD(f64, double, f32, float)
FG_GS_PGRAD(f64, double, f16, __half)
FG_GS_PGRAD(f64, double, bf16, __nv_bfloat16)

__global__ void gs_rev_keys(const int* idx, long long n, unsigned N, unsigned* keys) {
  fg_await_prior_grid();
  fgg::rev_keys(idx, n, N, keys);
}
__global__ void gs_rev_seg(const unsigned* keys, long long n, unsigned N, int* seg) {
  fg_await_prior_grid();
  fgg::rev_seg(keys, n, N, seg);
}

}  // extern "C"
