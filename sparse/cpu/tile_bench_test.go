package cpu

import (
	"fmt"
	"testing"
)

// BenchmarkTileRows sweeps the tile height of Masked on the RES=64 shell,
// C=64, float32 (one training step: fwd + dgrad + wgrad).
func BenchmarkTileRows(b *testing.B) {
	p := newTrainProblem(b, 64, 64)
	flops := 3 * 2 * float64(p.m.Pairs().Count()) * 64 * 64
	for _, tm := range []int{64, 128, 256, 512, 1024} {
		p.m.Masked().Tiles(tm)
		p.m.ReverseMasked().Tiles(tm)
		for _, method := range []Method{Masked, Implicit} {
			opt := Options{Method: method, TileRows: tm}
			b.Run(fmt.Sprintf("%v/tm=%d", method, tm), func(b *testing.B) {
				for b.Loop() {
					p.step(b, p.m, opt)
				}
				reportGFLOPs(b, flops)
			})
		}
	}
}
