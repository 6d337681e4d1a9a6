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
	return New(e, e.NN(), append([]Option{withTimer(cudaTimer{e})}, opts...)...)
}

// cudaTimer times a Device's operations with the engine's kernel
// profiler (cudaext.Engine.StartProfile/Phase/StopProfile): each
// operation is a phase named by its category.
type cudaTimer struct{ e *cudaext.Engine }

func (t cudaTimer) startTiming(first string) error { return t.e.StartProfile(first) }
func (t cudaTimer) markTiming(name string) error   { return t.e.Phase(name) }

func (t cudaTimer) stopTiming() (DeviceTiming, error) {
	p, err := t.e.StopProfile()
	if err != nil {
		return DeviceTiming{}, err
	}
	out := DeviceTiming{TotalMs: p.TotalMs, Categories: map[string]CategoryTime{}}
	for _, ph := range p.Phases {
		c := out.Categories[ph.Name]
		c.Spans++
		c.KernelMs += ph.KernelMs
		c.SpanMs += ph.SpanMs
		out.Categories[ph.Name] = c
	}
	return out, nil
}
