package serialize

import (
	"math"
	"testing"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// shellCoords returns the voxels (i, j, k) of a res³ grid with
// res/2 − 1.25 ≤ ‖(i, j, k) − (res/2 − 0.5)‖ ≤ res/2, FlexGEMM's benchmark
// sphere shell, in (x, y, z) order with batch 0. The comparison is exact:
// 16·‖·‖² = 4·Σ(2i − res + 1)² against (2·res − 5)² and (2·res)².
// res = 1024 gives 4 113 056 voxels.
func shellCoords(res int) []int32 {
	lo, hi := (2*res-5)*(2*res-5), 4*res*res
	var out []int32
	for i := range res {
		di := 2*i - res + 1
		for j := range res {
			dj := 2*j - res + 1
			base := 4 * (di*di + dj*dj)
			if base > hi {
				continue
			}
			// Only k near the two roots of the outer and inner sphere
			// can qualify; scan a margin around them.
			c := float64(res-1) / 2
			rOut := math.Sqrt(float64(hi-base)) / 4
			rIn := 0.0
			if lo > base {
				rIn = math.Sqrt(float64(lo-base)) / 4
			}
			a0 := max(0, int(math.Floor(c-rOut-1)))
			a1 := min(res-1, int(math.Ceil(c-rIn+1)))
			b0 := max(a1+1, int(math.Floor(c+rIn-1)))
			b1 := min(res-1, int(math.Ceil(c+rOut+1)))
			for _, r := range [2][2]int{{a0, a1}, {b0, b1}} {
				for k := r[0]; k <= r[1]; k++ {
					dk := 2*k - res + 1
					if d := base + 4*dk*dk; d >= lo && d <= hi {
						out = append(out, 0, int32(i), int32(j), int32(k))
					}
				}
			}
		}
	}
	return out
}

func TestShellCounts(t *testing.T) {
	// Voxel counts published for O-CNN's and FlexGEMM's shell generator.
	for res, want := range map[int]int{32: 3840, 64: 15192, 128: 64160, 256: 252392} {
		coords := shellCoords(res)
		if got := len(coords) / 4; got != want {
			t.Fatalf("res %d: %d voxels, want %d", res, got, want)
		}
		if err := Encode(Hilbert, coords, cube(1, res), make([]uint64, len(coords)/4)); err != nil {
			t.Fatal(err)
		}
	}
}

var benchShell []int32

func benchCoords(b *testing.B) ([]int32, grid.Extent) {
	if benchShell == nil {
		benchShell = shellCoords(1024)
	}
	if n := len(benchShell) / 4; n != 4113056 {
		b.Fatalf("shell has %d voxels", n)
	}
	return benchShell, cube(1, 1024)
}

func BenchmarkEncode(b *testing.B) {
	coords, ext := benchCoords(b)
	codes := make([]uint64, len(coords)/4)
	for _, mode := range modes {
		b.Run(mode.String(), func(b *testing.B) {
			for b.Loop() {
				if err := Encode(mode, coords, ext, codes); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(codes))*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mcoords/s")
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	coords, ext := benchCoords(b)
	codes := make([]uint64, len(coords)/4)
	out := make([]int32, len(coords))
	for _, mode := range modes {
		if err := Encode(mode, coords, ext, codes); err != nil {
			b.Fatal(err)
		}
		b.Run(mode.String(), func(b *testing.B) {
			for b.Loop() {
				if err := Decode(mode, codes, ext, out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(codes))*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mcoords/s")
		})
	}
}

func BenchmarkArgsort(b *testing.B) {
	coords, ext := benchCoords(b)
	codes := make([]uint64, len(coords)/4)
	for _, mode := range modes {
		if err := Encode(mode, coords, ext, codes); err != nil {
			b.Fatal(err)
		}
		b.Run(mode.String(), func(b *testing.B) {
			for b.Loop() {
				if _, err := Argsort(codes); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(codes))*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mcoords/s")
		})
	}
}
