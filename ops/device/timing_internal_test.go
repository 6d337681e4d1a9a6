package device

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// recTimer records the spans a Device marks and returns them as a timing
// (1 ms of kernel time per span of a non-idle category).
type recTimer struct {
	marks   []string
	running bool
}

func (r *recTimer) startTiming(first string) error {
	r.running, r.marks = true, []string{first}
	return nil
}

func (r *recTimer) markTiming(name string) error {
	if !r.running {
		return errors.New("not running")
	}
	r.marks = append(r.marks, name)
	return nil
}

func (r *recTimer) stopTiming() (DeviceTiming, error) {
	r.running = false
	t := DeviceTiming{Categories: map[string]CategoryTime{}}
	for _, m := range r.marks {
		c := t.Categories[m]
		c.Spans++
		c.SpanMs++
		if m != IdleCategory {
			c.KernelMs++
		}
		t.Categories[m] = c
		t.TotalMs++
	}
	return t, nil
}

func TestDeviceTimingMarksOutermostOperations(t *testing.T) {
	d, err := OpenFake()
	require.NoError(t, err)
	defer d.Close()
	// The fake cannot time kernels.
	require.ErrorIs(t, d.StartDeviceTiming(), ErrUnsupported)
	_, err = d.StopDeviceTiming()
	require.ErrorIs(t, err, ErrUnsupported)

	r := &recTimer{}
	d.timer = r
	require.NoError(t, d.StartDeviceTiming())
	require.ErrorIs(t, d.StartDeviceTiming(), ErrUnsupported)
	require.NoError(t, d.Run("conv", func(NN) error {
		// A cast inside a convolution is convolution time.
		return d.Run("cast", func(NN) error { return nil })
	}))
	require.NoError(t, d.Run("norm", func(NN) error { return nil }))
	boom := errors.New("boom")
	require.ErrorIs(t, d.Run("relu", func(NN) error { return boom }), boom)
	tm, err := d.StopDeviceTiming()
	require.NoError(t, err)
	require.Equal(t, []string{"idle", "conv", "idle", "norm", "idle", "relu", "idle"}, r.marks)
	require.Equal(t, CategoryTime{Spans: 4, KernelMs: 0, SpanMs: 4}, tm.Categories[IdleCategory])
	conv, other := tm.ConvShare()
	require.Equal(t, 1.0, conv)
	require.Equal(t, 6.0, other)
	require.Contains(t, tm.String(), "everything else 6.000 ms (85.7%)")
	// Timing off again: operations mark nothing.
	require.NoError(t, d.Run("norm", func(NN) error { return nil }))
	require.Len(t, r.marks, 7)
}
