// Voxelisation on the GPU (host side: cudaext/voxelize.go), with the
// semantics of sparse.Voxelize: point p of batch b falls in voxel
// ⌊(p − origin)/size⌋ per axis (float64 arithmetic, as on the host); the
// voxels are the distinct sites sorted by (b, x, y, z); features are the
// float64 mean of each voxel's points in point order.
//
//   vox_check    validates every point: the first bad one (non-finite,
//                negative batch, or outside the grid unless dropped) goes to
//                status[kBadRow]; the largest kept (b, x, y, z) to hi[4]
//   vox_keys     exact key of every point's voxel, sentinel for dropped ones
//   vox_assign   after the stable sort of (key, point): voxel index of every
//                point, run starts, voxel coordinates
//   vox_counts   counts[v] = starts[v+1] − starts[v]
//   vox_mean_*   out[v, c] = mean of feats[point, c] over the voxel's points
#include "hashtable.cuh"
#include "pdl.cuh"

namespace fgv {

using namespace fgx;

// Opts mirrors cudaext.voxOpts.
struct Opts {
  double size[3], origin[3];
  Ext ext;    // the grid (given), or the derived one in vox_keys
  int given;  // 1 when ext was given by the caller
  int drop;   // 1: drop points outside the grid
};

enum VoxStatus { kOK = 0, kBad = 1, kDropped = 2 };

// voxel computes the voxel of point i; it returns kBad for an error,
// kDropped for a dropped point.
__device__ __forceinline__ int voxel(const float* pts, const int* batch, i64 i, const Opts& o, const Ext& ext,
                                     bool given, int* v) {
  v[0] = batch ? batch[i] : 0;
  if (v[0] < 0) return kBad;
  bool inside = true;
  for (int a = 0; a < 3; ++a) {
    const double x = (double)pts[3 * i + a];
    if (isnan(x) || isinf(x)) return kBad;
    const double f = floor(__ddiv_rn(__dsub_rn(x, o.origin[a]), o.size[a]));
    if (f < 0 || f > 2147483647.0)
      inside = false;
    else
      v[a + 1] = (int)f;
  }
  if (inside && given) inside = ext.contains(v[0], v[1], v[2], v[3]);
  if (!inside) return o.drop ? kDropped : kBad;
  return kOK;
}

__device__ void check(const float* pts, const int* batch, i64 n, Opts o, int* status, int* hi) {
  int mx[4] = {-1, -1, -1, -1};
  for (i64 i = gtid(); i < n; i += gstride()) {
    int v[4];
    const int s = voxel(pts, batch, i, o, o.ext, o.given != 0, v);
    if (s == kBad) {
      atomicOr(status + kFlags, kFlagRange);
      atomicMin(status + kBadRow, (int)i);
    } else if (s == kOK) {
      for (int a = 0; a < 4; ++a) mx[a] = max(mx[a], v[a]);
    }
  }
  // One atomic per warp and axis.
  for (int a = 0; a < 4; ++a) {
    const int m = __reduce_max_sync(0xffffffffu, mx[a]);
    if ((threadIdx.x & 31) == 0 && m >= 0) atomicMax(hi + a, m);
  }
}

__device__ void keys(const float* pts, const int* batch, i64 n, Opts o, u64 sentinel, u64* out) {
  for (i64 i = gtid(); i < n; i += gstride()) {
    int v[4];
    const int s = voxel(pts, batch, i, o, o.ext, o.given != 0, v);
    out[i] = s == kOK ? o.ext.key(v[0], v[1], v[2], v[3]) : sentinel;
  }
}

// pos is the exclusive scan of the run-start flags of the sorted keys.
__device__ void assign(const u64* skeys, const int* order, const int* pos, i64 n, u64 sentinel, Ext ext,
                       int* index, int* starts, int* coords) {
  for (i64 j = gtid(); j < n; j += gstride()) {
    const u64 k = skeys[j];
    if (k == sentinel) continue;
    const bool first = j == 0 || skeys[j - 1] != k;
    const int v = pos[j] + (first ? 1 : 0) - 1;
    index[order[j]] = v;
    if (first) {
      starts[v] = (int)j;
      int c[4];
      ext.unkey(k, c);
      reinterpret_cast<int4*>(coords)[v] = make_int4(c[0], c[1], c[2], c[3]);
    }
    if (j == n - 1 || skeys[j + 1] == sentinel) starts[v + 1] = (int)(j + 1);
  }
}

__device__ void counts(const int* starts, i64 m, int* out) {
  for (i64 v = gtid(); v < m; v += gstride()) out[v] = starts[v + 1] - starts[v];
}

template <class T> __device__ void mean(const T* feats, i64 c_n, const int* order, const int* starts, i64 m, T* out) {
  const i64 total = m * c_n;
  for (i64 e = gtid(); e < total; e += gstride()) {
    const i64 v = e / c_n, c = e - v * c_n;
    const int j0 = starts[v], j1 = starts[v + 1];
    double acc = 0;
    for (int j = j0; j < j1; ++j) acc = __dadd_rn(acc, (double)to_f32(feats[(i64)order[j] * c_n + c]));
    out[e] = from_f32<T>(__double2float_rn(__ddiv_rn(acc, (double)(j1 - j0))));
  }
}

}  // namespace fgv

extern "C" {

__global__ void vox_check(const float* pts, const int* batch, long long n, fgv::Opts o, int* status, int* hi) {
  fg_await_prior_grid();
  fgv::check(pts, batch, n, o, status, hi);
}
__global__ void vox_keys(const float* pts, const int* batch, long long n, fgv::Opts o, unsigned long long sentinel,
                         unsigned long long* out) {
  fg_await_prior_grid();
  fgv::keys(pts, batch, n, o, sentinel, out);
}
__global__ void vox_assign(const unsigned long long* skeys, const int* order, const int* pos, long long n,
                           unsigned long long sentinel, fgx::Ext ext, int* index, int* starts, int* coords) {
  fg_await_prior_grid();
  fgv::assign(skeys, order, pos, n, sentinel, ext, index, starts, coords);
}
__global__ void vox_counts(const int* starts, long long m, int* out) {
  fg_await_prior_grid();
  fgv::counts(starts, m, out);
}
__global__ void vox_mean_f32(const float* feats, long long c, const int* order, const int* starts, long long m,
                             float* out) {
  fg_await_prior_grid();
  fgv::mean(feats, c, order, starts, m, out);
}
__global__ void vox_mean_f16(const __half* feats, long long c, const int* order, const int* starts, long long m,
                             __half* out) {
  fg_await_prior_grid();
  fgv::mean(feats, c, order, starts, m, out);
}
__global__ void vox_mean_bf16(const __nv_bfloat16* feats, long long c, const int* order, const int* starts,
                              long long m, __nv_bfloat16* out) {
  fg_await_prior_grid();
  fgv::mean(feats, c, order, starts, m, out);
}

}  // extern "C"
