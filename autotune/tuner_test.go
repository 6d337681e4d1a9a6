package autotune

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock advances only when a fake launch runs.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// fakeRunner launches candidates on a fake clock: each launch of c takes
// times[c][i] for its i-th launch (the last value repeats), or fails with
// fail[c] at launch number failAt[c].
type fakeRunner struct {
	clock  *fakeClock
	times  map[Candidate][]time.Duration
	fail   map[Candidate]error
	failAt map[Candidate]int
	calls  []Candidate
}

func (f *fakeRunner) run(c Candidate) (time.Duration, error) {
	n := 0
	for _, p := range f.calls {
		if p == c {
			n++
		}
	}
	f.calls = append(f.calls, c)
	if err, ok := f.fail[c]; ok && n >= f.failAt[c] {
		f.clock.now = f.clock.now.Add(time.Millisecond)
		return 0, err
	}
	ts := f.times[c]
	d := ts[min(n, len(ts)-1)]
	f.clock.now = f.clock.now.Add(d)
	return d, nil
}

func (f *fakeRunner) count(c Candidate) int {
	n := 0
	for _, p := range f.calls {
		if p == c {
			n++
		}
	}
	return n
}

var (
	cA = Candidate{Algorithm: "implicit_gemm", Tile: "b64x64"}
	cB = Candidate{Algorithm: "masked_implicit_gemm", Tile: "b128x64"}
	cC = Candidate{Algorithm: "masked_implicit_gemm_splitk", Tile: "b64x128", SplitK: 4}
	cD = Candidate{Algorithm: "explicit_gemm"}
)

func ms(v ...float64) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x * float64(time.Millisecond))
	}
	return out
}

func newTestTuner(t *testing.T, c *Cache, opts ...TunerOption) (*Tuner, *fakeClock) {
	t.Helper()
	clk := &fakeClock{now: time.Unix(1000, 0)}
	tu, err := NewTuner(c, append([]TunerOption{WithMode(On), WithClock(clk)}, opts...)...)
	require.NoError(t, err)
	return tu, clk
}

func TestTunerPicksFastestMedian(t *testing.T) {
	c, w := openTest(t, filepath.Join(t.TempDir(), "a.json"))
	tu, clk := newTestTuner(t, c)
	f := &fakeRunner{clock: clk, times: map[Candidate][]time.Duration{
		// warm-up, then 3 timed launches; medians A=5, B=3 (one outlier), C=4, D=6
		cA: ms(50, 5, 5, 5),
		cB: ms(50, 3, 90, 2.5),
		cC: ms(50, 4, 4, 4),
		cD: ms(50, 6, 7, 5),
	}}
	r, err := tu.Choose(testKey(), []Candidate{cA, cB, cC, cD, cA}, f.run)
	require.NoError(t, err)
	require.Equal(t, FromMeasurement, r.Source)
	require.Equal(t, cB, r.Choice.Candidate)
	require.Equal(t, 3*time.Millisecond, r.Choice.Time)
	require.Equal(t, 4, r.Choice.Tried)
	require.Equal(t, 4, r.Choice.Total, "duplicates removed")
	require.False(t, r.OverBudget)
	require.Empty(t, r.Failures)
	require.NoError(t, r.StoreErr)
	require.Len(t, r.Timings, 4)
	require.Equal(t, ms(3, 90, 2.5), r.Timings[1].Samples)
	for _, c := range []Candidate{cA, cB, cC, cD} {
		require.Equal(t, 4, f.count(c), "one warm-up and 3 repeats of %v", c)
	}
	require.Equal(t, cA, f.calls[0], "the heuristic's pick (first) is measured first")

	// Stored: the next call is a cache hit and launches nothing.
	got, src, ok := c.Lookup(testKey())
	require.True(t, ok)
	require.Equal(t, FromCache, src)
	require.Equal(t, r.Choice, got)
	r2, err := tu.Choose(testKey(), []Candidate{cA, cB, cC, cD}, func(Candidate) (time.Duration, error) {
		t.Fatal("a cached key must not be measured")
		return 0, nil
	})
	require.NoError(t, err)
	require.Equal(t, FromCache, r2.Source)
	require.Equal(t, cB, r2.Choice.Candidate)
	require.Equal(t, 0, w.len())
}

func TestTunerBudget(t *testing.T) {
	// Each launch takes 30 ms of fake time and the budget is 100 ms: the
	// first candidate needs warm-up + 3 repeats = 120 ms, so tuning stops
	// after it, with the heuristic's pick measured.
	c, _ := openTest(t, "")
	heur := func(Key, []Candidate) Candidate { return cC }
	tu, clk := newTestTuner(t, c, WithBudget(100*time.Millisecond), WithHeuristic(heur))
	f := &fakeRunner{clock: clk, times: map[Candidate][]time.Duration{cA: ms(30), cB: ms(30), cC: ms(30), cD: ms(1)}}
	r, err := tu.Choose(testKey(), []Candidate{cA, cB, cC, cD}, f.run)
	require.NoError(t, err)
	require.True(t, r.OverBudget)
	require.Equal(t, cC, r.Choice.Candidate)
	require.Equal(t, []Candidate{cC, cC, cC, cC}, f.calls)
	require.Equal(t, 1, r.Choice.Tried)
	require.Equal(t, 4, r.Choice.Total)
	require.Equal(t, 120*time.Millisecond, clk.now.Sub(time.Unix(1000, 0)))

	// The budget also cuts repeats short: 70 ms budget stops cC after the
	// warm-up, 1st and 2nd repeats (90 ms); the median of 2 samples is kept.
	c2, _ := openTest(t, "")
	tu2, clk2 := newTestTuner(t, c2, WithBudget(70*time.Millisecond), WithHeuristic(heur))
	f2 := &fakeRunner{clock: clk2, times: map[Candidate][]time.Duration{cC: ms(30, 20, 40)}}
	r2, err := tu2.Choose(testKey(), []Candidate{cA, cB, cC, cD}, f2.run)
	require.NoError(t, err)
	require.True(t, r2.OverBudget)
	require.Equal(t, []Candidate{cC, cC, cC}, f2.calls)
	require.Equal(t, ms(20, 40), r2.Timings[0].Samples)
	require.Equal(t, 30*time.Millisecond, r2.Choice.Time)

	// A zero budget still measures one candidate once.
	c3, _ := openTest(t, "")
	tu3, clk3 := newTestTuner(t, c3, WithBudget(0))
	f3 := &fakeRunner{clock: clk3, times: map[Candidate][]time.Duration{cA: ms(1)}}
	r3, err := tu3.Choose(testKey(), []Candidate{cA, cB}, f3.run)
	require.NoError(t, err)
	require.Equal(t, cA, r3.Choice.Candidate)
	require.Equal(t, 2, f3.count(cA))
	require.Equal(t, 0, f3.count(cB))

	// Within a large budget, with repeats 5, every candidate is measured.
	c4, _ := openTest(t, "")
	tu4, clk4 := newTestTuner(t, c4, WithBudget(time.Hour), WithRepeats(5))
	f4 := &fakeRunner{clock: clk4, times: map[Candidate][]time.Duration{cA: ms(3), cB: ms(2), cC: ms(1), cD: ms(4)}}
	r4, err := tu4.Choose(testKey(), []Candidate{cA, cB, cC, cD}, f4.run)
	require.NoError(t, err)
	require.False(t, r4.OverBudget)
	require.Equal(t, cC, r4.Choice.Candidate)
	require.Len(t, f4.calls, 4*6)
}

func TestTunerSkipsFailures(t *testing.T) {
	c, w := openTest(t, "")
	tu, clk := newTestTuner(t, c)
	errShared := errors.New("too much shared memory")
	errLaunch := errors.New("launch failed")
	f := &fakeRunner{clock: clk,
		times:  map[Candidate][]time.Duration{cA: ms(9), cB: ms(1), cC: ms(5), cD: ms(2)},
		fail:   map[Candidate]error{cB: errShared, cD: errLaunch},
		failAt: map[Candidate]int{cB: 0, cD: 2}, // cB fails its warm-up, cD its second repeat
	}
	r, err := tu.Choose(testKey(), []Candidate{cA, cB, cC, cD}, f.run)
	require.NoError(t, err)
	require.Equal(t, cC, r.Choice.Candidate)
	require.Len(t, r.Failures, 2)
	require.Equal(t, cB, r.Failures[0].Candidate)
	require.ErrorIs(t, r.Failures[0].Err, errShared)
	require.Equal(t, cD, r.Failures[1].Candidate)
	require.ErrorIs(t, r.Failures[1].Err, errLaunch)
	require.Equal(t, 1, f.count(cB))
	require.Equal(t, 3, f.count(cD))
	require.Equal(t, 4, r.Choice.Tried)
	require.Equal(t, 0, w.len())
}

func TestTunerAllFail(t *testing.T) {
	c, _ := openTest(t, "")
	tu, _ := newTestTuner(t, c)
	e1, e2 := errors.New("boom 1"), errors.New("boom 2")
	r, err := tu.Choose(testKey(), []Candidate{cA, cB}, func(c Candidate) (time.Duration, error) {
		if c == cA {
			return 0, e1
		}
		return 0, e2
	})
	require.ErrorIs(t, err, ErrAllFailed)
	require.ErrorIs(t, err, e1)
	require.ErrorIs(t, err, e2)
	require.Len(t, r.Failures, 2)
	_, _, ok := c.Lookup(testKey())
	require.False(t, ok, "nothing stored")

	// A negative time is a failure too.
	_, err = tu.Choose(testKey(), []Candidate{cA}, func(Candidate) (time.Duration, error) { return -1, nil })
	require.ErrorIs(t, err, ErrAllFailed)
}

func TestTunerModes(t *testing.T) {
	never := func(Candidate) (time.Duration, error) {
		t.Fatal("deterministic modes must not measure")
		return 0, nil
	}
	heur := func(k Key, cands []Candidate) Candidate {
		if k.Ci >= 128 {
			return cands[len(cands)-1]
		}
		return cands[0]
	}
	cands := []Candidate{cA, cB, cC}
	cached := testKey()
	c, _ := openTest(t, "")
	require.NoError(t, c.Store(cached, measured("x", 1)))
	require.NoError(t, c.Store(cached, Choice{Candidate: cB, Time: time.Millisecond}))
	miss := testKey()
	miss.Ci = 128

	for _, tc := range []struct {
		mode       Mode
		key        Key
		want       Candidate
		wantSource Source
	}{
		{CacheOnly, cached, cB, FromCache},
		{CacheOnly, miss, cC, FromHeuristic},
		{Off, cached, cA, FromHeuristic},
		{Off, miss, cC, FromHeuristic},
	} {
		t.Run(fmt.Sprintf("%v/%d", tc.mode, tc.key.Ci), func(t *testing.T) {
			tu, _ := newTestTuner(t, c, WithMode(tc.mode), WithHeuristic(heur))
			require.Equal(t, tc.mode, tu.Mode())
			for range 3 { // the same answer every time
				r, err := tu.Choose(tc.key, cands, never)
				require.NoError(t, err)
				require.Equal(t, tc.want, r.Choice.Candidate)
				require.Equal(t, tc.wantSource, r.Source)
				require.Equal(t, tc.wantSource == FromHeuristic, r.Choice.Heuristic)
			}
			_, _, ok := c.Lookup(miss)
			require.False(t, ok, "heuristic picks are not stored")
		})
	}
}

func TestTunerModeFromEnv(t *testing.T) {
	c, _ := openTest(t, "")
	for _, tc := range []struct {
		env  string
		want Mode
	}{{"", On}, {"on", On}, {"cache-only", CacheOnly}, {"off", Off}} {
		t.Setenv(EnvMode, tc.env)
		tu, err := NewTuner(c)
		require.NoError(t, err)
		require.Equal(t, tc.want, tu.Mode())
		tu, err = NewTuner(c, WithMode(On))
		require.NoError(t, err)
		require.Equal(t, On, tu.Mode(), "the option overrides the environment")
	}
	t.Setenv(EnvMode, "sometimes")
	_, err := NewTuner(c)
	require.ErrorIs(t, err, ErrMode)
	_, err = ParseMode("ON")
	require.ErrorIs(t, err, ErrMode)
}

func TestTunerStaleCachedChoice(t *testing.T) {
	// A cached candidate that is no longer offered is re-tuned, with a
	// warning.
	c, w := openTest(t, "")
	require.NoError(t, c.Store(testKey(), Choice{Candidate: Candidate{Algorithm: "removed_kernel"}, Time: 1}))
	tu, clk := newTestTuner(t, c)
	f := &fakeRunner{clock: clk, times: map[Candidate][]time.Duration{cA: ms(2), cB: ms(1)}}
	r, err := tu.Choose(testKey(), []Candidate{cA, cB}, f.run)
	require.NoError(t, err)
	require.Equal(t, FromMeasurement, r.Source)
	require.Equal(t, cB, r.Choice.Candidate)
	require.True(t, w.is(ErrEntry))
}

func TestTunerBadInput(t *testing.T) {
	c, _ := openTest(t, "")
	tu, _ := newTestTuner(t, c)
	ok := func(Candidate) (time.Duration, error) { return 1, nil }
	bad := testKey()
	bad.DType = "fp8"
	_, err := tu.Choose(bad, []Candidate{cA}, ok)
	require.ErrorIs(t, err, ErrKey)
	_, err = tu.Choose(testKey(), nil, ok)
	require.ErrorIs(t, err, ErrCandidate)
	_, err = tu.Choose(testKey(), []Candidate{{}}, ok)
	require.ErrorIs(t, err, ErrCandidate)
	_, err = tu.Choose(testKey(), []Candidate{{Algorithm: "a", SplitK: -2}}, ok)
	require.ErrorIs(t, err, ErrCandidate)
	_, err = tu.Choose(testKey(), []Candidate{cA}, nil)
	require.ErrorIs(t, err, ErrCandidate)
	tuH, _ := newTestTuner(t, c, WithHeuristic(func(Key, []Candidate) Candidate { return cD }))
	_, err = tuH.Choose(testKey(), []Candidate{cA}, ok)
	require.ErrorIs(t, err, ErrHeuristic)

	_, err = NewTuner(nil)
	require.Error(t, err)
	_, err = NewTuner(c, WithMode(On), WithRepeats(0))
	require.Error(t, err)
	_, err = NewTuner(c, WithMode(On), WithBudget(-time.Second))
	require.Error(t, err)
	_, err = NewTuner(c, WithMode(Mode(7)))
	require.ErrorIs(t, err, ErrMode)
}

func TestTunerEmptyProblem(t *testing.T) {
	// N = 0 has its own bucket and tunes like any other key.
	c, _ := openTest(t, filepath.Join(t.TempDir(), "a.json"))
	tu, clk := newTestTuner(t, c)
	k := testKey()
	k.LogN = Bucket(0)
	f := &fakeRunner{clock: clk, times: map[Candidate][]time.Duration{cA: ms(0)}}
	r, err := tu.Choose(k, []Candidate{cA}, f.run)
	require.NoError(t, err)
	require.Equal(t, time.Duration(1), r.Choice.Time, "a zero time is stored as 1 ns")
	require.NoError(t, r.StoreErr)
	got, _, ok := c.Lookup(k)
	require.True(t, ok)
	require.Equal(t, cA, got.Candidate)
}

func TestMedian(t *testing.T) {
	require.Equal(t, 3*time.Millisecond, median(ms(9, 3, 1)))
	require.Equal(t, 2500*time.Microsecond, median(ms(4, 2, 3, 1)))
	require.Equal(t, 7*time.Millisecond, median(ms(7)))
	s := ms(3, 1, 2)
	median(s)
	require.Equal(t, ms(3, 1, 2), s, "input not reordered")
}
