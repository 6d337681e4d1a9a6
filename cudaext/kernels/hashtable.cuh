// Shared device code of the spatial kernels (hash.cu, kmap.cu, masks.cu,
// sort.cu, serialize.cu, voxelize.cu, pool.cu, gridsample.cu): grid-stride
// helpers, element conversions, exact site keys, and the GPU hash table for
// packed (batch, x, y, z) keys.
//
// # Hash table
//
// Open addressing with linear probing over a power-of-two slot array. Two
// layouts, chosen by the host from the key range:
//
//   narrow  one 64-bit word per slot, key << 32 | uint32(value); keys are
//           at most 2^32 − 2 (the all-ones word marks an empty slot), so
//           key and value are written by one atomicCAS;
//   wide    two 64-bit words per slot, (key, value); keys are at most
//           2^64 − 2. The key is claimed by atomicCAS, the value is set by
//           atomicMin on its low 32 bits (initially all ones).
//
// Values are row indices (≥ 0). Inserting a key that is present keeps the
// smaller value (atomicMin), so the table content does not depend on thread
// scheduling, and duplicate rows are reported exactly (the smallest row of
// each key wins; see hash.cu). Every probe sequence is bounded: an insert
// that finds no free slot within `limit` probes gives up and reports
// kInsertFull, which the kernels turn into a status flag the host reads
// back (never a hang). The home slot groups 2^kGroupBits consecutive keys
// (consecutive z of one (b, x, y) column) into consecutive slots, so the
// 3 z-neighbours of a lookup usually share a 32-byte sector.
//
// All status words live in one small int array (see Status).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace fgx {

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;

__device__ __forceinline__ i64 gtid() { return (i64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ i64 gstride() { return (i64)gridDim.x * blockDim.x; }

// Element conversions (float32 arithmetic for every storage type).
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Extent of a batched grid; keys are b·X·Y·Z + x·Y·Z + y·Z + z.
struct Ext {
  i64 B, X, Y, Z;
  __device__ __forceinline__ bool contains(i64 b, i64 x, i64 y, i64 z) const {
    return b >= 0 && b < B && x >= 0 && x < X && y >= 0 && y < Y && z >= 0 && z < Z;
  }
  __device__ __forceinline__ u64 key(i64 b, i64 x, i64 y, i64 z) const {
    return (((u64)b * (u64)X + (u64)x) * (u64)Y + (u64)y) * (u64)Z + (u64)z;
  }
  __device__ __forceinline__ void unkey(u64 k, int* c) const {
    c[3] = (int)(k % (u64)Z);
    k /= (u64)Z;
    c[2] = (int)(k % (u64)Y);
    k /= (u64)Y;
    c[1] = (int)(k % (u64)X);
    c[0] = (int)(k / (u64)X);
  }
};

// Status words shared by the host and the kernels (int32 indices).
enum Status {
  kFlags = 0,     // bit mask of the kFlag* values
  kMaxProbe = 1,  // largest probe distance of a stored key (atomicMax)
  kBadRow = 2,    // first row outside the extent (atomicMin; INT_MAX if none)
  kCount = 3,     // free for kernels (a count)
  kDupLo = 4,     // u64 (r << 32 | q) of the smallest duplicate row r, q = the
  kDupHi = 5,     //   smallest row with the same key (atomicMin; all ones if none)
  kAux = 6,       // free for kernels (e.g. first non-finite point)
  kStatusWords = 8
};
enum Flag { kFlagFull = 1, kFlagDup = 2, kFlagRange = 4, kFlagAux = 8 };

constexpr u64 kEmpty = ~0ull;
constexpr int kGroupBits = 2;

// Murmur3 64-bit finaliser.
__device__ __forceinline__ u64 mix64(u64 k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

// Table is a view of a device hash table (passed to kernels as fields).
struct Table {
  u64* slots;  // narrow: [1 << lg]; wide: [2 << lg]
  int lg;      // log2 of the slot count, ≥ kGroupBits + 1
  int wide;    // 0: narrow layout, 1: wide layout
  int limit;   // probes an insert may make before giving up
  int probe;   // probes a lookup needs: max stored distance + 1

  __device__ __forceinline__ u64 mask() const { return (1ull << lg) - 1; }
  __device__ __forceinline__ u64 home(u64 key) const {
    const u64 low = key & ((1ull << kGroupBits) - 1);
    return ((mix64(key >> kGroupBits) >> (64 - (lg - kGroupBits))) << kGroupBits) | low;
  }
};

enum InsertResult { kInserted = 0, kPresent = 1, kInsertFull = 2 };

// insert stores key → val (val ≥ 0). A present key keeps the smaller value.
// *dist receives the probe distance of the key's slot.
__device__ __forceinline__ int table_insert(const Table& t, u64 key, int val, int* dist) {
  u64 s = t.home(key);
  const u64 m = t.mask();
  if (!t.wide) {
    const u64 packed = (key << 32) | (u32)val;
    for (int p = 0; p < t.limit; ++p) {
      u64 cur = t.slots[s];
      if (cur == kEmpty) {
        const u64 prev = atomicCAS(t.slots + s, kEmpty, packed);
        if (prev == kEmpty) {
          *dist = p;
          return kInserted;
        }
        cur = prev;
      }
      if ((cur >> 32) == key) {
        atomicMin(t.slots + s, packed);
        *dist = p;
        return kPresent;
      }
      s = (s + 1) & m;
    }
    return kInsertFull;
  }
  for (int p = 0; p < t.limit; ++p) {
    u64* slot = t.slots + 2 * s;
    u64 cur = *(volatile u64*)slot;
    bool fresh = false;
    if (cur == kEmpty) {
      const u64 prev = atomicCAS(slot, kEmpty, key);
      fresh = prev == kEmpty;
      cur = fresh ? key : prev;
    }
    if (cur == key) {
      atomicMin((u32*)(slot + 1), (u32)val);
      *dist = p;
      return fresh ? kInserted : kPresent;
    }
    s = (s + 1) & m;
  }
  return kInsertFull;
}

// lookup returns the value stored under key, or −1.
__device__ __forceinline__ int table_find(const Table& t, u64 key) {
  u64 s = t.home(key);
  const u64 m = t.mask();
  if (!t.wide) {
    for (int p = 0; p < t.probe; ++p) {
      const u64 cur = t.slots[s];
      if ((cur >> 32) == key) return (int)(u32)cur;
      if (cur == kEmpty) return -1;
      s = (s + 1) & m;
    }
    return -1;
  }
  for (int p = 0; p < t.probe; ++p) {
    const u64 cur = t.slots[2 * s];
    if (cur == key) return (int)(u32)t.slots[2 * s + 1];
    if (cur == kEmpty) return -1;
    s = (s + 1) & m;
  }
  return -1;
}

// table_slot is table_find for a narrow table that returns the index of
// the key's slot instead of its value (−1 if absent), for kernels that
// rewrite a stored value in place (kmap_brick_number).
__device__ __forceinline__ i64 table_slot(const Table& t, u64 key) {
  u64 s = t.home(key);
  const u64 m = t.mask();
  for (int p = 0; p < t.probe; ++p) {
    const u64 cur = t.slots[s];
    if ((cur >> 32) == key) return (i64)s;
    if (cur == kEmpty) return -1;
    s = (s + 1) & m;
  }
  return -1;
}

// Acc accumulates a thread's insert outcomes; block_flush merges them into
// the status words with one atomic per block (hot single-address atomics
// per thread would serialise millions of inserts).
struct Acc {
  int flags = 0;
  int maxd = 0;
  __device__ __forceinline__ void note(int res, int dist) {
    if (res == kInsertFull) {
      flags |= kFlagFull;
      return;
    }
    if (res == kPresent) flags |= kFlagDup;
    maxd = max(maxd, dist);
  }
};

// block_flush must be reached by every thread of the block.
__device__ __forceinline__ void block_flush(int* status, const Acc& a) {
  __shared__ int sflags, smax;
  if (threadIdx.x == 0) {
    sflags = 0;
    smax = 0;
  }
  __syncthreads();
  const int f = __reduce_or_sync(0xffffffffu, (unsigned)a.flags);
  const int d = __reduce_max_sync(0xffffffffu, (unsigned)a.maxd);
  if ((threadIdx.x & 31) == 0) {
    if (f) atomicOr(&sflags, f);
    atomicMax(&smax, d);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (sflags) atomicOr(status + kFlags, sflags);
    atomicMax(status + kMaxProbe, smax);
  }
}

}  // namespace fgx
