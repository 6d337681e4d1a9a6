//go:build cudaext

package device

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/cudaext"
)

// The CUDA backend: *cudaext.Engine is the Memory half as it is, and the
// kernels of cudaext/nn.go (cudaext.NN) are the NN half.
var (
	_ Memory = (*cudaext.Engine)(nil)
	_ NN     = (*cudaext.NN)(nil)
)

func init() { oomChecks = append(oomChecks, cudaext.ErrOutOfMemory) }

// OpenCUDA opens GPU ordinal (cudaext.Open, which registers the CUDA
// convolution engine) as a Device. A machine without a usable GPU or
// driver gives an error wrapping ErrNoGPU (and cudaext.ErrNoDevice) that
// says why.
func OpenCUDA(ordinal int, opts ...Option) (*Device, error) {
	e, err := cudaext.Open(ordinal)
	if err != nil {
		return nil, fmt.Errorf("%w: opening GPU %d: %w", ErrNoGPU, ordinal, err)
	}
	return New(e, e.NN(), opts...)
}
