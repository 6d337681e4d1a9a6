package unet

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/examples/unet/internal/scenes"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// Prepare builds the maps and the occupancy features (all ones) of a batch
// of scenes in a grid³ volume.
func (m *Model) Prepare(b *scenes.Batch, gridSize int) (*Sample, error) {
	ext := grid.Extent{Batch: max(1, len(b.Scenes)), X: gridSize, Y: gridSize, Z: gridSize}
	maps, err := BuildMaps(b.Coords, ext, m.Config.Levels)
	if err != nil {
		return nil, err
	}
	ones := make([]float64, b.N()*m.Config.InChannels)
	for i := range ones {
		ones[i] = 1
	}
	return &Sample{Batch: b, Maps: maps, X: m.dense(ones, b.N(), m.Config.InChannels)}, nil
}

// Samples delivers prepared batches in a fixed order, preparing the next
// one in the background while the caller computes on the current one.
// Kernel maps take memory, so only one batch is prepared ahead.
type Samples struct {
	ch   chan prepared
	stop chan struct{}
	done chan struct{}
}

type prepared struct {
	s   *Sample
	err error
}

// Source returns batch i of a data set.
type Source func(i int) (*scenes.Batch, error)

// FromSlice serves the batches of a slice.
func FromSlice(batches []*scenes.Batch) Source {
	return func(i int) (*scenes.Batch, error) {
		if i < 0 || i >= len(batches) {
			return nil, fmt.Errorf("%w: batch %d of %d", ErrConfig, i, len(batches))
		}
		return batches[i], nil
	}
}

// Prefetch starts fetching and preparing batches order[0], order[1], … of
// src. Call Stop when done.
func (m *Model) Prefetch(src Source, order []int, gridSize int) *Samples {
	s := &Samples{ch: make(chan prepared, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(s.ch)
		for _, i := range order {
			var p prepared
			b, err := src(i)
			if err != nil {
				p.err = err
			} else {
				p.s, p.err = m.Prepare(b, gridSize)
			}
			select {
			case s.ch <- p:
			case <-s.stop:
				return
			}
			if p.err != nil {
				return
			}
		}
	}()
	return s
}

// Next returns the next prepared sample.
func (s *Samples) Next() (*Sample, error) {
	p, ok := <-s.ch
	if !ok {
		return nil, fmt.Errorf("%w: no more samples", ErrConfig)
	}
	return p.s, p.err
}

// Stop ends the background preparation and waits for it.
func (s *Samples) Stop() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}
