// Z-order and Hilbert codes with batch bits on the GPU, bit for bit those
// of package sparse/serialize (host side: cudaext/serialize.go):
//
//   code = b << (3·bits) | interleave(x', y', z')
//
// with bit i of x', y', z' at code bits 3i+2, 3i+1, 3i; (x', y', z') =
// (x, y, z) for z-order and Skilling's transposed Hilbert index for
// Hilbert. bits = bit length of max(X, Y, Z) − 1 (≤ 21).
//
//   ser_encode   codes[i] of coords row i; the first row outside the extent
//                goes to status[kBadRow]
//   ser_decode   coords of codes[i]; the first code that is no site of the
//                extent goes to status[kBadRow]
//   ser_check_rows  the first index of idx [n] outside [0, limit) goes to
//                status[kBadRow] (validates a permutation before a gather)
#include "hashtable.cuh"
#include "pdl.cuh"

namespace fgz {

using namespace fgx;

__device__ __forceinline__ u64 interleave(u32 x, u32 y, u32 z, int bits) {
  u64 c = 0;
  for (int i = 0; i < bits; ++i) {
    c |= (u64)((x >> i) & 1) << (3 * i + 2);
    c |= (u64)((y >> i) & 1) << (3 * i + 1);
    c |= (u64)((z >> i) & 1) << (3 * i);
  }
  return c;
}

__device__ __forceinline__ void deinterleave(u64 c, int bits, u32* p) {
  p[0] = p[1] = p[2] = 0;
  for (int i = 0; i < bits; ++i) {
    p[0] |= (u32)((c >> (3 * i + 2)) & 1) << i;
    p[1] |= (u32)((c >> (3 * i + 1)) & 1) << i;
    p[2] |= (u32)((c >> (3 * i)) & 1) << i;
  }
}

// Skilling (2004), AxesToTranspose, for n bits per axis.
__device__ __forceinline__ void axes_to_transpose(u32* p, int n) {
  if (n > 1) {
    for (u32 q = 1u << (n - 1); q > 1; q >>= 1) {
      const u32 low = q - 1;
      for (int i = 0; i < 3; ++i) {
        if (p[i] & q) {
          p[0] ^= low;
        } else {
          const u32 t = (p[0] ^ p[i]) & low;
          p[0] ^= t;
          p[i] ^= t;
        }
      }
    }
  }
  p[1] ^= p[0];
  p[2] ^= p[1];
  u32 t = 0;
  if (n > 1)
    for (u32 q = 1u << (n - 1); q > 1; q >>= 1)
      if (p[2] & q) t ^= q - 1;
  p[0] ^= t;
  p[1] ^= t;
  p[2] ^= t;
}

// Skilling (2004), TransposeToAxes.
__device__ __forceinline__ void transpose_to_axes(u32* p, int n) {
  const u32 t = p[2] >> 1;
  p[2] ^= p[1];
  p[1] ^= p[0];
  p[0] ^= t;
  if (n <= 1) return;
  for (u32 q = 2; q != (1u << n); q <<= 1) {
    const u32 low = q - 1;
    for (int i = 2; i >= 0; --i) {
      if (p[i] & q) {
        p[0] ^= low;
      } else {
        const u32 s = (p[0] ^ p[i]) & low;
        p[0] ^= s;
        p[i] ^= s;
      }
    }
  }
}

__device__ void encode(const int* coords, i64 n, Ext ext, int bits, int hilbert, u64* codes, int* status) {
  for (i64 r = gtid(); r < n; r += gstride()) {
    const int4 c = reinterpret_cast<const int4*>(coords)[r];
    if ((u32)c.x >= (u64)ext.B || (u32)c.y >= (u64)ext.X || (u32)c.z >= (u64)ext.Y || (u32)c.w >= (u64)ext.Z) {
      atomicOr(status + kFlags, kFlagRange);
      atomicMin(status + kBadRow, (int)r);
      continue;
    }
    u32 p[3] = {(u32)c.y, (u32)c.z, (u32)c.w};
    if (hilbert) axes_to_transpose(p, bits);
    codes[r] = interleave(p[0], p[1], p[2], bits) | ((u64)(u32)c.x << (3 * bits));
  }
}

__device__ void decode(const u64* codes, i64 n, Ext ext, int bits, int hilbert, int* coords, int* status) {
  const int shift = 3 * bits;
  const u64 low = shift == 64 ? ~0ull : (1ull << shift) - 1;
  for (i64 i = gtid(); i < n; i += gstride()) {
    const u64 code = codes[i];
    const u64 b = shift == 64 ? 0 : code >> shift;
    u32 p[3];
    deinterleave(code & low, bits, p);
    if (hilbert) transpose_to_axes(p, bits);
    if (b >= (u64)ext.B || p[0] >= (u64)ext.X || p[1] >= (u64)ext.Y || p[2] >= (u64)ext.Z) {
      atomicOr(status + kFlags, kFlagRange);
      atomicMin(status + kBadRow, (int)i);
      continue;
    }
    reinterpret_cast<int4*>(coords)[i] = make_int4((int)b, (int)p[0], (int)p[1], (int)p[2]);
  }
}

__device__ void check_rows(const int* idx, i64 n, i64 limit, int* status) {
  for (i64 i = gtid(); i < n; i += gstride()) {
    const int r = idx[i];
    if (r < 0 || r >= limit) {
      atomicOr(status + kFlags, kFlagRange);
      atomicMin(status + kBadRow, (int)i);
    }
  }
}

}  // namespace fgz

extern "C" {

__global__ void ser_encode(const int* coords, long long n, fgx::Ext ext, int bits, int hilbert,
                           unsigned long long* codes, int* status) {
  fg_await_prior_grid();
  fgz::encode(coords, n, ext, bits, hilbert, codes, status);
}
__global__ void ser_decode(const unsigned long long* codes, long long n, fgx::Ext ext, int bits, int hilbert,
                           int* coords, int* status) {
  fg_await_prior_grid();
  fgz::decode(codes, n, ext, bits, hilbert, coords, status);
}

__global__ void ser_check_rows(const int* idx, long long n, long long limit, int* status) {
  fg_await_prior_grid();
  fgz::check_rows(idx, n, limit, status);
}

}  // extern "C"
