// Host-only stand-ins for the CUDA names used by FlexGEMM's serialize headers.
#pragma once
#include <cstdint>
#include <cstddef>
#include <limits>
#define __host__
#define __device__
#define __forceinline__ inline
#define __global__
struct stub_dim3 { unsigned x, y, z; };
static stub_dim3 blockIdx, blockDim, threadIdx;
struct uint4 { uint32_t x, y, z, w; };
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return uint4{a, b, c, d}; }
