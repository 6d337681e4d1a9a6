package main

import (
	"bufio"
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// The timeline probe's stamps (cudaext/kernels/gather_ws.cuh, FG_TIMELINE;
// printed by the engine at Close as "fgtl <block> <P|C> <i> <event>
// <cycles>") and what `bench timeline` makes of them: the cycles between
// consecutive stamps of one thread, summed by the pair of events they
// run between.

// timelineEvents names the probe's events: the producer's and the
// consumer's meaning of each.
var timelineEvents = map[byte]map[int]string{
	'P': {0: "stage: before the empty wait", 1: "stage: slot empty", 2: "stage: copies issued and arrived",
		3: "tile: rows and taps read", 4: "tile: neighbour indices loaded",
		5: "tile: before the description's wait", 6: "tile: description slot free", 7: "tile: stored"},
	'C': {0: "stage: before the full wait", 1: "stage: full", 2: "stage: previous group retired",
		5: "tile: before the description's wait", 6: "tile: described", 7: "tile: stored"},
}

// timelineStamp is one stamp of the probe.
type timelineStamp struct {
	block int
	role  byte // 'P' producer thread 0, 'C' consumer warp 0
	i     int  // its index in its thread's row
	event int
	cycle int64
}

// timelineThread names one recorded thread: a block (0 the grid's first, 1
// its middle one) and a role.
type timelineThread struct {
	block int
	role  byte
}

// timelineSpan is what one pair of consecutive events of a thread took.
type timelineSpan struct {
	from, to int
	cycles   []int64
	total    int64 // the sum of cycles
}

// parseTimeline reads the probe's lines from r (other lines are skipped)
// and returns each thread's stamps in row order. A malformed fgtl line is
// an error naming it.
func parseTimeline(r io.Reader) (map[timelineThread][]timelineStamp, error) {
	out := map[timelineThread][]timelineStamp{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "fgtl" {
			continue
		}
		bad := func(why string) error { return fmt.Errorf("timeline line %d %q: %s", line, sc.Text(), why) }
		if len(f) != 6 || (f[2] != "P" && f[2] != "C") {
			return nil, bad("want fgtl <block> <P|C> <i> <event> <cycles>")
		}
		var s timelineStamp
		var err error
		var ev int64
		if s.block, err = strconv.Atoi(f[1]); err != nil {
			return nil, bad("block")
		}
		s.role = f[2][0]
		if s.i, err = strconv.Atoi(f[3]); err != nil {
			return nil, bad("index")
		}
		if ev, err = strconv.ParseInt(f[4], 10, 8); err != nil || ev < 0 || ev > 15 {
			return nil, bad("event")
		}
		s.event = int(ev)
		if s.cycle, err = strconv.ParseInt(f[5], 10, 64); err != nil {
			return nil, bad("cycles")
		}
		k := timelineThread{s.block, s.role}
		out[k] = append(out[k], s)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for k, ss := range out {
		slices.SortStableFunc(ss, func(a, b timelineStamp) int { return a.i - b.i })
		out[k] = ss
	}
	return out, nil
}

// timelineSpans returns the spans of one thread's stamps, largest total
// first, and the cycles from its first stamp to its last.
func timelineSpans(ss []timelineStamp) ([]*timelineSpan, int64) {
	if len(ss) < 2 {
		return nil, 0
	}
	by := map[[2]int]*timelineSpan{}
	var order []*timelineSpan
	for j := 1; j < len(ss); j++ {
		key := [2]int{ss[j-1].event, ss[j].event}
		sp := by[key]
		if sp == nil {
			sp = &timelineSpan{from: key[0], to: key[1]}
			by[key] = sp
			order = append(order, sp)
		}
		c := ss[j].cycle - ss[j-1].cycle
		sp.cycles = append(sp.cycles, c)
		sp.total += c
	}
	slices.SortStableFunc(order, func(a, b *timelineSpan) int { return cmp.Compare(b.total, a.total) })
	return order, ss[len(ss)-1].cycle - ss[0].cycle
}

// writeTimeline prints, per recorded thread, a table of its spans: the
// pair of events, how many, their total cycles and share of the thread's
// span, mean, median and largest.
func writeTimeline(w io.Writer, th map[timelineThread][]timelineStamp) error {
	keys := make([]timelineThread, 0, len(th))
	for k := range th {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b timelineThread) int {
		if a.block != b.block {
			return a.block - b.block
		}
		return int(a.role) - int(b.role)
	})
	role := map[byte]string{'P': "producer thread 0", 'C': "consumer warp 0"}
	for _, k := range keys {
		name := func(e int) string {
			if s, ok := timelineEvents[k.role][e]; ok {
				return s
			}
			return fmt.Sprintf("event %d", e)
		}
		spans, whole := timelineSpans(th[k])
		if _, err := fmt.Fprintf(w, "\nblock %d, %s: %d stamps over %d cycles\n\n| from → to | n | cycles | share | mean | median | max |\n|---|---:|---:|---:|---:|---:|---:|\n",
			k.block, role[k.role], len(th[k]), whole); err != nil {
			return err
		}
		for _, sp := range spans {
			c := slices.Sorted(slices.Values(sp.cycles))
			share := 0.0
			if whole > 0 {
				share = 100 * float64(sp.total) / float64(whole)
			}
			if _, err := fmt.Fprintf(w, "| %s → %s | %d | %d | %.1f %% | %.0f | %d | %d |\n", name(sp.from), name(sp.to), len(c), sp.total, share,
				float64(sp.total)/float64(len(c)), c[len(c)/2], c[len(c)-1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// timelineMain is `bench timeline FILE…`: the probe's stamps in the files
// (a bench run's stderr) as tables of where each recorded thread's cycles
// went.
func timelineMain(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench timeline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./bench timeline stderr.txt …   (the fgtl lines of a run on FG_TIMELINE images: cudaext/kernels/ceiling.sh)")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("timeline: no input files")
	}
	for _, name := range fs.Args() {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		th, err := parseTimeline(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if len(th) == 0 {
			return fmt.Errorf("%s: no fgtl lines (were the FG_TIMELINE images loaded through FLEXGEMM_KERNEL_IMAGE?)", name)
		}
		if _, err := fmt.Fprintf(stdout, "## %s\n", name); err != nil {
			return err
		}
		if err := writeTimeline(stdout, th); err != nil {
			return err
		}
	}
	return nil
}
