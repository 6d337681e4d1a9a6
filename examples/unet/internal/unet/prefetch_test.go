package unet

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/examples/unet/internal/scenes"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// requireSameMap checks that two kernel maps have the same tables.
func requireSameMap(t *testing.T, want, got *kmap.Map, what string) {
	t.Helper()
	if want == nil {
		require.Nil(t, got, what)
		return
	}
	require.NotNil(t, got, what)
	require.Equal(t, want.Kind, got.Kind, what)
	require.Equal(t, want.Conv, got.Conv, what)
	require.Equal(t, want.In, got.In, what)
	require.Equal(t, want.Out, got.Out, what)
	require.Equal(t, want.NIn, got.NIn, what)
	require.Equal(t, want.NOut, got.NOut, what)
	require.Equal(t, want.InCoords, got.InCoords, what)
	require.Equal(t, want.OutCoords, got.OutCoords, what)
	require.Equal(t, want.Nbr, got.Nbr, what)
}

// requireSameSample checks that two samples hold the same batch, maps and
// features.
func requireSameSample(t *testing.T, want, got *Sample, what string) {
	t.Helper()
	require.Same(t, want.Batch, got.Batch, what)
	require.Equal(t, want.X.Shape(), got.X.Shape(), what)
	require.Equal(t, want.X.Data(), got.X.Data(), what)
	require.Len(t, got.Maps.Sub, len(want.Maps.Sub), what)
	for l := range want.Maps.Sub {
		requireSameMap(t, want.Maps.Sub[l], got.Maps.Sub[l], fmt.Sprintf("%s sub %d", what, l))
		requireSameMap(t, want.Maps.Down[l], got.Maps.Down[l], fmt.Sprintf("%s down %d", what, l))
	}
	require.Len(t, got.Maps.Up, len(want.Maps.Up), what)
	for l := range want.Maps.Up {
		requireSameMap(t, want.Maps.Up[l], got.Maps.Up[l], fmt.Sprintf("%s up %d", what, l))
	}
	requireSameMap(t, want.Maps.Head, got.Maps.Head, what+" head")
}

// requireNoLeak waits until the number of goroutines is back to base.
func requireNoLeak(t *testing.T, base int) {
	t.Helper()
	// Polled here: require.Eventually runs its condition on goroutines of
	// its own.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), base, "goroutines left running")
}

func prefetchData(t *testing.T, n int) []*scenes.Batch {
	t.Helper()
	ds, err := scenes.NewDataset(scenes.Config{Grid: 16, MinShapes: 1, MaxShapes: 3, Seed: 5}, 2, n, 0)
	require.NoError(t, err)
	return ds.Train
}

// TestPrefetchSameForAnyWorkers checks that any number of workers delivers
// the samples of the sequential preparation, in order (repeated indices
// included), and that the goroutines end once every sample is delivered.
func TestPrefetchSameForAnyWorkers(t *testing.T) {
	m, err := New(DefaultConfig(scenes.NumClasses), 3)
	require.NoError(t, err)
	batches := prefetchData(t, 5)
	order := []int{3, 0, 4, 1, 1, 2, 0, 3}
	want := make([]*Sample, len(order))
	for k, i := range order {
		want[k], err = m.Prepare(batches[i], 16)
		require.NoError(t, err)
	}
	for _, w := range []int{0, 1, 2, 3, 8, 100} {
		base := runtime.NumGoroutine()
		p := m.Prefetch(FromSlice(batches), order, 16, PrefetchWorkers(w))
		for k := range order {
			s, err := p.Next()
			require.NoError(t, err, "workers %d sample %d", w, k)
			requireSameSample(t, want[k], s, fmt.Sprintf("workers %d sample %d", w, k))
		}
		_, err := p.Next()
		require.ErrorIs(t, err, ErrConfig, "exhausted")
		requireNoLeak(t, base) // even before Stop
		p.Stop()
		p.Stop()
	}
	// The default.
	require.Equal(t, min(runtime.GOMAXPROCS(0), 8), DefaultPrefetchWorkers())
	p := m.Prefetch(FromSlice(batches), []int{4}, 16)
	s, err := p.Next()
	require.NoError(t, err)
	requireSameSample(t, want[2], s, "default workers")
	p.Stop()
	// No batches.
	empty := m.Prefetch(FromSlice(batches), nil, 16)
	_, err = empty.Next()
	require.ErrorIs(t, err, ErrConfig)
	empty.Stop()
}

// TestPrefetchBoundedAhead checks that at most workers batches are fetched
// ahead of the caller, and that the workers do run that far ahead.
func TestPrefetchBoundedAhead(t *testing.T) {
	m, err := New(tinyConfig(), 3)
	require.NoError(t, err)
	batches := prefetchData(t, 3)
	order := make([]int, 12)
	for k := range order {
		order[k] = k % len(batches)
	}
	for _, w := range []int{1, 3, 5} {
		var started, running, maxRunning atomic.Int64
		src := func(i int) (*scenes.Batch, error) {
			started.Add(1)
			r := running.Add(1)
			for {
				mx := maxRunning.Load()
				if r <= mx || maxRunning.CompareAndSwap(mx, r) {
					break
				}
			}
			time.Sleep(time.Millisecond)
			running.Add(-1)
			return batches[i], nil
		}
		p := m.Prefetch(src, order, 16, PrefetchWorkers(w))
		for k := range order {
			// Before the caller takes sample k, the workers reach k+w
			// batches and no further.
			ahead := int64(min(len(order), k+w))
			require.Eventually(t, func() bool { return started.Load() == ahead }, 5*time.Second, time.Millisecond,
				"workers %d before sample %d: %d started", w, k, started.Load())
			time.Sleep(2 * time.Millisecond)
			require.Equal(t, ahead, started.Load(), "workers %d before sample %d", w, k)
			_, err := p.Next()
			require.NoError(t, err)
		}
		p.Stop()
		require.LessOrEqual(t, maxRunning.Load(), int64(w))
		if w > 1 {
			require.Greater(t, maxRunning.Load(), int64(1), "workers %d run concurrently", w)
		}
	}
}

// TestPrefetchErrorsInOrder checks that an error of the source or of
// Prepare is delivered in its place, after every earlier sample, and ends
// the sequence.
func TestPrefetchErrorsInOrder(t *testing.T) {
	m, err := New(tinyConfig(), 3)
	require.NoError(t, err)
	batches := prefetchData(t, 3)
	srcErr := errors.New("source failed")
	// Index 7 fails in the source; index 8 gives a batch outside the grid
	// (Prepare fails).
	outside := &scenes.Batch{Coords: []int32{0, 40, 0, 0}, Labels: []int32{0}, Scenes: []*scenes.Scene{{}}}
	src := func(i int) (*scenes.Batch, error) {
		switch i {
		case 7:
			return nil, fmt.Errorf("batch %d: %w", i, srcErr)
		case 8:
			return outside, nil
		}
		return batches[i], nil
	}
	for _, bad := range []int{7, 8} {
		for _, w := range []int{1, 2, 4} {
			base := runtime.NumGoroutine()
			order := []int{0, 1, 2, bad, 0, 1, 2}
			p := m.Prefetch(src, order, 16, PrefetchWorkers(w))
			for k := range 3 {
				s, err := p.Next()
				require.NoError(t, err, "bad %d workers %d sample %d", bad, w, k)
				require.Same(t, batches[k], s.Batch)
			}
			_, err := p.Next()
			require.Error(t, err)
			if bad == 7 {
				require.ErrorIs(t, err, srcErr)
			} else {
				require.NotErrorIs(t, err, srcErr)
			}
			_, err = p.Next()
			require.ErrorIs(t, err, ErrConfig, "no more samples after an error")
			p.Stop()
			requireNoLeak(t, base)
		}
	}
}

// TestPrefetchStop checks that Stop ends every goroutine at any point (no
// sample taken, some taken, workers busy in a slow source), that Next then
// reports an error, and that concurrent Stops are safe.
func TestPrefetchStop(t *testing.T) {
	m, err := New(tinyConfig(), 3)
	require.NoError(t, err)
	batches := prefetchData(t, 3)
	order := []int{0, 1, 2, 0, 1, 2, 0, 1, 2}
	slow := func(i int) (*scenes.Batch, error) {
		time.Sleep(3 * time.Millisecond)
		return batches[i], nil
	}
	for _, w := range []int{1, 3} {
		for _, take := range []int{0, 1, 4} {
			for _, src := range []Source{FromSlice(batches), slow} {
				base := runtime.NumGoroutine()
				p := m.Prefetch(src, order, 16, PrefetchWorkers(w))
				for range take {
					_, err := p.Next()
					require.NoError(t, err)
				}
				var wg sync.WaitGroup
				for range 3 {
					wg.Go(p.Stop)
				}
				wg.Wait()
				_, err := p.Next()
				require.ErrorIs(t, err, ErrConfig, "stopped")
				requireNoLeak(t, base)
			}
		}
	}
}
