package device

import (
	"fmt"
	"sort"
	"strings"
)

// Device timing: where the device's time goes in a training step, measured
// on the device itself. Unlike SetProfiling, which waits for the device
// around every operation and so adds launch and wait latency to every
// category, device timing never waits: the backend records markers on its
// stream where each operation begins and ends, and times every kernel.
// The stream time between the end of one operation and the beginning of
// the next is the category "idle": the device waited for the host
// (Gorgonia's tape machine, graph building, Go code between steps).

// IdleCategory names the device time between operations.
const IdleCategory = "idle"

// CategoryTime is the device time of one category of operations.
type CategoryTime struct {
	// Spans is the number of marked spans (operations, or gaps for idle).
	Spans int
	// KernelMs is the summed device time of the category's kernels.
	KernelMs float64
	// SpanMs is the stream time of the category's spans: kernels plus the
	// device's idle time inside them (host work inside an operation,
	// copies, memsets).
	SpanMs float64
}

// DeviceTiming is the result of StartDeviceTiming … StopDeviceTiming.
type DeviceTiming struct {
	// TotalMs is the stream time from start to stop.
	TotalMs float64
	// Categories holds the time per category ("conv", "norm", …, and
	// IdleCategory).
	Categories map[string]CategoryTime
}

// deviceTimer is implemented by backends that time their kernels on the
// device (the CUDA backend): start begins a timing whose first span is
// named first, mark begins a new span, stop waits for the device once and
// returns the times summed per span name.
type deviceTimer interface {
	startTiming(first string) error
	markTiming(name string) error
	stopTiming() (DeviceTiming, error)
}

// withTimer sets the backend's device timer (OpenCUDA).
func withTimer(t deviceTimer) Option {
	return func(d *Device) error { d.timer = t; return nil }
}

// StartDeviceTiming begins timing every operation on the device by
// category, without waiting for the device (see DeviceTiming). Backends
// that cannot time kernels on the device (the fake, the host) return
// ErrUnsupported.
func (d *Device) StartDeviceTiming() error {
	if err := d.check(); err != nil {
		return err
	}
	if d.timer == nil {
		return fmt.Errorf("%w: device timing on %s (its backend does not time kernels)", ErrUnsupported, d.name)
	}
	if d.timing.Load() {
		return fmt.Errorf("%w: StartDeviceTiming twice", ErrUnsupported)
	}
	if err := d.timer.startTiming(IdleCategory); err != nil {
		return d.wrap("device timing", err)
	}
	d.timing.Store(true)
	return nil
}

// StopDeviceTiming ends the timing begun by StartDeviceTiming, waits for
// the device and returns the time per category.
func (d *Device) StopDeviceTiming() (DeviceTiming, error) {
	if d.timer == nil || !d.timing.Load() {
		return DeviceTiming{}, fmt.Errorf("%w: StopDeviceTiming without StartDeviceTiming", ErrUnsupported)
	}
	d.timing.Store(false)
	t, err := d.timer.stopTiming()
	return t, d.wrap("device timing", err)
}

// ConvShare returns the convolution kernels' share of the stream time
// and the time of everything else (other kernels, idle time inside
// operations and between them), in milliseconds.
func (t DeviceTiming) ConvShare() (convMs, elseMs float64) {
	convMs = t.Categories["conv"].KernelMs
	return convMs, t.TotalMs - convMs
}

// String renders the timing as one line per category (largest stream
// time first) and a summary: conv kernels vs everything else.
func (t DeviceTiming) String() string {
	keys := make([]string, 0, len(t.Categories))
	for k := range t.Categories {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := t.Categories[keys[i]], t.Categories[keys[j]]
		if a.SpanMs != b.SpanMs {
			return a.SpanMs > b.SpanMs
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %6s %10s %10s\n", "category", "spans", "kernel ms", "stream ms")
	for _, k := range keys {
		c := t.Categories[k]
		fmt.Fprintf(&b, "%-8s %6d %10.3f %10.3f\n", k, c.Spans, c.KernelMs, c.SpanMs)
	}
	conv, other := t.ConvShare()
	pct := 0.0
	if t.TotalMs > 0 {
		pct = 100 * other / t.TotalMs
	}
	fmt.Fprintf(&b, "stream %.3f ms: conv kernels %.3f ms, everything else %.3f ms (%.1f%%)\n", t.TotalMs, conv, other, pct)
	return b.String()
}
