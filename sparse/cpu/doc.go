// Package cpu holds the pure-Go CPU kernels of FlexGEMM-Go: sparse
// convolution (forward, input gradient, weight gradient, bias gradient) for
// every algorithm, plus pooling and grid sampling. It works on plain slices
// and *kmap.Map and knows nothing of the sparse package's Matrix or Engine;
// the root package wraps it as the CPU engine.
//
// # Convolution
//
// With V taps, x [NIn, Ci], w [Co, V·Ci] (the weight [Co, Kx, Ky, Kz, Ci]
// flattened) and the kernel map's table Nbr [NOut, V]:
//
//	Forward:    y[o]  = b + Σ_v W_v · x[Nbr[o, v]]         W_v = w[:, v, :]  [Co, Ci]
//	InputGrad:  dx[i] = Σ_v W_vᵀ · dy[Rev[i, v]]           Rev = m.Reverse()
//	WeightGrad: dW_v  = Σ_{(i, o) ∈ pairs(v)} dy[o] ⊗ x[i]
//	BiasGrad:   db    = Σ_o dy[o]
//
// Forward and InputGrad are the same gather-GEMM, out[r] = Σ_v in[T[r, v]]·B_v,
// on the forward table or on the reverse table: every output row gathers its
// own inputs, so no row is written by two goroutines and no atomics are
// needed. The methods (see Method) are the five algorithms of FlexGEMM:
//
//   - Explicit: im2col blocks [rows, V·K] with zero rows for absent
//     neighbours, one GEMM with the packed weight [V·K, N] per block.
//   - Implicit: tiles of TileRows rows; for each of the V taps the tile's
//     neighbour rows are gathered (zeros for absent ones) and a [rows, K]·[K, N]
//     GEMM is accumulated into the tile.
//   - ImplicitSplitK: Implicit with the tile's V·K reduction cut into SplitK
//     chunks computed separately and summed in chunk order.
//   - Masked: tiles of rows in the Gray-code order of their neighbour masks
//     (m.Masked(), m.ReverseMasked() for the input gradient); only the taps
//     in the tile's union (Masked.Tiles) are visited, and for each only the
//     rows that have that neighbour are gathered, so no zero work is done.
//   - MaskedSplitK: Masked with the union-tap reduction split into chunks.
//
// WeightGrad is one GEMM per tap over the tap's pair list (m.Pairs()); the
// split-K methods cut every tap's pairs into SplitK fixed chunks whose
// partial gradients are summed in chunk order.
//
// # Determinism
//
// Every result is bit-identical for any GOMAXPROCS: tiles, tile sizes,
// split counts and chunk sizes are fixed by the options and the problem,
// never by the number of goroutines; each output element is computed by
// one goroutine in a fixed order; partial sums are reduced in a fixed
// order. Different methods add in different orders, so they agree to
// rounding, not bit for bit.
//
// # Kernels
//
// All GEMMs run through one register-blocked micro-kernel that computes an
// mr×nr block of C += A·B with A read through two strides (row-major gathered
// rows for the forward and input gradient, column-major for the weight
// gradient) and the rows of C scattered through an offset list. On amd64
// the kernel is Go assembly, AVX-512 (12×32 float32, 12×16 float64) or
// AVX2+FMA (6×16, 6×8), chosen at start-up with golang.org/x/sys/cpu; a
// portable Go kernel is the fallback and is the only kernel under the
// purego build tag. KernelName reports the choice.
package cpu
