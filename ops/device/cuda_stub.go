//go:build !cudaext

package device

import "fmt"

// OpenCUDA opens GPU ordinal as a Device. This program was built without
// the cudaext build tag, so it always fails with ErrNoGPU; build with
// -tags cudaext (and the CUDA toolkit, see cudaext) to train on a GPU.
func OpenCUDA(ordinal int, opts ...Option) (*Device, error) {
	return nil, fmt.Errorf("%w: GPU %d requested, but this program was built without the cudaext build tag (go build -tags cudaext)", ErrNoGPU, ordinal)
}
