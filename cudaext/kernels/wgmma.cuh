// Hopper (sm_90a) warpgroup multiply for the gather GEMM of gemm.cuh.
//
// A Hopper tile (TileCfg with H = true) stages both operands K-major in
// shared memory in the 128-byte swizzled layout that wgmma reads through
// matrix descriptors: every tile row is 128 bytes (BK·elem = 128), and the
// 16-byte chunk c of row i sits at chunk c ^ (i mod 8) of that row; eight
// rows (1 KiB, 1 KiB-aligned) form one swizzle atom. Each warpgroup (four
// warps) multiplies 64 tile rows by all BN columns with
// wgmma.mma_async m64nBNk(32 bytes): four instructions per 128-byte stage,
// the descriptors' start address advanced by 32 bytes each.
//
// The operands arrive by cp.async (generic proxy); a fence.proxy.async
// after each thread's copies land makes them visible to wgmma (async
// proxy) before the stage's barrier. A warpgroup issues its wgmma group for
// stage i, then the copies of stage i + S − 2, then waits until only that
// group is in flight: a stage is refilled only after every warpgroup's
// group that read it has retired, so the pipeline prefetches S − 2 stages
// ahead (TileCfg::kDist).
//
// tf32: wgmma reads the float32 operands as stored and uses their top 19
// bits (truncation, as the mma.sync path does since it stopped rounding
// with cvt.rna: docs/PERF_NOTES.md step 25), within the tf32 bound (tests:
// 2e-3 relative L2).
//
// These instructions need PTX ISA 8.0 and the sm_90a target. build.sh
// compiles the *_sm90a.cu instantiations to PTX only and the driver
// JIT-compiles them on Hopper GPUs; no other target ever instantiates
// these templates.
#pragma once

namespace fg {

// Operand-list macros of the accumulator registers (32, 64 or 128 float32
// per thread: m64n64, m64n128 or m64n256), composed from runs of 32: the
// asm operand numbers (FG_WGMMA_R<first>) and the "+f" constraints
// (FG_WGMMA_O<first>).
#define FG_WGMMA_R0 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FG_WGMMA_R32 \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FG_WGMMA_R64 \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define FG_WGMMA_R96 \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define FG_WGMMA_O0(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FG_WGMMA_O32(d) \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define FG_WGMMA_O64(d) \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define FG_WGMMA_O96(d) \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define FG_WGMMA_D32 "{" FG_WGMMA_R0 "}"
#define FG_WGMMA_D64 "{" FG_WGMMA_R0 ", " FG_WGMMA_R32 "}"
#define FG_WGMMA_D128 "{" FG_WGMMA_R0 ", " FG_WGMMA_R32 ", " FG_WGMMA_R64 ", " FG_WGMMA_R96 "}"
#define FG_WGMMA_OPS32(d) FG_WGMMA_O0(d)
#define FG_WGMMA_OPS64(d) FG_WGMMA_O0(d), FG_WGMMA_O32(d)
#define FG_WGMMA_OPS128(d) FG_WGMMA_O0(d), FG_WGMMA_O32(d), FG_WGMMA_O64(d), FG_WGMMA_O96(d)

// wgmma matrix descriptor of an operand in the 128-byte swizzled layout
// starting at shared address addr: lbo and sbo are the leading and stride
// byte offsets. K-major (rows of 128 bytes of K): sbo = 1 KiB between
// 8-row groups, lbo unused (1). MN-major (lines of 128 bytes = 64 16-bit
// elements along M or N, one line per k): lbo = the offset between
// 64-element blocks along MN, sbo = 1 KiB between groups of 8 k-lines.
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned addr, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16) |
         ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins the n accumulator registers at this point: reads of them that follow
// (an epilogue's bit casts for a shuffle) cannot be hoisted above it, and so
// not above the wgmma_wait<0> that precedes it. ptxas serializes every
// wgmma of a kernel (C7514) that reads an accumulator while its group may
// still run.
template <int n> __device__ __forceinline__ void pin_acc(float* acc) {
#pragma unroll
  for (int i = 0; i < n; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}
// Makes this thread's generic-proxy shared-memory writes (cp.async, plain
// stores) visible to the async proxy (wgmma operand reads).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// One wgmma of shape m64 × BN × (32 bytes of K) for arithmetic M:
// d += A(desc a) · B(desc b); TA / TB: the operand is MN-major (16-bit
// arithmetics only; tf32 reads K-major operands only).
template <Math M, int BN, bool TA, bool TB> struct Wgmma;
// One specialisation per (arithmetic, BN): NACC accumulators per thread,
// then the operand numbers of the descriptors (A, B), of the scale-d
// register (P) and, for the 16-bit arithmetics, of the transpose
// immediates (TA, TB).
#define FG_WGMMA_16BIT(MATH, TY, BN, NACC, A, B, P, TA, TB)                                              \
  template <bool TA_, bool TB_> struct Wgmma<Math::MATH, BN, TA_, TB_> {                                   \
    __device__ __forceinline__ static void run(float* d, unsigned long long a, unsigned long long b) {    \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                                        \
                   "wgmma.mma_async.sync.aligned.m64n" #BN "k16.f32." #TY "." #TY " " FG_WGMMA_D##NACC       \
                   ", %" #A ", %" #B ", p, 1, 1, %" #TA ", %" #TB ";\n}\n"                                   \
                   : FG_WGMMA_OPS##NACC(d)                                                                 \
                   : "l"(a), "l"(b), "r"(1), "n"(int(TA_)), "n"(int(TB_)));                                \
    }                                                                                                      \
  };
#define FG_WGMMA_TF32(BN, NACC, A, B, P)                                                                    \
  template <> struct Wgmma<Math::TF32, BN, false, false> {                                                 \
    __device__ __forceinline__ static void run(float* d, unsigned long long a, unsigned long long b) {    \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                                        \
                   "wgmma.mma_async.sync.aligned.m64n" #BN "k8.f32.tf32.tf32 " FG_WGMMA_D##NACC               \
                   ", %" #A ", %" #B ", p, 1, 1;\n}\n"                                                       \
                   : FG_WGMMA_OPS##NACC(d)                                                                 \
                   : "l"(a), "l"(b), "r"(1));                                                              \
    }                                                                                                      \
  };
// One tf32 wgmma of shape m64 × BN × 8 whose A comes from registers: a
// (4 per thread) holds this thread's part of the warpgroup's 64 × 8 A
// fragment, warp w of the warpgroup rows 16w … 16w + 15 and lane (g =
// lane / 4, t = lane % 4) the elements (g, t), (g + 8, t), (g, t + 4),
// (g + 8, t + 4), as mma.sync m16n8k8; B as in Wgmma (K-major, desc b).
// The registers of a must not change until the group has retired.
template <int BN> struct WgmmaTF32RegA;
#define FG_WGMMA_TF32_RA(BN, NACC, A0, A1, A2, A3, B, P)                                                  \
  template <> struct WgmmaTF32RegA<BN> {                                                                   \
    __device__ __forceinline__ static void run(float* d, const unsigned (&a)[4], unsigned long long b) {  \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                                        \
                   "wgmma.mma_async.sync.aligned.m64n" #BN "k8.f32.tf32.tf32 " FG_WGMMA_D##NACC               \
                   ", {%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #B ", p, 1, 1;\n}\n"                      \
                   : FG_WGMMA_OPS##NACC(d)                                                                 \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));                          \
    }                                                                                                      \
  };
FG_WGMMA_TF32_RA(128, 64, 64, 65, 66, 67, 68, 69)
#undef FG_WGMMA_TF32_RA
FG_WGMMA_16BIT(F16, f16, 64, 32, 32, 33, 34, 35, 36)
FG_WGMMA_16BIT(F16, f16, 128, 64, 64, 65, 66, 67, 68)
FG_WGMMA_16BIT(F16, f16, 256, 128, 128, 129, 130, 131, 132)
FG_WGMMA_16BIT(BF16, bf16, 64, 32, 32, 33, 34, 35, 36)
FG_WGMMA_16BIT(BF16, bf16, 128, 64, 64, 65, 66, 67, 68)
FG_WGMMA_16BIT(BF16, bf16, 256, 128, 128, 129, 130, 131, 132)
FG_WGMMA_TF32(64, 32, 32, 33, 34)
FG_WGMMA_TF32(128, 64, 64, 65, 66)
FG_WGMMA_TF32(256, 128, 128, 129, 130)
#undef FG_WGMMA_16BIT
#undef FG_WGMMA_TF32

// One stage of a warpgroup's multiply: acc (the m64 × BN fragment of this
// warpgroup, mma.sync C-fragment order) += A(64 rows at a) · B(BN columns
// at b) over the stage's BK elements of K, then commit the group. The
// caller waits (wgmma_wait<1>) before the next stage: it issues the
// copies of a later stage first, while this group runs. AMN / BMN: the operand
// is staged MN-major (lines of 128 bytes along M or N, one per k; its
// 64-element blocks lbo bytes apart), else K-major (128-byte rows of K).
template <class C, bool AMN, bool BMN>
__device__ __forceinline__ void wgmma_stage(float* acc, unsigned a, unsigned b, unsigned aLbo, unsigned bLbo) {
  constexpr int kInst = MathTraits<C::kMath>::kInstK;
  constexpr unsigned kStepK = kInst * C::kElem, kStepMN = kInst * 128;  // bytes of K per instruction
  // The K steps' descriptors differ from the first's in the address field
  // only (address >> 4, 14 bits; shared memory is below 256 KiB, so the
  // sums never carry out of it): one descriptor build per operand.
  const unsigned long long da0 = wgmma_desc(a, AMN ? aLbo : 16, 1024);
  const unsigned long long db0 = wgmma_desc(b, BMN ? bLbo : 16, 1024);
  constexpr unsigned kStepA = (AMN ? kStepMN : kStepK) >> 4, kStepB = (BMN ? kStepMN : kStepK) >> 4;
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < C::BK / kInst; ++k) Wgmma<C::kMath, C::BN, AMN, BMN>::run(acc, da0 + k * kStepA, db0 + k * kStepB);
  wgmma_commit();
}

}  // namespace fg
