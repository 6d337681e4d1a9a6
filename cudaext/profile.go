//go:build cudaext

package cudaext

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// Profiling: a per-phase breakdown of device time, for performance work.
//
// While a profile runs, every kernel launch of the engine is bracketed by
// two CUDA events on the device stream, and Phase records one more event
// where a caller-named phase begins. StopProfile waits for the device once
// and returns, per phase, the device span (phase mark to next mark), the
// summed kernel time, and so the time the GPU spent on anything else
// inside the phase: idle while the host prepared the next launch or
// waited, memset and copy commands (not bracketed). The events themselves
// add about a microsecond per launch, so profiled steps run a little
// slower than timed ones; use them for where the time goes, not for the
// headline number.

// KernelTime is the device time of one kernel name within a phase.
type KernelTime struct {
	Name     string  // kernel symbol, e.g. spconv_gather_f16_m128n64k32w2x2s4
	Launches int     // launches in the phase
	Ms       float64 // summed device time of those launches
}

// PhaseTime is one phase of a profile.
type PhaseTime struct {
	Name string // as given to Phase
	// SpanMs is the device time from this phase's mark to the next mark
	// (or the end of the profile).
	SpanMs float64
	// KernelMs is the summed device time of the kernels launched in the
	// phase.
	KernelMs float64
	// HostMs is the host wall time from this phase's Phase call to the
	// next (or to StopProfile's start).
	HostMs float64
	// Kernels lists the kernels of the phase, slowest first.
	Kernels []KernelTime
}

// GapMs is SpanMs − KernelMs: device time in the phase not spent in
// kernels (idle between launches, host waits, copies and memsets).
func (p PhaseTime) GapMs() float64 { return p.SpanMs - p.KernelMs }

// Profile is the result of StartProfile … StopProfile.
type Profile struct {
	Phases []PhaseTime
	// TotalMs is the device span from StartProfile to StopProfile.
	TotalMs float64
	// KernelMs is the summed kernel time of every phase.
	KernelMs float64
}

type profLaunch struct {
	phase      int
	name       string
	start, end cuEvent
}

type profMark struct {
	name string
	ev   cuEvent
	host time.Time
}

// profiler is the worker-only state of a running profile.
type profiler struct {
	marks    []profMark
	launches []profLaunch
	spare    []cuEvent
}

func (p *profiler) event() (cuEvent, error) {
	if n := len(p.spare); n > 0 {
		ev := p.spare[n-1]
		p.spare = p.spare[:n-1]
		return ev, nil
	}
	return eventCreate()
}

// mark records a phase mark on the stream. Worker only.
func (d *Device) profMark(name string) error {
	p := d.prof
	ev, err := p.event()
	if err != nil {
		return err
	}
	if err := eventRecord(ev, d.stream); err != nil {
		p.spare = append(p.spare, ev)
		return err
	}
	p.marks = append(p.marks, profMark{name: name, ev: ev, host: time.Now()})
	return nil
}

// profLaunchBegin records the start event of a launch (nil, nil when no
// profile runs). Worker only.
func (d *Device) profLaunchBegin() (*cuEvent, error) {
	p := d.prof
	if p == nil {
		return nil, nil
	}
	ev, err := p.event()
	if err != nil {
		return nil, err
	}
	if err := eventRecord(ev, d.stream); err != nil {
		p.spare = append(p.spare, ev)
		return nil, err
	}
	return &ev, nil
}

// profLaunchEnd records the end event of a launch begun with start.
// Worker only.
func (d *Device) profLaunchEnd(start *cuEvent, name string) error {
	p := d.prof
	if p == nil || start == nil {
		return nil
	}
	ev, err := p.event()
	if err != nil {
		return err
	}
	if err := eventRecord(ev, d.stream); err != nil {
		p.spare = append(p.spare, ev)
		return err
	}
	p.launches = append(p.launches, profLaunch{phase: len(p.marks) - 1, name: name, start: *start, end: ev})
	return nil
}

// ErrProfile reports a profile started twice or stopped without a start.
var ErrProfile = errors.New("cudaext: profile")

// StartProfile begins a profile: from now on every kernel launch is timed
// with CUDA events until StopProfile. name is the first phase.
func (e *Engine) StartProfile(name string) error {
	return e.d.do(func() error {
		if e.d.prof != nil {
			return fmt.Errorf("%w: already running", ErrProfile)
		}
		e.d.prof = &profiler{}
		if err := e.d.profMark(name); err != nil {
			e.d.prof = nil
			return err
		}
		return nil
	})
}

// Phase starts a new phase of the running profile (a no-op without one).
func (e *Engine) Phase(name string) error {
	return e.d.do(func() error {
		if e.d.prof == nil {
			return nil
		}
		return e.d.profMark(name)
	})
}

// Profiling reports whether a profile runs.
func (e *Engine) Profiling() bool {
	on := false
	_ = e.d.do(func() error { on = e.d.prof != nil; return nil })
	return on
}

// StopProfile ends the profile, waits for the device once and returns the
// per-phase breakdown. Phases with the same name are kept apart (in
// order); callers merge them as they like.
func (e *Engine) StopProfile() (Profile, error) {
	var out Profile
	err := e.d.do(func() error {
		d := e.d
		p := d.prof
		if p == nil {
			return fmt.Errorf("%w: not running", ErrProfile)
		}
		d.prof = nil
		defer func() {
			for _, m := range p.marks {
				_ = eventDestroy(m.ev)
			}
			for _, l := range p.launches {
				_ = eventDestroy(l.start)
				_ = eventDestroy(l.end)
			}
			for _, ev := range p.spare {
				_ = eventDestroy(ev)
			}
		}()
		endHost := time.Now()
		end, err := eventCreate()
		if err != nil {
			return err
		}
		p.spare = append(p.spare, end)
		if err := eventRecord(end, d.stream); err != nil {
			return err
		}
		d.waits.Add(1)
		if err := eventSync(end); err != nil {
			return err
		}
		out.Phases = make([]PhaseTime, len(p.marks))
		for i, m := range p.marks {
			next, nextHost := end, endHost
			if i+1 < len(p.marks) {
				next, nextHost = p.marks[i+1].ev, p.marks[i+1].host
			}
			ms, err := eventElapsed(m.ev, next)
			if err != nil {
				return err
			}
			out.Phases[i] = PhaseTime{Name: m.name, SpanMs: float64(ms), HostMs: float64(nextHost.Sub(m.host).Nanoseconds()) / 1e6}
		}
		total, err := eventElapsed(p.marks[0].ev, end)
		if err != nil {
			return err
		}
		out.TotalMs = float64(total)
		byPhase := make([]map[string]*KernelTime, len(p.marks))
		for _, l := range p.launches {
			ms, err := eventElapsed(l.start, l.end)
			if err != nil {
				return err
			}
			m := byPhase[l.phase]
			if m == nil {
				m = map[string]*KernelTime{}
				byPhase[l.phase] = m
			}
			k := m[l.name]
			if k == nil {
				k = &KernelTime{Name: l.name}
				m[l.name] = k
			}
			k.Launches++
			k.Ms += float64(ms)
			out.Phases[l.phase].KernelMs += float64(ms)
			out.KernelMs += float64(ms)
		}
		for i, m := range byPhase {
			for _, k := range m {
				out.Phases[i].Kernels = append(out.Phases[i].Kernels, *k)
			}
			ks := out.Phases[i].Kernels
			sort.Slice(ks, func(a, b int) bool {
				if ks[a].Ms != ks[b].Ms {
					return ks[a].Ms > ks[b].Ms
				}
				return ks[a].Name < ks[b].Name
			})
		}
		return nil
	})
	return out, err
}
