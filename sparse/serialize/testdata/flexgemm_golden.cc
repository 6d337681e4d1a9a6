// flexgemm_golden.cc prints reference codes computed by FlexGEMM's own
// serialisation functions, for TestFlexGEMMGolden. It is not part of the Go
// build. Regenerate flexgemm_golden.txt with
//
//	g++ -O2 -std=c++17 -I flexgemm_stub -I FLEXGEMM/flex_gemm/kernels/cuda/serialize \
//	    flexgemm_golden.cc -o /tmp/golden && /tmp/golden > flexgemm_golden.txt
//
// where FLEXGEMM is a checkout of JeffreyXiang/FlexGEMM (6dd94a8 was used)
// and flexgemm_stub holds a cuda.h that defines __host__, __device__, __global__ and
// __forceinline__ and declares blockIdx, blockDim, threadIdx, uint4 and
// make_uint4, plus an empty cuda_runtime.h, so the headers compile for the
// host.
//
// Each line is: mode axis_bits b x y z code (code in decimal). Z-order lines
// are limited to 3·axis_bits + batch_bits ≤ 32, where FlexGEMM's z-order
// kernel shifts the batch index correctly (it shifts a uint32).
#include <cstdint>
#include <cstdio>

#include "hilbert.h"
#include "z_order.h"

static uint64_t state = 0x243f6a8885a308d3ull;

static uint64_t next() {  // splitmix64
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int main() {
  namespace s = flex_gemm::serialize;
  for (int bits = 1; bits <= 21; bits++) {
    for (int batch_bits = 0; batch_bits <= 64 - 3 * bits && batch_bits <= 32; batch_bits += (batch_bits < 4 ? 1 : 7)) {
      for (int k = 0; k < 8; k++) {
        uint32_t mask = (1u << bits) - 1;
        uint32_t x = next() & mask, y = next() & mask, z = next() & mask;
        if (k == 0) x = y = z = 0;
        if (k == 1) x = y = z = mask;
        uint64_t bmax = batch_bits == 0 ? 0 : (batch_bits == 32 ? 0xffffffffull : (1ull << batch_bits) - 1);
        uint32_t b = static_cast<uint32_t>(k == 1 ? bmax : next() & bmax);
        uint64_t code;
        s::hilbert_encode<uint64_t>(b, x, y, z, bits, code);
        printf("hilbert %d %u %u %u %u %llu\n", bits, b, x, y, z, (unsigned long long)code);
        if (3 * bits + batch_bits <= 32) {
          s::z_order_encode<uint64_t>(b, x, y, z, bits, code);
          printf("z_order %d %u %u %u %u %llu\n", bits, b, x, y, z, (unsigned long long)code);
        }
      }
    }
  }
  return 0;
}
