package autotune

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// EnvMode is the environment variable that selects the Mode.
const EnvMode = "FLEXGEMM_AUTOTUNE"

// Mode says whether a Tuner may measure.
type Mode int

// The tuning modes; see the package documentation.
const (
	// On: cached choice, else measure, store and return the best.
	On Mode = iota
	// CacheOnly: cached choice, else the heuristic; never measures.
	CacheOnly
	// Off: always the heuristic; never reads the cache, never measures.
	Off
)

// String returns the mode's name as FLEXGEMM_AUTOTUNE spells it.
func (m Mode) String() string {
	switch m {
	case On:
		return "on"
	case CacheOnly:
		return "cache-only"
	case Off:
		return "off"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses "on", "cache-only" or "off"; "" means On.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "on":
		return On, nil
	case "cache-only":
		return CacheOnly, nil
	case "off":
		return Off, nil
	}
	return 0, fmt.Errorf("%w: %q (want on, cache-only or off)", ErrMode, s)
}

// ModeFromEnv returns the mode named by $FLEXGEMM_AUTOTUNE (On if unset).
func ModeFromEnv() (Mode, error) {
	m, err := ParseMode(os.Getenv(EnvMode))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", EnvMode, err)
	}
	return m, nil
}

// Heuristic picks a candidate without measuring. It must return one of
// cands; it must be a pure function of its arguments so that the
// deterministic modes are deterministic.
type Heuristic func(k Key, cands []Candidate) Candidate

// FirstCandidate is the default heuristic: the first candidate.
func FirstCandidate(_ Key, cands []Candidate) Candidate { return cands[0] }

// Clock tells the time; tests substitute a fake one.
type Clock interface{ Now() time.Time }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// DefaultBudget is the time a Tuner may spend on one untuned key.
const DefaultBudget = 2 * time.Second

// Tuner chooses a candidate for a key: from the cache, by measuring, or by
// a heuristic, depending on its Mode. It is safe for concurrent use; it
// measures one key at a time.
type Tuner struct {
	cache     *Cache
	mode      Mode
	budget    time.Duration
	repeats   int
	heuristic Heuristic
	clock     Clock

	mu sync.Mutex // serialises measurements
}

// TunerOption configures NewTuner.
type TunerOption func(*Tuner)

// WithMode sets the mode, overriding $FLEXGEMM_AUTOTUNE.
func WithMode(m Mode) TunerOption { return func(t *Tuner) { t.mode = m } }

// WithBudget sets the time budget for tuning one key (default
// DefaultBudget). The budget is checked between launches: a launch that
// has started is finished, and at least one candidate is always measured.
func WithBudget(d time.Duration) TunerOption { return func(t *Tuner) { t.budget = d } }

// WithRepeats sets how many timed launches follow the warm-up launch of
// each candidate (default 3); the median is kept.
func WithRepeats(n int) TunerOption { return func(t *Tuner) { t.repeats = n } }

// WithHeuristic sets the heuristic used when not measuring (default
// FirstCandidate). Its pick is also measured first when tuning, so that a
// tight budget still measures it.
func WithHeuristic(h Heuristic) TunerOption { return func(t *Tuner) { t.heuristic = h } }

// WithClock sets the clock the budget is measured with.
func WithClock(c Clock) TunerOption { return func(t *Tuner) { t.clock = c } }

// NewTuner returns a tuner that keeps its choices in cache. Without
// WithMode the mode comes from $FLEXGEMM_AUTOTUNE; an unknown value there
// is an error.
func NewTuner(cache *Cache, opts ...TunerOption) (*Tuner, error) {
	if cache == nil {
		return nil, errors.New("autotune: NewTuner: nil cache (use Open(InMemory()) for none)")
	}
	t := &Tuner{cache: cache, mode: -1, budget: DefaultBudget, repeats: 3, heuristic: FirstCandidate, clock: wallClock{}}
	for _, o := range opts {
		o(t)
	}
	if t.mode == -1 {
		m, err := ModeFromEnv()
		if err != nil {
			return nil, err
		}
		t.mode = m
	}
	switch {
	case t.mode < On || t.mode > Off:
		return nil, fmt.Errorf("%w: %v", ErrMode, t.mode)
	case t.budget < 0:
		return nil, fmt.Errorf("autotune: NewTuner: negative budget %v", t.budget)
	case t.repeats < 1:
		return nil, fmt.Errorf("autotune: NewTuner: %d repeats (want at least 1)", t.repeats)
	case t.heuristic == nil || t.clock == nil:
		return nil, errors.New("autotune: NewTuner: nil heuristic or clock")
	}
	return t, nil
}

// Mode returns the tuner's mode.
func (t *Tuner) Mode() Mode { return t.mode }

// Timing is the measurement of one candidate.
type Timing struct {
	Candidate Candidate
	// Median of Samples.
	Median time.Duration
	// Samples are the timed launches after the warm-up.
	Samples []time.Duration
}

// Failure is a candidate that returned an error; it was skipped.
type Failure struct {
	Candidate Candidate
	Err       error
}

// Result reports how Choose decided.
type Result struct {
	// Choice is the chosen candidate.
	Choice Choice
	// Source says where the choice came from.
	Source Source
	// Timings lists the candidates measured, in measurement order.
	Timings []Timing
	// Failures lists the candidates that failed, in order.
	Failures []Failure
	// OverBudget says that the budget ran out before every candidate had
	// been measured with every repeat.
	OverBudget bool
	// StoreErr is the error of writing the choice to the cache file, if
	// any; the choice is remembered in memory regardless.
	StoreErr error
}

// Choose returns the candidate to run for k.
//
// A cached choice that is still among cands is returned as is (modes On and
// CacheOnly). Otherwise, in mode On, each candidate is launched once to
// warm up and then timed Repeats times through run, which must launch the
// candidate (already compiled) and return the time of one launch; the
// heuristic's pick goes first. Measuring stops once the budget has passed
// (the best candidate measured so far is kept). Candidates whose run
// returns an error are skipped and listed in Result.Failures. The fastest
// median (ties: the earlier candidate; stored as at least 1 ns) is stored
// in the cache and returned; if every candidate fails, the error wraps
// ErrAllFailed and every candidate's error, and nothing is stored. In modes CacheOnly (on a
// miss) and Off, the heuristic's pick is returned and run is never called.
func (t *Tuner) Choose(k Key, cands []Candidate, run func(Candidate) (time.Duration, error)) (Result, error) {
	if err := k.Validate(); err != nil {
		return Result{}, err
	}
	cands, err := dedupe(cands)
	if err != nil {
		return Result{}, err
	}
	if t.mode != Off {
		if r, ok := t.cached(k, cands); ok {
			return r, nil
		}
	}
	h := t.heuristic(k, cands)
	if !slices.Contains(cands, h) {
		return Result{}, fmt.Errorf("%w: %v is not among the %d candidates for %v", ErrHeuristic, h, len(cands), k)
	}
	if t.mode != On {
		return Result{Choice: Choice{Candidate: h, Heuristic: true, Total: len(cands)}, Source: FromHeuristic}, nil
	}
	if run == nil {
		return Result{}, fmt.Errorf("%w: nil run function in mode on", ErrCandidate)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// Another goroutine may have tuned k while this one waited.
	if r, ok := t.cached(k, cands); ok {
		return r, nil
	}
	order := append([]Candidate{h}, slices.DeleteFunc(slices.Clone(cands), func(c Candidate) bool { return c == h })...)
	r := t.measure(order, run)
	if len(r.Timings) == 0 {
		errs := make([]error, 0, len(r.Failures))
		for _, f := range r.Failures {
			errs = append(errs, fmt.Errorf("%v: %w", f.Candidate, f.Err))
		}
		return r, fmt.Errorf("%w for %v: %w", ErrAllFailed, k, errors.Join(errs...))
	}
	best := r.Timings[0]
	for _, tm := range r.Timings[1:] {
		if tm.Median < best.Median {
			best = tm
		}
	}
	r.Choice = Choice{Candidate: best.Candidate, Time: max(best.Median, 1), Tried: len(r.Timings) + len(r.Failures), Total: len(cands)}
	r.Source = FromMeasurement
	r.StoreErr = t.cache.Store(k, r.Choice)
	if r.StoreErr != nil {
		t.cache.warn(fmt.Errorf("storing the choice for %v: %w", k, r.StoreErr))
	}
	return r, nil
}

func (t *Tuner) cached(k Key, cands []Candidate) (Result, bool) {
	ch, src, ok := t.cache.Lookup(k)
	if !ok {
		return Result{}, false
	}
	if !slices.Contains(cands, ch.Candidate) {
		t.cache.warn(fmt.Errorf("%w: the %v choice %v for %v is no longer a candidate; ignoring it", ErrEntry, src, ch.Candidate, k))
		return Result{}, false
	}
	return Result{Choice: ch, Source: src}, true
}

// measure times the candidates in order within the budget.
func (t *Tuner) measure(order []Candidate, run func(Candidate) (time.Duration, error)) Result {
	var r Result
	start := t.clock.Now()
	over := func() bool { return t.clock.Now().Sub(start) >= t.budget }
	for _, c := range order {
		if len(r.Timings) > 0 && over() {
			r.OverBudget = true
			break
		}
		if _, err := run(c); err != nil { // warm-up
			r.Failures = append(r.Failures, Failure{c, err})
			continue
		}
		var samples []time.Duration
		var err error
		for rep := 0; rep < t.repeats; rep++ {
			if rep > 0 && over() {
				r.OverBudget = true
				break
			}
			var d time.Duration
			if d, err = run(c); err == nil && d < 0 {
				err = fmt.Errorf("negative time %v", d)
			}
			if err != nil {
				break
			}
			samples = append(samples, d)
		}
		if err != nil {
			r.Failures = append(r.Failures, Failure{c, err})
			continue
		}
		r.Timings = append(r.Timings, Timing{Candidate: c, Median: median(samples), Samples: samples})
	}
	return r
}

// median returns the middle sample (the mean of the two middle ones for an
// even count).
func median(s []time.Duration) time.Duration {
	s = slices.Clone(s)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return s[n/2-1] + (s[n/2]-s[n/2-1])/2
}

func dedupe(cands []Candidate) ([]Candidate, error) {
	if len(cands) == 0 {
		return nil, fmt.Errorf("%w: no candidates", ErrCandidate)
	}
	out := make([]Candidate, 0, len(cands))
	for _, c := range cands {
		if err := c.validate(); err != nil {
			return nil, err
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}
