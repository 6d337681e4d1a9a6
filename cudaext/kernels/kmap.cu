// Kernel-map construction on the GPU (host side: cudaext/kmapgpu.go). The
// tables equal those of package sparse/kmap entry for entry:
//
//   Nbr[o·V + v]  input row reaching output o through tap v, or −1
//   Rev[i·V + v]  output row that input i feeds through tap v, or −1
//   pairs         per tap v, (in, out) rows with out ascending
//
// Geometry per axis: fine = coarse·S − P + k·D, tap v = (kx·Ky + ky)·Kz + kz.
// Submanifold maps are "fine" maps with S = 1, P = ⌊K/2⌋·D.
//
//   kmap_nbr_sub       Nbr of submanifold maps from half the taps: one
//                      thread per (row o, tap h < c), c = (V−1)/2 the
//                      centre; it probes j = row at coords[o] + off(h) and
//                      writes Nbr[o, h] = j and, when j ≥ 0, the mirror
//                      entry Nbr[j, V−1−h] = o (off(V−1−h) = −off(h) for
//                      odd kernels); thread h = 0 writes Nbr[o, c] = o.
//                      Every entry has exactly one writer; the host fills
//                      the table with −1 first, so a mirror entry nobody
//                      writes stays −1.
//   kmap_nbr_fine      Nbr of strided maps (and submanifold maps of any
//                      shape): the input at out·S − P + k·D (one thread
//                      per (o, v), coalesced writes)
//   kmap_nbr_coarse    Nbr of transposed maps: the input i with
//                      i·S − P + k·D = out
//   kmap_cand_coarse   strided output candidates: key of (p + P − k·D)/S
//                      for every input p and tap, or the sentinel
//   kmap_cand_fine     transposed output candidates: key of p·S − P + k·D
//   kmap_decode        output keys → [M, 4] coordinates
//   kmap_rev_mirror    submanifold reverse: Rev[i, v] = Nbr[i, V−1−v]
//   kmap_rev_scatter   other reverse tables (each entry has one writer)
//   kmap_brick_insert  the 4×4×4 brick of every row into a brick table,
//                      numbered as first stored (block-aggregated atomicAdd
//                      on status[kCount]; value: the number with the top
//                      bit set), with the claiming row as the brick's
//                      first row; checks the rows (extent, duplicates
//                      through per-brick cell masks); given a pool, also
//                      kmap_brick_scatter's stores (one round per block)
//   kmap_brick_scatter pool[brick · 64 + cell] = row for the bricks the
//                      pool holds (read only at the cells that the brick's
//                      cell mask marks)
//   kmap_nbr_brick     Nbr of 3×3×3 submanifold maps with dilation 1: one
//                      warp per brick looks its 27 neighbour bricks and
//                      their cell masks up in the small brick table,
//                      gathers the 6×6×6 cells around it from the pool
//                      into shared memory and writes each of its rows' 27
//                      entries (no −1 fill, no mirror writes); it can also
//                      write each row's tap mask and Gray rank, and read
//                      the brick count from the device
//                      (masks_build's)
//   kmap_pairs_count   pair counts per (tap, chunk of 256 output rows) of
//                      the first taps taps (a submanifold map's lists hold
//                      the taps before the centre only, see PairsParams):
//                      a warp per 32 rows copies them to shared memory
//                      coalesced (tables of ≤ 32 taps), one ballot per tap
//   kmap_pairs_count_masks  the same counts from the rows' tap masks
//                      ([n_out, W] uint64: masks_build's or the brick
//                      search's), 8·W bytes a row instead of the 4·V of
//                      its table entries
//   kmap_pairs_seg     Seg[v] = first pair of tap v
//   kmap_pairs_write   pair lists: a row's place is a ballot rank in its
//                      warp plus the counts of the warps before it
#include "gray.cuh"
#include "hashtable.cuh"
#include "pdl.cuh"

namespace fgk {

using namespace fgx;

// Conv mirrors cudaext.convArg.
struct Conv {
  int K[3], S[3], P[3], D[3];
  int V, pad;
  __device__ __forceinline__ void tap(int v, int* k) const {
    k[2] = v % K[2];
    v /= K[2];
    k[1] = v % K[1];
    k[0] = v / K[1];
  }
};

constexpr int kChunk = 256;  // rows per block of the pair kernels

// divide splits the flat (row, tap) index e into its row and tap; 32-bit
// division when the table is small enough.
__device__ __forceinline__ void divide(i64 e, i64 total, int V, i64* o, int* v) {
  if (total <= 0xffffffffll) {
    const u32 q = (u32)e / (u32)V;
    *o = q;
    *v = (int)((u32)e - q * (u32)V);
  } else {
    *o = e / V;
    *v = (int)(e - *o * V);
  }
}

__device__ void nbr_fine(const int* out, i64 n_out, Ext in, Conv c, Table t, int* nbr) {
  const i64 total = n_out * c.V;
  for (i64 e = gtid(); e < total; e += gstride()) {
    i64 o;
    int v, k[3];
    divide(e, total, c.V, &o, &v);
    c.tap(v, k);
    const int4 q = reinterpret_cast<const int4*>(out)[o];
    const i64 x = (i64)q.y * c.S[0] - c.P[0] + (i64)k[0] * c.D[0];
    const i64 y = (i64)q.z * c.S[1] - c.P[1] + (i64)k[1] * c.D[1];
    const i64 z = (i64)q.w * c.S[2] - c.P[2] + (i64)k[2] * c.D[2];
    nbr[e] = in.contains(q.x, x, y, z) ? table_find(t, in.key(q.x, x, y, z)) : -1;
  }
}

// nbr_sub is kmap_nbr_sub (see the header): S = 1, P = ⌊K/2⌋·D and odd K,
// so tap V−1−v is the negated offset of tap v and Nbr[j, V−1−v] = o
// exactly when Nbr[o, v] = j (rows are unique: the hash build rejects
// duplicates).
__device__ void nbr_sub(const int* coords, i64 n, Ext ext, Conv c, Table t, int* nbr) {
  const int H = (c.V - 1) / 2;  // taps before the centre; the centre is tap H
  const int Hm = H > 0 ? H : 1;
  const i64 total = n * Hm;
  for (i64 e = gtid(); e < total; e += gstride()) {
    i64 o;
    int h;
    divide(e, total, Hm, &o, &h);
    int* row = nbr + o * c.V;
    if (h == 0) row[H] = (int)o;
    if (h >= H) continue;
    int k[3];
    c.tap(h, k);
    const int4 q = reinterpret_cast<const int4*>(coords)[o];
    const i64 x = (i64)q.y * c.S[0] - c.P[0] + (i64)k[0] * c.D[0];
    const i64 y = (i64)q.z * c.S[1] - c.P[1] + (i64)k[1] * c.D[1];
    const i64 z = (i64)q.w * c.S[2] - c.P[2] + (i64)k[2] * c.D[2];
    const int j = ext.contains(q.x, x, y, z) ? table_find(t, ext.key(q.x, x, y, z)) : -1;
    row[h] = j;
    if (j >= 0) nbr[(i64)j * c.V + (c.V - 1 - h)] = (int)o;
  }
}

// coarse returns (f + P − k·D)/S when it is exact, non-negative and below
// n, else −1.
__device__ __forceinline__ i64 coarse(i64 f, int P, int k, int D, int S, i64 n) {
  const i64 num = f + P - (i64)k * D;
  if (num < 0 || num % S != 0) return -1;
  const i64 q = num / S;
  return q < n ? q : -1;
}

__device__ void nbr_coarse(const int* out, i64 n_out, Ext in, Conv c, Table t, int* nbr) {
  const i64 total = n_out * c.V;
  for (i64 e = gtid(); e < total; e += gstride()) {
    i64 o;
    int v, k[3];
    divide(e, total, c.V, &o, &v);
    c.tap(v, k);
    const int4 q = reinterpret_cast<const int4*>(out)[o];
    const i64 x = coarse(q.y, c.P[0], k[0], c.D[0], c.S[0], in.X);
    const i64 y = coarse(q.z, c.P[1], k[1], c.D[1], c.S[1], in.Y);
    const i64 z = coarse(q.w, c.P[2], k[2], c.D[2], c.S[2], in.Z);
    nbr[e] = (x >= 0 && y >= 0 && z >= 0) ? table_find(t, in.key(q.x, x, y, z)) : -1;
  }
}

template <class K> __device__ void cand_coarse(const int* in, i64 n, Ext out, Conv c, K sentinel, K* keys) {
  const i64 total = n * c.V;
  for (i64 e = gtid(); e < total; e += gstride()) {
    i64 i;
    int v, k[3];
    divide(e, total, c.V, &i, &v);
    c.tap(v, k);
    const int4 p = reinterpret_cast<const int4*>(in)[i];
    const i64 x = coarse(p.y, c.P[0], k[0], c.D[0], c.S[0], out.X);
    const i64 y = coarse(p.z, c.P[1], k[1], c.D[1], c.S[1], out.Y);
    const i64 z = coarse(p.w, c.P[2], k[2], c.D[2], c.S[2], out.Z);
    keys[e] = (x >= 0 && y >= 0 && z >= 0) ? (K)out.key(p.x, x, y, z) : sentinel;
  }
}

template <class K> __device__ void cand_fine(const int* in, i64 n, Ext out, Conv c, K sentinel, K* keys) {
  const i64 total = n * c.V;
  for (i64 e = gtid(); e < total; e += gstride()) {
    i64 i;
    int v, k[3];
    divide(e, total, c.V, &i, &v);
    c.tap(v, k);
    const int4 p = reinterpret_cast<const int4*>(in)[i];
    const i64 x = (i64)p.y * c.S[0] - c.P[0] + (i64)k[0] * c.D[0];
    const i64 y = (i64)p.z * c.S[1] - c.P[1] + (i64)k[1] * c.D[1];
    const i64 z = (i64)p.w * c.S[2] - c.P[2] + (i64)k[2] * c.D[2];
    keys[e] = out.contains(p.x, x, y, z) ? (K)out.key(p.x, x, y, z) : sentinel;
  }
}

template <class K> __device__ void decode(const K* keys, i64 m, Ext ext, int* coords) {
  for (i64 j = gtid(); j < m; j += gstride()) {
    int c[4];
    ext.unkey((u64)keys[j], c);
    reinterpret_cast<int4*>(coords)[j] = make_int4(c[0], c[1], c[2], c[3]);
  }
}

__device__ void rev_mirror(const int* nbr, i64 n, int V, int* rev) {
  const i64 total = n * V;
  for (i64 e = gtid(); e < total; e += gstride()) {
    i64 i;
    int v;
    divide(e, total, V, &i, &v);
    rev[e] = nbr[i * V + (V - 1 - v)];
  }
}

__device__ void rev_scatter(const int* nbr, i64 n_out, int V, int* rev) {
  const i64 total = n_out * V;
  for (i64 e = gtid(); e < total; e += gstride()) {
    const int i = nbr[e];
    if (i < 0) continue;
    i64 o;
    int v;
    divide(e, total, V, &o, &v);
    rev[(i64)i * V + v] = (int)o;
  }
}

// ---- brick neighbour search (3×3×3, dilation 1) ----

constexpr int kBrickBits = 2;                // bricks of 4×4×4 cells
constexpr u32 kBrickNumbered = 0x80000000u;  // slot value holds a brick number

__device__ __forceinline__ u64 brick_key(const Ext& bext, int4 c) {
  return bext.key(c.x, c.y >> kBrickBits, c.z >> kBrickBits, c.w >> kBrickBits);
}
// The brick number held by a numbered slot value (kmap_brick_insert's).
__device__ __forceinline__ int brick_number(u64 slot_value) { return (int)((u32)slot_value & ~kBrickNumbered); }
// The number of the brick holding c (after kmap_brick_insert), or −1.
__device__ __forceinline__ int brick_of(const Table& bt, const Ext& bext, int4 c) {
  const i64 s = table_slot(bt, brick_key(bext, c));
  return s < 0 ? -1 : brick_number(bt.slots[s]);
}
__device__ __forceinline__ int brick_cell(int x, int y, int z) {
  constexpr int m = (1 << kBrickBits) - 1;
  return (((x & m) << kBrickBits | (y & m)) << kBrickBits) | (z & m);
}

// brick_claim finds or stores key in the narrow brick table t (a
// placeholder value until the claimer numbers the brick): it returns true
// for the one caller whose compare-and-swap stored it, and the key's slot
// in *slot (−1 when no free slot lies within t.limit probes) and its probe
// distance in *dist.
__device__ __forceinline__ bool brick_claim(const Table& t, u64 key, i64* slot, int* dist) {
  u64 s = t.home(key);
  const u64 m = t.mask();
  for (int p = 0; p < t.limit; ++p) {
    u64 cur = t.slots[s];
    if (cur == kEmpty) {
      cur = atomicCAS(reinterpret_cast<unsigned long long*>(t.slots + s), kEmpty, key << 32);
      if (cur == kEmpty) {
        *slot = (i64)s;
        *dist = p;
        return true;
      }
    }
    if ((cur >> 32) == key) {
      *slot = (i64)s;
      *dist = p;
      return false;
    }
    s = (s + 1) & m;
  }
  *slot = -1;
  return false;
}

// brick_insert puts the 4×4×4 brick of every row into the brick table and
// numbers each brick densely as it is first stored (the slot value becomes
// number | kBrickNumbered, first[number] the claiming row; numbers follow
// the order of the claims, which nothing observable depends on: they only
// index the pool). A block-aggregated atomicAdd on status[kCount] hands
// out the numbers, so status[kCount] ends as the brick count. It also
// checks the rows, so that the brick search needs no coordinate hash
// table: a row outside ext sets kFlagRange, and a second row in the same
// cell of a brick (a duplicate coordinate) kFlagDup, found by its bit in
// the brick's 64-bit cell mask (cells[slot], zero first). The host names
// the offending rows through the coordinate table then. The rows of a warp
// that share a brick (sorted rows of a surface share a few bricks per
// warp) insert it once, from their first lane, with the OR of their cell
// bits: one probe and one atomicOr per brick and warp.
// Every block runs the same number of rounds (the barriers inside).
// With pool (cap bricks of 64 cells) it also does kmap_brick_scatter's
// work, pool[number · 64 + cell] = row for the bricks numbered below cap,
// which needs each row's brick number: the leader of rows whose brick
// another warp claimed reads the slot until the claimer has numbered it.
// That wait is safe only when every block runs one round (gridDim.x ·
// blockDim.x ≥ n, as the host launches it then): a claimer numbers its
// bricks right after its block's barrier, and no warp waits before that
// barrier, so every awaited number comes.
__device__ void brick_insert(const int* coords, i64 n, Ext ext, Ext bext, Table bt, u64* cells, int* first,
                             int* status, int* pool, i64 cap) {
  __shared__ int sCount, sBase;
  Acc acc;
  const int lane = threadIdx.x & 31;
  for (i64 base = (i64)blockIdx.x * blockDim.x; base < n; base += gstride()) {
    const i64 r = base + threadIdx.x;
    bool ok = false;
    u64 key = ~0ull;  // never a brick key (brick keys fit 32 bits)
    u64 bit = 0;
    int4 c = make_int4(0, 0, 0, 0);
    if (r < n) {
      c = reinterpret_cast<const int4*>(coords)[r];
      if (ext.contains(c.x, c.y, c.z, c.w)) {
        ok = true;
        key = brick_key(bext, c);
        bit = 1ull << brick_cell(c.y, c.z, c.w);
      } else {
        acc.flags |= kFlagRange;
      }
    }
    // One round per distinct brick of the warp (warp-uniform) finds each
    // brick's leader lane, its rows and the OR of their cell bits, with
    // full-warp reductions only: the sm_90 code nvcc 11.8 made of
    // __reduce_or_sync over __match_any_sync's partial masks kept one of
    // the two 32-bit halves in the register of the other (the GPU map
    // tests then saw duplicates that were not there). The leaders' claims
    // follow, in parallel.
    bool lead = false;
    u64 bits = 0;
    int rows = 0;
    int mine_leader = lane;  // the lane that inserts this row's brick
    for (u32 todo = __ballot_sync(~0u, ok); todo;) {
      const int leader = __ffs(todo) - 1;
      const u64 k = __shfl_sync(~0u, key, leader);
      const u32 peers = __ballot_sync(~0u, ok && key == k);
      const u64 b = ok && key == k ? bit : 0;
      const u64 group = (u64)__reduce_or_sync(~0u, (u32)(b >> 32)) << 32 | __reduce_or_sync(~0u, (u32)b);
      todo &= ~peers;
      if (ok && key == k) mine_leader = leader;
      if (lane == leader) {
        lead = true;
        bits = group;
        rows = __popc(peers);
      }
    }
    bool won = false;
    i64 slot = -1;
    if (lead) {
      if (__popcll(bits) < rows) acc.flags |= kFlagDup;  // two rows of the warp in one cell
      int dist = 0;
      won = brick_claim(bt, key, &slot, &dist);
      acc.note(slot < 0 ? kInsertFull : kInserted, dist);
      if (slot >= 0 && (atomicOr(reinterpret_cast<unsigned long long*>(cells + slot), bits) & bits)) {
        acc.flags |= kFlagDup;
      }
    }
    if (threadIdx.x == 0) sCount = 0;
    __syncthreads();
    const int mine = won ? atomicAdd(&sCount, 1) : 0;
    __syncthreads();
    if (threadIdx.x == 0) sBase = sCount > 0 ? atomicAdd(status + kCount, sCount) : 0;
    __syncthreads();
    int id = -1;
    if (won) {
      id = sBase + mine;
      bt.slots[slot] = key << 32 | ((u32)id | kBrickNumbered);
      first[id] = (int)r;
    }
    if (pool) {
      if (lead && !won && slot >= 0) {
        u64 v;
        while (!((u32)(v = *reinterpret_cast<volatile u64*>(bt.slots + slot)) & kBrickNumbered)) __nanosleep(64);
        id = brick_number(v);
      }
      id = __shfl_sync(~0u, id, mine_leader);
      if (ok && id >= 0 && id < cap) pool[(i64)id * 64 + brick_cell(c.y, c.z, c.w)] = (int)r;
    }
  }
  block_flush(status, acc);
}

// The rows of a warp that share a brick (__match_any_sync) look it up
// once, from their first lane, which shuffles the number to the others.
// The pool holds cap bricks: rows of bricks numbered cap or more are not
// stored (the host sized the pool by an estimate of the brick count and
// scatters again into a larger one when the count exceeds it).
__device__ void brick_scatter(const int* coords, i64 n, Ext bext, Table bt, int* pool, i64 cap) {
  const int lane = threadIdx.x & 31;
  for (i64 base = gtid() - lane; base < n; base += gstride()) {
    const i64 r = base + lane;
    u64 key = ~0ull;
    int4 c = make_int4(0, 0, 0, 0);
    if (r < n) {
      c = reinterpret_cast<const int4*>(coords)[r];
      key = brick_key(bext, c);
    }
    const u32 peers = __match_any_sync(~0u, key);
    const int leader = __ffs(peers) - 1;
    int id = -1;
    if (r < n && lane == leader) id = brick_of(bt, bext, c);
    id = __shfl_sync(peers, id, leader);
    if (r < n && id >= 0 && id < cap) pool[(i64)id * 64 + brick_cell(c.y, c.z, c.w)] = (int)r;
  }
}

// A warp per brick at a time (grid-stride over the bricks); tap v =
// (dx+1)·9 + (dy+1)·3 + (dz+1) is the neighbour at (x+dx, y+dy, z+dz)
// (fgk::Conv::tap with K = 3, P = 1). The warp takes the batch and brick
// coordinates from the brick's first row, looks the 27 bricks around it
// (itself included) up in the brick table (a lane each, in parallel) with
// their cell masks (brick_insert's cells), and gathers the 6×6×6 cells
// around the brick (the brick and a one-cell rim) into shared memory,
// reading the pool only at occupied cells (so the pool needs no −1 fill).
// Then the warp writes each row's 27 entries (lane v tap v, 108
// consecutive bytes) and, when mask and rank are non-null, takes the row's
// tap mask as the ballot of its present entries; a lane per row then
// stores the masks and Gray ranks (masks.cu masks_build's, for the Gray
// order of the table). kmap_nbr_brick_loop (EnvNoBrickBallotMask) forms
// each mask by a lane per row from 27 reads of the gathered cells instead,
// as before session 38. Against a thread per row, the bricks are
// looked up once per brick (27 independent probes for ≈ 14 rows of a
// shell) instead of 3–4 dependent probes per row. Cells outside the extent
// hold no row, and bricks outside it are not looked up, so they read −1.
constexpr int kBrickWarps = 8;                      // warps per block of kmap_nbr_brick
constexpr int kBrickBlocksPerSM = 5;                // its occupancy (48 registers on sm_90)
constexpr int kRim = (1 << kBrickBits) + 2;         // side of the gathered cells
constexpr int kGathered = kRim * kRim * kRim;       // 216
constexpr int kRimCells = kGathered - 64;           // 152 around the brick
constexpr int kRimRounds = (kRimCells + 31) / 32;  // per lane
static_assert(kBrickBits == 2, "nbr_brick's rim enumeration assumes 4×4×4 bricks");

// The index in the gathered cells of the window corner of brick cell c.
__device__ __forceinline__ int brick_window(int c) { return ((c >> 4) * kRim + (c >> 2 & 3)) * kRim + (c & 3); }

// rim_cell returns rim cell t < kRimCells (the two x faces, then the two y
// faces of the middle x, then the two z faces of the middle x and y)
// packed as its gathered index | neighbour brick << 8 | that brick's cell
// << 13.
__device__ __forceinline__ u32 rim_cell(int t) {
  int hx, hy, hz;
  if (t < 72) {
    hx = t / 36 * 5, hy = t % 36 / 6, hz = t % 6;
  } else if (t < 120) {
    t -= 72;
    hx = 1 + t / 12, hy = t % 12 / 6 * 5, hz = t % 6;
  } else {
    t -= 120;
    hx = 1 + t / 8, hy = 1 + t % 8 / 2, hz = t % 2 * 5;
  }
  const int k = ((hx + 3) >> 2) * 9 + ((hy + 3) >> 2) * 3 + ((hz + 3) >> 2);
  return (u32)((hx * kRim + hy) * kRim + hz) | (u32)k << 8 | (u32)brick_cell(hx - 1, hy - 1, hz - 1) << 13;
}

template <bool kBallotMask>
__device__ void nbr_brick(const int* coords, i64 nb, const int* count, Ext bext, Table bt, const u64* cells,
                          const int* first, const int* pool, int* nbr, u64* mask, u32* rank) {
  __shared__ int idsS[kBrickWarps][27];
  __shared__ u64 occS[kBrickWarps][27];
  __shared__ int gatherS[kBrickWarps][kGathered];
  __shared__ int rowsS[kBrickWarps][64];
  __shared__ int winS[kBrickWarps][64];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int* ids = idsS[warp];
  u64* occ = occS[warp];
  int* gather = gatherS[warp];
  int* rows = rowsS[warp];
  int* win = winS[warp];
  // Per lane, once: its rim cells and its tap's offset in a window.
  u32 rim[kRimRounds];
#pragma unroll
  for (int i = 0; i < kRimRounds; ++i) rim[i] = lane + 32 * i < kRimCells ? rim_cell(lane + 32 * i) : 0;
  const int tap = lane < 27 ? ((lane / 9) * kRim + lane / 3 % 3) * kRim + lane % 3 : 0;
  const u32 lt = (1u << lane) - 1;
  // With count (brick_insert's status word) the pool holds nb bricks and
  // the search covers the first min(nb, *count): when the count exceeds
  // the pool the host searches again over a pool of the count (bricks
  // numbered nb or more read as absent meanwhile, so no read leaves the
  // pool).
  if (count) nb = min(nb, (i64)*count);
  for (i64 b = (i64)blockIdx.x * kBrickWarps + warp; b < nb; b += (i64)gridDim.x * kBrickWarps) {
    const int4 q = reinterpret_cast<const int4*>(coords)[first[b]];
    if (lane < 27) {
      const int x = (q.y >> kBrickBits) + lane / 9 - 1, y = (q.z >> kBrickBits) + lane / 3 % 3 - 1,
                z = (q.w >> kBrickBits) + lane % 3 - 1;
      int id = -1;
      u64 o = 0;
      if (bext.contains(q.x, x, y, z)) {
        const i64 s = table_slot(bt, bext.key(q.x, x, y, z));
        if (s >= 0) {
          id = brick_number(bt.slots[s]);
          o = cells[s];
          if (id >= nb) id = -1, o = 0;
        }
      }
      ids[lane] = id;
      occ[lane] = o;
    }
    __syncwarp();
    // The brick itself (lookup 13): its rows, in cell order, with their
    // window corners.
    const u64 own = occ[13];
    const u32 lo = (u32)own, hi = (u32)(own >> 32);
    const int r0 = lo >> lane & 1 ? pool[b * 64 + lane] : -1;
    const int r1 = hi >> lane & 1 ? pool[b * 64 + 32 + lane] : -1;
    constexpr int kCentre = (kRim + 1) * kRim + 1;  // window corner → its centre
    gather[brick_window(lane) + kCentre] = r0;
    gather[brick_window(lane + 32) + kCentre] = r1;
    if (r0 >= 0) {
      const int k = __popc(lo & lt);
      rows[k] = r0;
      win[k] = brick_window(lane);
    }
    if (r1 >= 0) {
      const int k = __popc(lo) + __popc(hi & lt);
      rows[k] = r1;
      win[k] = brick_window(lane + 32);
    }
#pragma unroll
    for (int i = 0; i < kRimRounds; ++i) {
      if (lane + 32 * i < kRimCells) {
        const u32 d = rim[i];
        const int k = d >> 8 & 31, cell = d >> 13;
        gather[d & 0xff] = occ[k] >> cell & 1 ? pool[(i64)ids[k] * 64 + cell] : -1;
      }
    }
    __syncwarp();
    const int nrows = __popc(lo) + __popc(hi);
    if (!kBallotMask && mask) {
      // kmap_nbr_brick_loop: a lane per row reads the row's 27 gathered
      // cells for its mask.
      for (int k = lane; k < nrows; k += 32) {
        const int* w = gather + win[k];
        u32 m = 0;
#pragma unroll 1
        for (int dx = 0; dx < 3; ++dx, w += kRim * kRim) {
#pragma unroll
          for (int v = 0; v < 9; ++v) m |= (u32)(w[v / 3 * kRim + v % 3] >= 0) << (dx * 9 + v);
        }
        const int row = rows[k];
        mask[row] = m;
        rank[row] = (u32)gray_to_binary(m);
      }
    }
    // The table writes, lane v tap v of row k. With kBallotMask they give
    // the masks too: the ballot of row k's present entries is its mask
    // (bit v tap v), which takes win[k]'s place once every lane has read
    // it (the ballot orders the reads before the store); then a lane per
    // row stores the masks and ranks.
#pragma unroll 4
    for (int k = 0; k < nrows; ++k) {
      const int e = lane < 27 ? gather[win[k] + tap] : -1;
      if (lane < 27) nbr[(i64)rows[k] * 27 + lane] = e;
      if (kBallotMask && mask) {
        const u32 m = __ballot_sync(~0u, e >= 0);
        if (lane == 0) win[k] = (int)m;
      }
    }
    if (kBallotMask && mask) {
      __syncwarp();
      for (int k = lane; k < nrows; k += 32) {
        const u32 m = (u32)win[k];
        const int row = rows[k];
        mask[row] = m;
        rank[row] = (u32)gray_to_binary(m);
      }
    }
    __syncwarp();  // before the next brick overwrites the shared cells
  }
}

// The pair kernels run kChunk-row blocks, a warp per 32 rows (a lane per
// row). PairRows gives a lane its row's entries of the first taps taps:
// for tables of at most kStagedTaps taps the warp first copies them from
// its 32 rows (32·V consecutive entries) into shared memory with coalesced
// loads, skipping the entries of the other taps (a submanifold map's lists
// hold the taps before the centre: 52 of a row's 108 bytes at V = 27, so
// about a quarter fewer sectors read), otherwise each entry is read from
// the table.
constexpr int kChunkWarps = kChunk / 32;
constexpr int kStagedTaps = 32;

struct PairRows {
  const int* nbr;
  int* stage;  // this warp's rows when staged, else null
  i64 o;       // this lane's row
  int V;
  bool valid;  // o < n_out
  __device__ PairRows(const int* nbr_, i64 n_out, int V_, int taps, int* stage_) : nbr(nbr_), stage(nullptr), V(V_) {
    const int lane = threadIdx.x & 31;
    const i64 o0 = (i64)blockIdx.x * kChunk + (threadIdx.x & ~31);
    o = o0 + lane;
    valid = o < n_out;
    if (V <= kStagedTaps) {
      stage = stage_;
      const int n = (int)max((i64)0, min((i64)32, n_out - o0)) * V;
      const int* src = nbr + o0 * V;
      // A batch of kBatch entries a lane (entry k0 + 32b; tap is its tap,
      // k % V, stepped with k): every load issued before any store, so
      // that all are in flight at once. An entry of another tap loads its
      // row's first entry instead (a sector read anyway) and one past the
      // rows the batch's first, so the loads need no predicate (with one
      // the compiler pairs each load with its store); only the stores do.
      constexpr int kBatch = 8;
      const int step = 32 % V;
      int tap = lane % V;
      for (int k0 = lane; k0 < n; k0 += 32 * kBatch) {
        u32 want = 0;
        int at[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int k = k0 + 32 * b;
          const bool in = k < n, mine = in && tap < taps;
          at[b] = mine ? k : in ? k - tap : k0;
          want |= (u32)mine << b;
          tap += step;
          if (tap >= V) tap -= V;
        }
        int e[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) e[b] = src[at[b]];
#pragma unroll
        for (int b = 0; b < kBatch; ++b)
          if (want >> b & 1u) stage[k0 + 32 * b] = e[b];
      }
      __syncwarp();
    }
  }
  // The entry of tap v of this lane's row, or −1 beyond the table.
  __device__ __forceinline__ int at(int v) const {
    if (!valid) return -1;
    return stage ? stage[(threadIdx.x & 31) * V + v] : nbr[o * V + v];
  }
  // count writes this warp's number of rows with tap v0 + t to wc[t], for
  // the nt taps from v0 on (lane 0 writes).
  __device__ __forceinline__ void count(int v0, int nt, int* wc) const {
    for (int t = 0; t < nt; ++t) {
      const int c = __popc(__ballot_sync(0xffffffffu, at(v0 + t) >= 0));
      if ((threadIdx.x & 31) == 0) wc[t] = c;
    }
  }
};

// store_chunk_counts writes the chunk's counts of taps v0 … v0 + nt − 1,
// the sums of the warps' counts wc[·][t] (lane 0 of each warp wrote its
// own), to cnt[(v0 + t)·nc + chunk]: a barrier before, for the warps'
// counts, and one after, before wc is written again.
__device__ __forceinline__ void store_chunk_counts(const int (*wc)[32], int v0, int nt, int* cnt, i64 nc) {
  __syncthreads();
  if (threadIdx.x < nt) {
    int c = 0;
#pragma unroll
    for (int k = 0; k < kChunkWarps; ++k) c += wc[k][threadIdx.x];
    cnt[(i64)(v0 + threadIdx.x) * nc + blockIdx.x] = c;
  }
  __syncthreads();
}

// cnt[v·nc + chunk] = number of present taps v among the chunk's rows,
// for the first taps taps of the table (row pitch V): a ballot per warp
// and tap, then one barrier per 32 taps for the block's sums.
__device__ void pairs_count(const int* nbr, i64 n_out, int V, int taps, int* cnt, i64 nc) {
  __shared__ int stage[kChunkWarps][32 * kStagedTaps];
  __shared__ int wc[kChunkWarps][32];
  const int w = threadIdx.x >> 5;
  const PairRows rows(nbr, n_out, V, taps, stage[w]);
  for (int v0 = 0; v0 < taps; v0 += 32) {
    const int nt = min(32, taps - v0);
    rows.count(v0, nt, wc[w]);
    store_chunk_counts(wc, v0, nt, cnt, nc);
  }
}

// pairs_count_masks is pairs_count from the rows' tap masks [n_out, W]
// (bit b of word w: tap 64w + b present), a lane per row: the same counts
// (a mask bit is set exactly where the table entry is ≥ 0), the rows read
// as one word each instead of V entries.
__device__ void pairs_count_masks(const u64* mask, i64 n_out, int W, int taps, int* cnt, i64 nc) {
  __shared__ int wc[kChunkWarps][32];
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const i64 o = (i64)blockIdx.x * kChunk + threadIdx.x;
  for (int v0 = 0; v0 < taps; v0 += 32) {
    const int nt = min(32, taps - v0);
    // Taps v0 … v0 + 31 lie in one word: v0 is a multiple of 32.
    const u32 bits = o < n_out ? (u32)(mask[o * W + (v0 >> 6)] >> (v0 & 63)) : 0u;
    for (int t = 0; t < nt; ++t) {
      const int c = __popc(__ballot_sync(0xffffffffu, bits >> t & 1u));
      if (lane == 0) wc[w][t] = c;
    }
    store_chunk_counts(wc, v0, nt, cnt, nc);
  }
}

__device__ void pairs_seg(const i64* off, i64 nc, int V, i64* seg) {
  for (i64 v = gtid(); v < V; v += gstride()) seg[v] = off[v * nc];
}

// pairs_write writes the chunk's pairs of each of the first taps taps at
// off[v·nc + chunk] on: in row order, a lane's place is the rows before it
// in its warp (ballot) and in the warps before (their counts). The chunk's
// offsets are read into shared memory before the counts' barrier, so that
// no tap's stores wait on a global load.
__device__ void pairs_write(const int* nbr, i64 n_out, int V, int taps, const i64* off, i64 nc, int* pin,
                            int* pout) {
  __shared__ int stage[kChunkWarps][32 * kStagedTaps];
  __shared__ int wc[kChunkWarps][32];
  __shared__ i64 first[32];
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const unsigned below = (1u << lane) - 1;
  const PairRows rows(nbr, n_out, V, taps, stage[w]);
  for (int v0 = 0; v0 < taps; v0 += 32) {
    const int nt = min(32, taps - v0);
    if (threadIdx.x < nt) first[threadIdx.x] = off[(i64)(v0 + threadIdx.x) * nc + blockIdx.x];
    rows.count(v0, nt, wc[w]);
    __syncthreads();
    for (int t = 0; t < nt; ++t) {
      const int i = rows.at(v0 + t);
      const unsigned b = __ballot_sync(0xffffffffu, i >= 0);
      if (i >= 0) {
        i64 p = first[t] + __popc(b & below);
        for (int k = 0; k < w; ++k) p += wc[k][t];
        pin[p] = i;
        pout[p] = (int)rows.o;
      }
    }
    __syncthreads();
  }
}

}  // namespace fgk

extern "C" {

__global__ void kmap_nbr_fine(const int* out, long long n_out, fgx::Ext in, fgk::Conv c, fgx::Table t, int* nbr) {
  fg_await_prior_grid();
  fgk::nbr_fine(out, n_out, in, c, t, nbr);
}
__global__ void kmap_nbr_sub(const int* coords, long long n, fgx::Ext ext, fgk::Conv c, fgx::Table t, int* nbr) {
  fg_await_prior_grid();
  fgk::nbr_sub(coords, n, ext, c, t, nbr);
}
__global__ void __launch_bounds__(256) kmap_brick_insert(const int* coords, long long n, fgx::Ext ext, fgx::Ext bext,
                                                          fgx::Table bt, unsigned long long* cells, int* first,
                                                          int* status, int* pool, long long cap) {
  fg_await_prior_grid();
  fgk::brick_insert(coords, n, ext, bext, bt, cells, first, status, pool, cap);
}
__global__ void kmap_brick_scatter(const int* coords, long long n, fgx::Ext bext, fgx::Table bt, int* pool,
                                   long long cap) {
  fg_await_prior_grid();
  fgk::brick_scatter(coords, n, bext, bt, pool, cap);
}
__global__ void __launch_bounds__(fgk::kBrickWarps * 32, fgk::kBrickBlocksPerSM)
    kmap_nbr_brick(const int* coords, long long nb, const int* count, fgx::Ext bext, fgx::Table bt,
                   const unsigned long long* cells, const int* first, const int* pool, int* nbr,
                   unsigned long long* mask, unsigned* rank) {
  fg_await_prior_grid();
  fgk::nbr_brick<true>(coords, nb, count, bext, bt, cells, first, pool, nbr, mask, rank);
}
__global__ void __launch_bounds__(fgk::kBrickWarps * 32, fgk::kBrickBlocksPerSM)
    kmap_nbr_brick_loop(const int* coords, long long nb, const int* count, fgx::Ext bext, fgx::Table bt,
                        const unsigned long long* cells, const int* first, const int* pool, int* nbr,
                        unsigned long long* mask, unsigned* rank) {
  fg_await_prior_grid();
  fgk::nbr_brick<false>(coords, nb, count, bext, bt, cells, first, pool, nbr, mask, rank);
}
__global__ void kmap_nbr_coarse(const int* out, long long n_out, fgx::Ext in, fgk::Conv c, fgx::Table t, int* nbr) {
  fg_await_prior_grid();
  fgk::nbr_coarse(out, n_out, in, c, t, nbr);
}
__global__ void kmap_cand_coarse_u32(const int* in, long long n, fgx::Ext out, fgk::Conv c, unsigned sentinel,
                                     unsigned* keys) {
  fg_await_prior_grid();
  fgk::cand_coarse(in, n, out, c, sentinel, keys);
}
__global__ void kmap_cand_coarse_u64(const int* in, long long n, fgx::Ext out, fgk::Conv c,
                                     unsigned long long sentinel, unsigned long long* keys) {
  fg_await_prior_grid();
  fgk::cand_coarse(in, n, out, c, sentinel, keys);
}
__global__ void kmap_cand_fine_u32(const int* in, long long n, fgx::Ext out, fgk::Conv c, unsigned sentinel,
                                   unsigned* keys) {
  fg_await_prior_grid();
  fgk::cand_fine(in, n, out, c, sentinel, keys);
}
__global__ void kmap_cand_fine_u64(const int* in, long long n, fgx::Ext out, fgk::Conv c, unsigned long long sentinel,
                                   unsigned long long* keys) {
  fg_await_prior_grid();
  fgk::cand_fine(in, n, out, c, sentinel, keys);
}
__global__ void kmap_decode_u32(const unsigned* keys, long long m, fgx::Ext ext, int* coords) {
  fg_await_prior_grid();
  fgk::decode(keys, m, ext, coords);
}
__global__ void kmap_decode_u64(const unsigned long long* keys, long long m, fgx::Ext ext, int* coords) {
  fg_await_prior_grid();
  fgk::decode(keys, m, ext, coords);
}
__global__ void kmap_rev_mirror(const int* nbr, long long n, int V, int* rev) {
  fg_await_prior_grid();
  fgk::rev_mirror(nbr, n, V, rev);
}
__global__ void kmap_rev_scatter(const int* nbr, long long n_out, int V, int* rev) {
  fg_await_prior_grid();
  fgk::rev_scatter(nbr, n_out, V, rev);
}
__global__ void __launch_bounds__(fgk::kChunk) kmap_pairs_count(const int* nbr, long long n_out, int V, int taps,
                                                                int* cnt, long long nc) {
  fg_await_prior_grid();
  fgk::pairs_count(nbr, n_out, V, taps, cnt, nc);
}
__global__ void __launch_bounds__(fgk::kChunk) kmap_pairs_count_masks(const unsigned long long* mask, long long n_out,
                                                                      int W, int taps, int* cnt, long long nc) {
  fg_await_prior_grid();
  fgk::pairs_count_masks(mask, n_out, W, taps, cnt, nc);
}
__global__ void kmap_pairs_seg(const long long* off, long long nc, int V, long long* seg) {
  fg_await_prior_grid();
  fgk::pairs_seg(off, nc, V, seg);
}
__global__ void __launch_bounds__(fgk::kChunk) kmap_pairs_write(const int* nbr, long long n_out, int V, int taps,
                                                                const long long* off, long long nc, int* pin,
                                                                int* pout) {
  fg_await_prior_grid();
  fgk::pairs_write(nbr, n_out, V, taps, off, nc, pin, pout);
}

}  // extern "C"
