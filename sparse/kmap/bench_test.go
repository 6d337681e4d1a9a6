package kmap

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/hash"
)

// The benchmarks use FlexGEMM's sphere shell (shellCoords): N = 252,392 at
// RES = 256 and 4,113,056 at RES = 1024, about 12.8 neighbours per voxel
// for a 3×3×3 kernel.

func shellExt(res int) grid.Extent { return grid.Extent{Batch: 1, X: res, Y: res, Z: res} }

func perRow(b *testing.B, rows int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(rows), "ns/row")
}

// BenchmarkSubmanifold builds the 3×3×3 submanifold map of the shell
// (build), and the same plus the masked structures of the forward pass:
// masks, Gray-code order and tile unions for 64-row tiles (build+masked).
func BenchmarkSubmanifold(b *testing.B) {
	for _, res := range []int{256, 1024} {
		coords := shellCoords(res, 1)
		n := len(coords) / 4
		b.Run(fmt.Sprintf("res=%d/build", res), func(b *testing.B) {
			for b.Loop() {
				if _, err := NewSubmanifold(coords, shellExt(res), cube3(3), cube3(1)); err != nil {
					b.Fatal(err)
				}
			}
			perRow(b, n)
		})
		b.Run(fmt.Sprintf("res=%d/build+masked", res), func(b *testing.B) {
			for b.Loop() {
				m, err := NewSubmanifold(coords, shellExt(res), cube3(3), cube3(1))
				if err != nil {
					b.Fatal(err)
				}
				m.Masked().Tiles(64)
			}
			perRow(b, n)
		})
	}
}

// BenchmarkStrided builds downsampling maps of the RES = 1024 shell with
// generated output coordinates.
func BenchmarkStrided(b *testing.B) {
	const res = 1024
	coords := shellCoords(res, 1)
	for _, conv := range []grid.Conv{grid.Cube(2, 2, 0, 1), grid.Cube(3, 2, 1, 1)} {
		b.Run(fmt.Sprintf("K%dS%dP%d", conv.Kernel[0], conv.Stride[0], conv.Padding[0]), func(b *testing.B) {
			for b.Loop() {
				if _, err := NewStrided(coords, shellExt(res), conv, nil); err != nil {
					b.Fatal(err)
				}
			}
			perRow(b, len(coords)/4)
		})
	}
}

// BenchmarkTransposed upsamples the 2×2×2-strided RES = 1024 shell
// (1,131,248 rows) back to RES = 1024 (9,049,984 outputs).
func BenchmarkTransposed(b *testing.B) {
	const res = 1024
	conv := grid.Cube(2, 2, 0, 1)
	s, err := NewStrided(shellCoords(res, 1), shellExt(res), conv, nil)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := NewTransposed(s.OutCoords, s.Out, conv); err != nil {
			b.Fatal(err)
		}
	}
	perRow(b, s.NOut)
}

// fresh returns a copy of m without its cached derived structures.
func fresh(m *Map) *Map {
	return &Map{Kind: m.Kind, Conv: m.Conv, In: m.In, Out: m.Out, NIn: m.NIn, NOut: m.NOut,
		InCoords: m.InCoords, OutCoords: m.OutCoords, Nbr: m.Nbr}
}

// BenchmarkDerived times each derived structure of the RES = 1024 shell's
// submanifold map and of its 3×3×3 stride-2 map (whose reverse table is a
// scatter).
func BenchmarkDerived(b *testing.B) {
	const res = 1024
	coords := shellCoords(res, 1)
	sm, err := NewSubmanifold(coords, shellExt(res), cube3(3), cube3(1))
	if err != nil {
		b.Fatal(err)
	}
	st, err := NewStrided(coords, shellExt(res), grid.Cube(3, 2, 1, 1), nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range []*Map{sm, st} {
		ms := m.Masked()
		for _, d := range []struct {
			name string
			f    func(m *Map)
		}{
			{"Reverse", func(m *Map) { m.Reverse() }},
			{"Pairs", func(m *Map) { m.Pairs() }},
			{"Masked", func(m *Map) { m.Masked() }},
			{"Tiles64", func(*Map) { (&Masked{V: ms.V, Words: ms.Words, Mask: ms.Mask, Order: ms.Order}).Tiles(64) }},
		} {
			b.Run(fmt.Sprintf("%v/%s", m.Kind, d.name), func(b *testing.B) {
				for b.Loop() {
					d.f(fresh(m))
				}
				perRow(b, m.NOut)
			})
		}
	}
}

// BenchmarkNeighbourSearch compares the two ways to fill a 3×3×3
// submanifold table of the RES = 1024 shell (all 27 taps, one worker):
// the merge join the builders use, and probing the exact hash table
// (package hash) once per tap. It documents why the builders do not probe
// a hash table on the CPU: random probes into a table much larger than the
// caches cost a cache and TLB miss each.
func BenchmarkNeighbourSearch(b *testing.B) {
	const res = 1024
	coords := shellCoords(res, 1)
	ext := shellExt(res)
	n := len(coords) / 4
	conv := grid.Submanifold(cube3(3), cube3(1))
	nbr := make([]int32, n*27)
	ix, err := newSortedIndex(coords, ext)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("merge", func(b *testing.B) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		for b.Loop() {
			gather(nbr, coords, ext, ix.rows, ix, conv, fineFromCoarse, false)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(27*n), "ns/lookup")
	})
	b.Run("hash", func(b *testing.B) {
		tb, err := hash.FromCoords(coords, ext)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			for o := range n {
				c := coords[4*o : 4*o+4]
				row := nbr[o*27 : o*27+27]
				for v := range 27 {
					x, y, z := int(c[1])+v/9-1, int(c[2])+v/3%3-1, int(c[3])+v%3-1
					row[v] = -1
					if ext.Contains(int(c[0]), x, y, z) {
						row[v] = tb.Get(ext.Key(int(c[0]), x, y, z), -1)
					}
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(27*n), "ns/lookup")
	})
}
