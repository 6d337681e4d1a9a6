package main

import "time"

// PowerRecord is Record.Power: the GPU's energy, board power and SM clock
// over the timed steps of one measurement (-power; read through NVML on
// -device cuda). An H200 caps its board power at 700 W; a step that
// reaches the cap runs at a lower SM clock, so these fields say how much
// of a step's time went to the cap (docs/PERF_NOTES.md, step 19).
type PowerRecord struct {
	// PowerWMean is the mean board power in watts: the increase of the
	// GPU's energy counter between its first and its last update seen in
	// the timed repeats over the time between them. The counter moves in
	// steps tens of milliseconds apart, so this is nil when fewer than two
	// updates fell inside the repeats (short runs: raise -iters).
	PowerWMean *float64 `json:"power_w_mean,omitempty"`
	// EnergyJPerStep is PowerWMean times the repeats' wall time per
	// step, in joules (nil with PowerWMean).
	EnergyJPerStep *float64 `json:"energy_j_per_step,omitempty"`
	// SMMHzMean and SMMHzMin are the mean and lowest sampled SM clock.
	SMMHzMean float64 `json:"sm_mhz_mean"`
	SMMHzMin  float64 `json:"sm_mhz_min"`
	// CappedFraction is the share of samples whose clock-event reasons
	// include the software power cap.
	CappedFraction float64 `json:"power_capped_fraction"`
	// Samples and IntervalMs describe the clock sampling.
	Samples    int     `json:"samples"`
	IntervalMs float64 `json:"interval_ms"`
}

// powerMeter measures a GPU's energy and clocks between start and stop.
type powerMeter interface {
	start() error
	// stop ends the measurement of steps steps.
	stop(steps int) (*PowerRecord, error)
	close()
}

// powerSample is one reading: the time since the meter started, the
// energy counter (millijoules), the SM clock and whether the software
// power cap held it.
type powerSample struct {
	at       time.Duration
	energyMJ uint64
	smMHz    float64
	capped   bool
}

// powerStats accumulates samples: clock statistics, and the first and
// last update of the energy counter seen after the first sample.
type powerStats struct {
	n, capped      int
	sumMHz, minMHz float64
	// e0 is the counter at the first sample; (tA, eA) and (tB, eB) are
	// the first and last samples whose counter differs from the one
	// before them.
	e0, last, eA, eB uint64
	tA, tB           time.Duration
	updates          int
}

func (s *powerStats) add(x powerSample) {
	if s.n == 0 {
		s.e0, s.last, s.minMHz = x.energyMJ, x.energyMJ, x.smMHz
	}
	s.n++
	s.sumMHz += x.smMHz
	s.minMHz = min(s.minMHz, x.smMHz)
	if x.capped {
		s.capped++
	}
	if x.energyMJ != s.last {
		if s.updates == 0 {
			s.tA, s.eA = x.at, x.energyMJ
		}
		s.tB, s.eB = x.at, x.energyMJ
		s.updates++
		s.last = x.energyMJ
	}
}

// record returns the PowerRecord of the samples, taken every interval,
// of a measurement of steps steps over elapsed wall time; nil without
// samples or steps. The mean power needs two counter updates.
func (s powerStats) record(elapsed time.Duration, steps int, interval time.Duration) *PowerRecord {
	if steps <= 0 || elapsed <= 0 || s.n == 0 {
		return nil
	}
	r := &PowerRecord{
		SMMHzMean:      s.sumMHz / float64(s.n),
		SMMHzMin:       s.minMHz,
		CappedFraction: float64(s.capped) / float64(s.n),
		Samples:        s.n,
		IntervalMs:     float64(interval) / float64(time.Millisecond),
	}
	if s.updates >= 2 && s.tB > s.tA && s.eB >= s.eA {
		w := float64(s.eB-s.eA) / 1000 / (s.tB - s.tA).Seconds()
		j := w * elapsed.Seconds() / float64(steps)
		r.PowerWMean, r.EnergyJPerStep = &w, &j
	}
	return r
}
