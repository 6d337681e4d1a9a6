// GPU hash table of voxel coordinates (layout and probing in
// hashtable.cuh; host side in cudaext/hash.go).
//
//   hash_insert_coords  insert every row r of coords [n, 4] as key(row) → r;
//                       rows outside the extent are not inserted, the first
//                       one is recorded (kBadRow); a key seen twice sets
//                       kFlagDup; an insert that runs out of probes sets
//                       kFlagFull. One status flush per block.
//   hash_find_dups      after a build that saw duplicates: the smallest row
//                       r whose key is stored with a smaller row q, packed
//                       r << 32 | q into kDupLo/kDupHi by atomicMin.
//   hash_lookup_coords  out[i] = row of queries[i], −1 if absent or outside.
#include "hashtable.cuh"
#include "pdl.cuh"

namespace fgh {

using namespace fgx;

__device__ __forceinline__ bool load_site(const int* coords, i64 r, const Ext& ext, u64* key) {
  const int4 c = reinterpret_cast<const int4*>(coords)[r];
  if (!ext.contains(c.x, c.y, c.z, c.w)) return false;
  *key = ext.key(c.x, c.y, c.z, c.w);
  return true;
}

__device__ void insert_coords(const int* coords, i64 n, Ext ext, Table t, int* status) {
  Acc acc;
  for (i64 r = gtid(); r < n; r += gstride()) {
    u64 key;
    if (!load_site(coords, r, ext, &key)) {
      acc.flags |= kFlagRange;
      atomicMin(status + kBadRow, (int)r);
      continue;
    }
    int dist = 0;
    acc.note(table_insert(t, key, (int)r, &dist), dist);
  }
  block_flush(status, acc);
}

__device__ void find_dups(const int* coords, i64 n, Ext ext, Table t, int* status) {
  for (i64 r = gtid(); r < n; r += gstride()) {
    u64 key;
    if (!load_site(coords, r, ext, &key)) continue;
    const int q = table_find(t, key);
    if (q >= 0 && q != (int)r) atomicMin((u64*)(status + kDupLo), ((u64)r << 32) | (u32)q);
  }
}

__device__ void lookup_coords(const int* queries, i64 n, Ext ext, Table t, int* out) {
  for (i64 i = gtid(); i < n; i += gstride()) {
    u64 key;
    out[i] = load_site(queries, i, ext, &key) ? table_find(t, key) : -1;
  }
}

}  // namespace fgh

extern "C" {

__global__ void __launch_bounds__(256)
    hash_insert_coords(const int* coords, long long n, fgx::Ext ext, fgx::Table t, int* status) {
  fg_await_prior_grid();
  fgh::insert_coords(coords, n, ext, t, status);
}

__global__ void hash_find_dups(const int* coords, long long n, fgx::Ext ext, fgx::Table t, int* status) {
  fg_await_prior_grid();
  fgh::find_dups(coords, n, ext, t, status);
}

__global__ void hash_lookup_coords(const int* queries, long long n, fgx::Ext ext, fgx::Table t, int* out) {
  fg_await_prior_grid();
  fgh::lookup_coords(queries, n, ext, t, out);
}

}  // extern "C"
