// The rank of a tap mask in the reflected Gray sequence, shared by the
// mask kernels (masks.cu) and the brick neighbour search (kmap.cu), which
// writes the masks of the rows it fills.
#pragma once

#include "hashtable.cuh"

namespace fgx {

// gray_to_binary returns the position of the Gray code x in the reflected
// Gray sequence: bit j is the XOR of the bits of x at j and above.
__device__ __forceinline__ u64 gray_to_binary(u64 x) {
  x ^= x >> 1;
  x ^= x >> 2;
  x ^= x >> 4;
  x ^= x >> 8;
  x ^= x >> 16;
  x ^= x >> 32;
  return x;
}

}  // namespace fgx
