package main

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"time"
)

// timing is the result of measure.
type timing struct {
	msAll    []float64     // ms per step of each repeat
	ms       float64       // median of msAll
	iters    int           // steps per repeat
	warmup   time.Duration // time of the warm-up steps
	peak     *float64      // device peak or largest sampled heap in GiB, nil if not measured
	allocMB  *float64      // heap allocated per timed step, MiB
	power    *PowerRecord  // energy and clocks of the timed steps (-power), or nil
	stepsRun int
}

type measureOpts struct {
	warmups, repeats, iters, maxIters int
	minRepeat                         time.Duration
	memSample                         bool
}

// measure runs warmups untimed steps, then repeats repeats of iters steps
// each (iters = 0: enough steps for a repeat to last minRepeat by the
// warm-up's pace, between 1 and maxIters), and reports ms per step. Each
// repeat is timed by the backend's timer (CUDA events on a GPU, the wall
// clock on the host). The memory peak is the device's (reset after the
// warm-up, as the anchor does) or, on the host with memSample, the
// largest sampled Go heap; with a power meter, the energy and clocks of
// the timed repeats come with it.
func measure(step func() error, o measureOpts, be *backend) (timing, error) {
	var t timing
	t0 := time.Now()
	for i := range o.warmups {
		if err := step(); err != nil {
			return t, fmt.Errorf("warm-up %d: %w", i, err)
		}
	}
	if err := be.sync(); err != nil {
		return t, fmt.Errorf("warm-up: %w", err)
	}
	t.warmup = time.Since(t0)
	t.iters = o.iters
	if t.iters <= 0 {
		per := t.warmup / time.Duration(max(o.warmups, 1))
		if o.warmups == 0 {
			s := time.Now()
			if err := step(); err != nil {
				return t, err
			}
			if err := be.sync(); err != nil {
				return t, err
			}
			per = time.Since(s)
		}
		t.iters = 1
		if per > 0 {
			t.iters = int(min(int64(o.maxIters), max(1, int64(o.minRepeat/per)+1)))
		}
	}
	timer, err := be.newTimer()
	if err != nil {
		return t, err
	}
	defer timer.destroy()
	runtime.GC()
	var sampler *heapSampler
	switch {
	case be.peakGB != nil:
		be.resetPeak()
	case o.memSample:
		sampler = startHeapSampler(time.Millisecond)
	}
	defer func() {
		if sampler != nil {
			sampler.stop()
		}
	}()
	alloc0 := readMetric("/gc/heap/allocs:bytes")
	metering := false
	if be.power != nil {
		if err := be.power.start(); err != nil {
			return t, err
		}
		metering = true
		defer func() {
			if metering { // a failed repeat: stop the meter, drop its reading
				_, _ = be.power.stop(0)
			}
		}()
	}
	for r := range o.repeats {
		if err := timer.start(); err != nil {
			return t, fmt.Errorf("repeat %d: %w", r, err)
		}
		for i := range t.iters {
			if err := step(); err != nil {
				return t, fmt.Errorf("repeat %d step %d: %w", r, i, err)
			}
		}
		ms, err := timer.stop()
		if err != nil {
			return t, fmt.Errorf("repeat %d: %w", r, err)
		}
		t.msAll = append(t.msAll, ms/float64(t.iters))
		t.stepsRun += t.iters
	}
	alloc1 := readMetric("/gc/heap/allocs:bytes")
	if metering {
		metering = false
		p, err := be.power.stop(t.stepsRun)
		if err != nil {
			return t, err
		}
		t.power = p
	}
	switch {
	case be.peakGB != nil:
		gb := be.peakGB()
		t.peak = &gb
	case sampler != nil:
		gb := float64(sampler.stop()) / (1 << 30)
		sampler = nil
		t.peak = &gb
	}
	if t.stepsRun > 0 && alloc1 >= alloc0 {
		mb := float64(alloc1-alloc0) / (1 << 20) / float64(t.stepsRun)
		t.allocMB = &mb
	}
	t.ms = medianOf(t.msAll)
	return t, nil
}

// medianOf returns the median (mean of the middle two for an even count).
func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func readMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// heapSampler records the largest Go heap (bytes of heap objects: live and
// not yet swept) seen at a fixed interval.
type heapSampler struct {
	done chan struct{}
	wg   sync.WaitGroup
	peak uint64
}

func startHeapSampler(every time.Duration) *heapSampler {
	h := &heapSampler{done: make(chan struct{})}
	h.peak = readMetric("/memory/classes/heap/objects:bytes")
	h.wg.Go(func() {
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			select {
			case <-h.done:
				return
			case <-tk.C:
				h.peak = max(h.peak, readMetric("/memory/classes/heap/objects:bytes"))
			}
		}
	})
	return h
}

// stop ends sampling and returns the peak in bytes.
func (h *heapSampler) stop() uint64 {
	close(h.done)
	h.wg.Wait()
	return max(h.peak, readMetric("/memory/classes/heap/objects:bytes"))
}
