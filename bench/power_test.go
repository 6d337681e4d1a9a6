package main

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPowerStatsRecord checks the clock statistics and the mean power
// between the first and last energy-counter updates seen.
func TestPowerStatsRecord(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name    string
		samples []powerSample
		elapsed time.Duration
		steps   int
		want    *PowerRecord
	}{
		{name: "no steps", samples: []powerSample{{0, 5, 1980, false}}, elapsed: ms(10), steps: 0},
		{name: "no samples", elapsed: ms(10), steps: 3},
		{
			// One counter update: clocks only.
			name:    "one update",
			samples: []powerSample{{0, 1000, 1980, false}, {ms(5), 1000, 1980, false}, {ms(10), 1500, 1860, true}},
			elapsed: ms(10), steps: 2,
			want: &PowerRecord{SMMHzMean: 1940, SMMHzMin: 1860, CappedFraction: 1.0 / 3, Samples: 3, IntervalMs: 5},
		},
		{
			// Updates at 10 ms (+0) and 110 ms (+70 J): 700 W; 20 steps in
			// 200 ms: 10 ms a step, 7 J.
			name: "capped half the time",
			samples: []powerSample{{0, 1000, 1980, false}, {ms(10), 2000, 1410, true}, {ms(60), 2000, 1860, true},
				{ms(110), 72000, 1950, false}},
			elapsed: ms(200), steps: 20,
			want: &PowerRecord{PowerWMean: f(700), EnergyJPerStep: f(7), SMMHzMean: 1800, SMMHzMin: 1410,
				CappedFraction: 0.5, Samples: 4, IntervalMs: 5},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s powerStats
			for _, x := range tc.samples {
				s.add(x)
			}
			got := s.record(tc.elapsed, tc.steps, 5*time.Millisecond)
			if tc.want == nil {
				require.Nil(t, got)
				return
			}
			require.NotNil(t, got)
			if tc.want.PowerWMean == nil {
				require.Nil(t, got.PowerWMean)
				require.Nil(t, got.EnergyJPerStep)
			} else {
				require.InDelta(t, *tc.want.PowerWMean, *got.PowerWMean, 1e-9)
				require.InDelta(t, *tc.want.EnergyJPerStep, *got.EnergyJPerStep, 1e-9)
			}
			require.InDelta(t, tc.want.SMMHzMean, got.SMMHzMean, 1e-9)
			require.Equal(t, tc.want.SMMHzMin, got.SMMHzMin)
			require.InDelta(t, tc.want.CappedFraction, got.CappedFraction, 1e-12)
			require.Equal(t, tc.want.Samples, got.Samples)
			require.Equal(t, tc.want.IntervalMs, got.IntervalMs)
		})
	}
}

// TestPowerFlag checks -power's validation: GPU only.
func TestPowerFlag(t *testing.T) {
	_, err := parseRunFlags([]string{"-power"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "-power needs -device cuda")
	o, err := parseRunFlags([]string{"-power", "-device", "cuda"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.True(t, o.power)
	o, err = parseRunFlags([]string{"-device", "cuda"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.False(t, o.power)
}

// fakeMeter is a powerMeter that records how measure drives it.
type fakeMeter struct {
	starts, stops, steps int
}

func (f *fakeMeter) start() error { f.starts++; return nil }
func (f *fakeMeter) stop(steps int) (*PowerRecord, error) {
	f.stops++
	f.steps = steps
	return &PowerRecord{Samples: steps}, nil
}
func (f *fakeMeter) close() {}

// TestMeasurePower checks that measure runs a power meter around exactly
// the timed repeats and hands on its record.
func TestMeasurePower(t *testing.T) {
	be := cpuBackend()
	f := &fakeMeter{}
	be.power = f
	steps := 0
	tm, err := measure(func() error { steps++; return nil }, measureOpts{warmups: 2, repeats: 3, iters: 4}, be)
	require.NoError(t, err)
	require.Equal(t, 2+3*4, steps)
	require.Equal(t, 1, f.starts)
	require.Equal(t, 1, f.stops)
	require.Equal(t, 12, f.steps, "the meter counts the timed steps only")
	require.NotNil(t, tm.power)
	require.Equal(t, 12, tm.power.Samples)

	// A failing step stops the meter too (no sampler left running).
	f = &fakeMeter{}
	be.power = f
	steps = 0
	_, err = measure(func() error {
		steps++
		if steps > 3 {
			return errors.New("boom")
		}
		return nil
	}, measureOpts{warmups: 1, repeats: 3, iters: 4}, be)
	require.ErrorContains(t, err, "boom")
	require.Equal(t, 1, f.starts)
	require.Equal(t, 1, f.stops)
}
