package cpu

import (
	"testing"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// TestConvKernelSets runs oracle cases with every kernel set this machine
// can run (AVX-512, AVX2, portable) and with the assembly row gather off,
// so the paths other machines take are tested here too.
func TestConvKernelSets(t *testing.T) {
	type config struct {
		name   string
		k32    kernelSet[float32]
		k64    kernelSet[float64]
		gather bool
	}
	configs := []config{{"portable", kernelSet[float32]{portableKernel[float32](goMR, goNR), portableKernel[float32](goMR, goNR/2)},
		kernelSet[float64]{portableKernel[float64](goMR, goNR), portableKernel[float64](goMR, goNR/2)}, false}}
	a32, a64 := asmKernels32(), asmKernels64()
	for i := range a32 {
		configs = append(configs, config{a32[i].name, kernelSet[float32]{a32[i], a32[i]}, kernelSet[float64]{a64[i], a64[i]}, i%2 == 0})
	}
	saved32, saved64, savedGather := kernels32, kernels64, haveGatherAsm
	defer func() { kernels32, kernels64 = saved32, saved64; setGather(savedGather) }()
	specs := []sceneSpec{
		{kmap.Submanifold, ext(2, 6, 5, 7), 0.3, sub(cube(3), cube(1))},
		{kmap.Strided, ext(1, 7, 8, 9), 0.25, geo(cube(3), cube(2), cube(1), cube(1))},
		{kmap.Transposed, ext(1, 4, 5, 4), 0.3, geo(cube(3), cube(2), cube(1), cube(1))},
	}
	for _, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			kernels32, kernels64 = cfg.k32, cfg.k64
			setGather(cfg.gather && savedGather)
			for i, spec := range specs {
				sc := buildScene(t, spec, uint64(i+70))
				for _, ch := range [][2]int{{3, 13}, {20, 40}} {
					checkAll[float64](t, sc, newOracle[float64](sc, ch[0], ch[1], uint64(i)), allOptions())
					checkAll[float32](t, sc, newOracle[float32](sc, ch[0], ch[1], uint64(i)), allOptions())
				}
			}
		})
	}
}
