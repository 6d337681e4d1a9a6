// Package sparse is the framework-free core of FlexGEMM-Go: sparse 3D
// tensors, kernel maps, serialisation, voxelisation, and the convolution,
// pooling and grid-sample primitives of a sparse 3D network.
//
// # Overview
//
// A Tensor is a set of active voxels of a batched grid: coordinates
// [N, 4] int32 as (batch, x, y, z) and features [N, C]. Convolutions run over
// a kernel map (package kmap) that is built once from the coordinates and
// shared by every layer with the same geometry.
//
// Weights are [Co, Kx, Ky, Kz, Ci], viewed as [Co, V, Ci] with tap
// v = (kx·Ky + ky)·Kz + kz. A torch.nn.Conv3d weight w of shape
// [Co, Ci, Kx, Ky, Kz] over a dense volume indexed [B, C, X, Y, Z] maps to
// ours by w.permute(0, 2, 3, 4, 1).
//
// # Engines
//
// Every primitive runs on an Engine chosen by where the data lives: host
// slices ([]float32, []float64) run on the pure-Go CPU engine, which is
// always present; the CUDA engine in package cudaext registers itself for
// device buffers when built with the cudaext tag.
//
// # Algorithms
//
// Convolutions accept the five algorithm names of FlexGEMM (explicit,
// implicit, implicit split-K, masked implicit, masked implicit split-K) and
// Auto. Each computes the same result up to floating-point rounding; they
// differ only in speed and memory. On the CPU every algorithm is
// deterministic: the same inputs give the same bits for any GOMAXPROCS.
package sparse
