package unet

import (
	"fmt"
	"testing"

	"github.com/flexgemm-go/flexgemm/examples/unet/internal/scenes"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// prepareCases are the data configurations of the example: the default
// (grid 32, batch 4) and the GPU profile (grid 64, batch 16).
var prepareCases = []struct{ grid, batch int }{{32, 4}, {64, 16}}

// BenchmarkPrepare splits the host cost of one batch into its parts: scene
// generation, each map build of a 3-level network, and the whole of
// MakeBatch + Prepare.
func BenchmarkPrepare(b *testing.B) {
	for _, c := range prepareCases {
		scfg := scenes.Config{Grid: c.grid, MinShapes: 2, MaxShapes: 4, Seed: 1}
		m, err := New(DefaultConfig(scenes.NumClasses), 1)
		if err != nil {
			b.Fatal(err)
		}
		batch, err := scenes.MakeBatch(scfg, scenes.Train, 0, c.batch)
		if err != nil {
			b.Fatal(err)
		}
		ext := grid.Extent{Batch: c.batch, X: c.grid, Y: c.grid, Z: c.grid}
		maps, err := BuildMaps(batch.Coords, ext, m.Config.Levels)
		if err != nil {
			b.Fatal(err)
		}
		name := fmt.Sprintf("grid=%d/batch=%d", c.grid, c.batch)
		run := func(part string, f func() error) {
			b.Run(name+"/"+part, func(b *testing.B) {
				for b.Loop() {
					if err := f(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(batch.N()), "voxels")
			})
		}
		run("scenes", func() error {
			_, err := scenes.MakeBatch(scfg, scenes.Train, 0, c.batch)
			return err
		})
		run("head", func() error {
			_, err := kmap.NewSubmanifold(batch.Coords, ext, [3]int{1, 1, 1}, [3]int{1, 1, 1})
			return err
		})
		for l := range m.Config.Levels {
			coords, e := batch.Coords, ext
			if l > 0 {
				coords, e = maps.Down[l].OutCoords, maps.Down[l].Out
				in, ie := batch.Coords, ext
				if l > 1 {
					in, ie = maps.Down[l-1].OutCoords, maps.Down[l-1].Out
				}
				run(fmt.Sprintf("down%d", l), func() error {
					_, err := kmap.NewStrided(in, ie, grid.Cube(2, 2, 0, 1), nil)
					return err
				})
				run(fmt.Sprintf("up%d", l-1), func() error {
					_, err := kmap.NewInverse(maps.Down[l])
					return err
				})
			}
			run(fmt.Sprintf("sub%d", l), func() error {
				_, err := kmap.NewSubmanifold(coords, e, [3]int{3, 3, 3}, [3]int{1, 1, 1})
				return err
			})
		}
		run("maps", func() error {
			_, err := BuildMaps(batch.Coords, ext, m.Config.Levels)
			return err
		})
		run("prepare", func() error {
			_, err := m.Prepare(batch, c.grid)
			return err
		})
		run("total", func() error {
			bt, err := scenes.MakeBatch(scfg, scenes.Train, 0, c.batch)
			if err == nil {
				_, err = m.Prepare(bt, c.grid)
			}
			return err
		})
	}
}

// BenchmarkPrefetch measures the throughput of the data pipeline (scene
// generation and Prepare behind Prefetch) with one worker and with the
// default number, reported as ms/batch over runs of 8 batches.
func BenchmarkPrefetch(b *testing.B) {
	const batches = 8
	for _, c := range prepareCases {
		scfg := scenes.Config{Grid: c.grid, MinShapes: 2, MaxShapes: 4, Seed: 1}
		m, err := New(DefaultConfig(scenes.NumClasses), 1)
		if err != nil {
			b.Fatal(err)
		}
		src := func(i int) (*scenes.Batch, error) { return scenes.MakeBatch(scfg, scenes.Train, i, c.batch) }
		order := make([]int, batches)
		for i := range order {
			order[i] = i
		}
		for _, w := range []int{1, DefaultPrefetchWorkers()} {
			b.Run(fmt.Sprintf("grid=%d/batch=%d/workers=%d", c.grid, c.batch, w), func(b *testing.B) {
				for b.Loop() {
					p := m.Prefetch(src, order, c.grid, PrefetchWorkers(w))
					for range order {
						if _, err := p.Next(); err != nil {
							b.Fatal(err)
						}
					}
					p.Stop()
				}
				b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*batches), "ms/batch")
			})
		}
	}
}
