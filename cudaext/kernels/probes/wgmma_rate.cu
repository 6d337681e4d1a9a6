// wgmma_rate measures the H200's tf32 wgmma rate with the A operand read
// from shared memory (SS) against A from registers (RS, WgmmaTF32RegA),
// and RS with A rebuilt by and.b32 at every stage, as the register-A
// gather builds its fragments (docs/PERF_NOTES.md step 124). 132 blocks of
// two warpgroups, one per SM, each multiplying m64n128k8 four times a
// stage with at most two groups in flight; no memory traffic in the loop,
// so the numbers are the tensor pipe's.
//
// A probe, not part of the engine: build.sh does not compile it. On an
// sm_90 GPU with nvcc 12 or newer, from the repository root:
//   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a \
//     -I cudaext/kernels -o /tmp/wgmma_rate cudaext/kernels/probes/wgmma_rate.cu && /tmp/wgmma_rate
// H200, session 62: SS 484.9 / 486.2, RS 485.6 / 486.0, RS rebuilt
// 485.7 / 485.8 TFLOP/s (two rounds).
#include <cstdio>
#include <cuda_runtime.h>
#include "gemm.cuh"
#include "wgmma.cuh"
using namespace fg;
// v & m where it stands (gather_ws.cuh and_late).
__device__ __forceinline__ unsigned and_v(unsigned v, unsigned m) {
  unsigned r;
  asm volatile("and.b32 %0, %1, %2;\n" : "=r"(r) : "r"(v), "r"(m));
  return r;
}
// MODE 0: SS; 1: RS, constant A; 2: RS, A rebuilt each stage by and.b32 from
// a ring of four slots that change every stage, as reloads would.
template <int MODE>
__global__ void __launch_bounds__(256, 1) k(float* out, int iters, unsigned mask) {
  extern __shared__ __align__(1024) unsigned char smraw[];
  unsigned char* sm = smraw + ((1024 - (smem_addr(smraw) & 1023)) & 1023);
  float* f = reinterpret_cast<float*>(sm);
  for (int i = threadIdx.x; i < 48 * 256; i += 256) f[i] = 1e-3f * (i & 255);
  fence_proxy_async();
  __syncthreads();
  const int warp = threadIdx.x >> 5;
  float acc[64];
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  const unsigned long long da = wgmma_desc(smem_addr(sm + (warp >> 2) * 64 * 128), 16, 1024);
  const unsigned long long db = wgmma_desc(smem_addr(sm + 16384), 16, 1024);
  unsigned ring[4][16];
  for (int b = 0; b < 4; ++b)
    for (int j = 0; j < 16; ++j) ring[b][j] = __float_as_uint(1e-3f * (threadIdx.x + j + b));
  for (int it = 0; it < iters; it += 4) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      unsigned a[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int j = 0; j < 4; ++j) a[kk][j] = MODE == 2 ? and_v(ring[b][4 * kk + j], mask) : ring[0][4 * kk + j];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        if constexpr (MODE == 0)
          Wgmma<Math::TF32, 128, false, false>::run(acc, da + kk * 2, db + kk * 2);
        else
          WgmmaTF32RegA<128>::run(acc, a[kk], db + kk * 2);
      }
      wgmma_commit();
      wgmma_wait<1>();
      if constexpr (MODE == 2) {
#pragma unroll
        for (int j = 0; j < 16; ++j) ring[b][j] ^= (unsigned)it;  // the slot changes, as a reload would
      }
    }
  }
  wgmma_wait<0>();
  float s = 0;
  for (int i = 0; i < 64; ++i) s += acc[i];
  out[blockIdx.x * 256 + threadIdx.x] = s;
}
// run times one launch of k<MODE> after a warm-up launch and prints its rate.
template <int MODE> void run(const char* name, float* out, int sms) {
  const int smem = 48 * 1024 + 1024, iters = 40000;
  cudaFuncSetAttribute(k<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  k<MODE><<<sms, 256, smem>>>(out, 400, 0xffffe000u);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  k<MODE><<<sms, 256, smem>>>(out, iters, 0xffffe000u);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms;
  cudaEventElapsedTime(&ms, e0, e1);
  const double flop = (double)sms * 2 * iters * 4 * 64.0 * 128 * 8 * 2;
  printf("%-28s %8.3f ms  %6.1f TFLOP/s  (%s)\n", name, ms, flop / ms / 1e9, cudaGetErrorString(cudaGetLastError()));
}
int main() {
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* out;
  cudaMalloc(&out, sms * 256 * sizeof(float));
  for (int r = 0; r < 2; ++r) {
    run<0>("SS m64n128k8 tf32", out, sms);
    run<1>("RS m64n128k8 tf32 const A", out, sms);
    run<2>("RS m64n128k8 tf32 and.b32 A", out, sms);
  }
  return 0;
}
