package sparse

import "fmt"

// Algorithm selects how a convolution is computed. All algorithms give the
// same result up to rounding; see the package documentation.
type Algorithm int

// The convolution algorithms, named as in FlexGEMM.
const (
	// Auto lets the engine choose (the autotuner on the GPU, a heuristic on
	// the CPU).
	Auto Algorithm = iota
	// Explicit gathers an im2col matrix [rows, V·Ci] and runs one dense GEMM.
	Explicit
	// Implicit fuses the gather into a GEMM over all V taps.
	Implicit
	// ImplicitSplitK is Implicit with the V·Ci reduction split into chunks
	// that are summed in a fixed order.
	ImplicitSplitK
	// MaskedImplicit sorts rows by the Gray-code rank of their neighbour
	// bitmask and skips, per tile of rows, taps that no row of the tile has.
	MaskedImplicit
	// MaskedImplicitSplitK is MaskedImplicit with split-K.
	MaskedImplicitSplitK
)

var algorithmNames = [...]string{
	Auto:                 "auto",
	Explicit:             "explicit_gemm",
	Implicit:             "implicit_gemm",
	ImplicitSplitK:       "implicit_gemm_splitk",
	MaskedImplicit:       "masked_implicit_gemm",
	MaskedImplicitSplitK: "masked_implicit_gemm_splitk",
}

// Algorithms lists every concrete algorithm (all but Auto).
var Algorithms = []Algorithm{Explicit, Implicit, ImplicitSplitK, MaskedImplicit, MaskedImplicitSplitK}

// String implements fmt.Stringer for Algorithm.
func (a Algorithm) String() string {
	if a >= 0 && int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// Valid reports whether a is a known algorithm.
func (a Algorithm) Valid() error {
	if a < 0 || int(a) >= len(algorithmNames) {
		return fmt.Errorf("%w: %d", ErrAlgorithm, int(a))
	}
	return nil
}

// ParseAlgorithm returns the algorithm with FlexGEMM's name s
// ("explicit_gemm", …, "masked_implicit_gemm_splitk") or "auto".
func ParseAlgorithm(s string) (Algorithm, error) {
	for a, name := range algorithmNames {
		if s == name {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want one of %v)", ErrAlgorithm, s, algorithmNames)
}
