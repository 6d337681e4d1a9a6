package unet

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/flexgemm-go/flexgemm/examples/unet/internal/scenes"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// Prepare builds the maps and the occupancy features (all ones) of a batch
// of scenes in a grid³ volume. For a model placed on a device that builds
// kernel maps (device.Device.BuildsMaps) it computes only the coordinates
// of every level: the training or evaluation step builds the maps on the
// device.
func (m *Model) Prepare(b *scenes.Batch, gridSize int) (*Sample, error) {
	ext := grid.Extent{Batch: max(1, len(b.Scenes)), X: gridSize, Y: gridSize, Z: gridSize}
	s := &Sample{Batch: b}
	var err error
	if d := m.Device(); d.BuildsMaps() {
		s.Levels, err = levelsOf(b.Coords, ext, m.Config.Levels)
	} else {
		s.Maps, err = BuildMaps(b.Coords, ext, m.Config.Levels)
	}
	if err != nil {
		return nil, err
	}
	ones := make([]float64, b.N()*m.Config.InChannels)
	for i := range ones {
		ones[i] = 1
	}
	s.X = m.dense(ones, b.N(), m.Config.InChannels)
	return s, nil
}

// DefaultPrefetchWorkers is the number of goroutines Prefetch prepares
// batches on unless PrefetchWorkers says otherwise: min(GOMAXPROCS, 8).
func DefaultPrefetchWorkers() int { return min(runtime.GOMAXPROCS(0), 8) }

// Samples delivers prepared batches in a fixed order, preparing the next
// ones in the background while the caller computes on the current one.
// Kernel maps take memory, so at most workers batches are prepared ahead:
// with the one the caller holds, at most workers+1 are alive. Next and
// Stop may be called from any goroutine.
type Samples struct {
	order []int
	// slots[k % len(slots)] carries the result of order[k]. A worker
	// takes job k only after acquiring a token, and Next returns the token
	// after receiving job k, so at most len(slots) jobs are between taken
	// and received and slot k % len(slots) is empty when job k is sent.
	slots  []chan prepared
	tokens chan struct{}
	stop   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	jobMu sync.Mutex
	job   int // next job to take

	mu       sync.Mutex
	received int  // jobs received by Next
	failed   bool // a job failed: no more samples
}

type prepared struct {
	s   *Sample
	err error
}

// Source returns batch i of a data set. Prefetch may call it from several
// goroutines at once.
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

// PrefetchOption configures Prefetch.
type PrefetchOption func(*prefetchConfig)

type prefetchConfig struct{ workers int }

// PrefetchWorkers sets the number of goroutines preparing batches (values
// below 1 mean 1). Each prepared batch is the same for any number.
func PrefetchWorkers(n int) PrefetchOption {
	return func(c *prefetchConfig) { c.workers = max(1, n) }
}

// Prefetch starts fetching and preparing batches order[0], order[1], … of
// src on DefaultPrefetchWorkers goroutines (see PrefetchWorkers); Next
// delivers them in order. src must be safe for concurrent calls. The first
// error (of src or Prepare) is delivered in its place in the order, and
// every later Next reports that there are no more samples. Call Stop when
// done.
func (m *Model) Prefetch(src Source, order []int, gridSize int, opts ...PrefetchOption) *Samples {
	cfg := prefetchConfig{workers: DefaultPrefetchWorkers()}
	for _, o := range opts {
		o(&cfg)
	}
	w := max(1, min(cfg.workers, len(order)))
	s := &Samples{
		order:  order,
		slots:  make([]chan prepared, w),
		tokens: make(chan struct{}, w),
		stop:   make(chan struct{}),
	}
	for i := range w {
		s.slots[i] = make(chan prepared, 1)
		s.tokens <- struct{}{}
	}
	for range w {
		s.wg.Go(func() {
			for {
				select {
				case <-s.stop:
					return
				case <-s.tokens:
				}
				s.jobMu.Lock()
				k := s.job
				s.job++
				s.jobMu.Unlock()
				if k >= len(order) {
					return
				}
				var p prepared
				if b, err := src(order[k]); err != nil {
					p.err = err
				} else {
					p.s, p.err = m.Prepare(b, gridSize)
				}
				s.slots[k%w] <- p // never blocks: the slot is empty
				if p.err != nil {
					// Jobs after k are not delivered; stop taking new ones.
					s.jobMu.Lock()
					s.job = len(order)
					s.jobMu.Unlock()
				}
			}
		})
	}
	return s
}

// Next returns the next prepared sample, waiting for it if needed. After
// the last sample, an error or Stop it returns an error.
func (s *Samples) Next() (*Sample, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed || s.received >= len(s.order) {
		return nil, fmt.Errorf("%w: no more samples", ErrConfig)
	}
	select {
	case <-s.stop:
		return nil, fmt.Errorf("%w: samples stopped", ErrConfig)
	default:
	}
	var p prepared
	select {
	case p = <-s.slots[s.received%len(s.slots)]:
	case <-s.stop:
		return nil, fmt.Errorf("%w: samples stopped", ErrConfig)
	}
	s.received++
	if p.err != nil {
		s.failed = true
		return nil, p.err
	}
	s.tokens <- struct{}{} // never blocks: this job held a token
	return p.s, nil
}

// Stop ends the background preparation and waits for it: batches being
// prepared are finished and dropped. Stop may be called more than once.
func (s *Samples) Stop() {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
}
