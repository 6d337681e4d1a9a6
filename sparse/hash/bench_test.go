package hash

import (
	"fmt"
	"testing"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// shellKeys returns the keys of the RES³ sphere shell (4,113,056 keys at
// RES = 1024) in (x, y, z) order.
func shellKeys(res int) ([]int32, []uint64, grid.Extent) {
	coords := shellCoords(res, 1)
	ext := grid.Extent{Batch: 1, X: res, Y: res, Z: res}
	keys := make([]uint64, len(coords)/4)
	for r := range keys {
		keys[r] = ext.Key(int(coords[4*r]), int(coords[4*r+1]), int(coords[4*r+2]), int(coords[4*r+3]))
	}
	return coords, keys, ext
}

func BenchmarkInsert(b *testing.B) {
	coords, keys, ext := shellKeys(1024)
	for _, narrow := range []bool{true, false} {
		b.Run(fmt.Sprintf("narrow=%v", narrow), func(b *testing.B) {
			for b.Loop() {
				tb, err := New(Options{Capacity: len(keys), Narrow: narrow})
				if err != nil {
					b.Fatal(err)
				}
				if err := tb.InsertBatch(keys, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(keys)), "ns/key")
		})
	}
	b.Run("FromCoords", func(b *testing.B) {
		for b.Loop() {
			if _, err := FromCoords(coords, ext); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(keys)), "ns/key")
	})
}

func BenchmarkLookup(b *testing.B) {
	_, keys, _ := shellKeys(1024)
	// Misses: the same keys shifted by half a plane.
	miss := make([]uint64, len(keys))
	for i, k := range keys {
		miss[i] = k + 512*1024 + 1
	}
	out := make([]int32, len(keys))
	for _, narrow := range []bool{true, false} {
		tb, err := New(Options{Capacity: len(keys), Narrow: narrow})
		if err != nil {
			b.Fatal(err)
		}
		if err := tb.InsertBatch(keys, nil); err != nil {
			b.Fatal(err)
		}
		for _, q := range []struct {
			name string
			keys []uint64
		}{{"hit", keys}, {"shifted", miss}} {
			b.Run(fmt.Sprintf("narrow=%v/%s", narrow, q.name), func(b *testing.B) {
				for b.Loop() {
					if _, err := tb.LookupBatch(q.keys, out, -1); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(keys)), "ns/key")
			})
		}
	}
}
