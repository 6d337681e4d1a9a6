package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
)

// abCommit is the commit field bench/ab_run.sh gives each record:
// <tag>-<variant>-r<round>, the variant a name without '-'.
var abCommit = regexp.MustCompile(`^(.+)-([A-Za-z0-9_]+)-r([0-9]+)$`)

// abKey is one workload of an A/B run: what every variant measured.
type abKey struct {
	op, mode, dtype string
	res, c, l       int
}

func (k abKey) String() string {
	return fmt.Sprintf("%s | %s | %s | %d, %d, %d", k.op, k.mode, k.dtype, k.res, k.c, k.l)
}

// abCell is one variant's rounds of one workload.
type abCell struct {
	rounds map[int]float64 // round → ms
	peak   float64         // largest peak_mem_gb over the rounds (0: none)
	failed int             // rounds that recorded an error
	// smMHz and capped are the rounds' mean SM clocks and power-capped
	// shares (records of -power only).
	smMHz, capped []float64
}

// abSummary is an A/B run read back: its workloads in first-seen order,
// its variants in first-seen order (the first is the default base), the
// cells, and how many records were not of the run (no A/B commit).
type abSummary struct {
	keys     []abKey
	variants []string
	cells    map[abKey]map[string]*abCell
	skipped  int
	power    bool // some record has a power field (-power)
}

// readAB groups recs by workload and variant, taking only records of impl
// flexgemm-go whose commit reads <tag>-<variant>-r<round>; the tag must be
// the same for all of them.
func readAB(recs []Record) (*abSummary, error) {
	s := &abSummary{cells: map[abKey]map[string]*abCell{}}
	tag := ""
	for _, r := range recs {
		m := abCommit.FindStringSubmatch(r.Commit)
		if r.Impl != "flexgemm-go" || m == nil {
			s.skipped++
			continue
		}
		if tag == "" {
			tag = m[1]
		} else if m[1] != tag {
			return nil, fmt.Errorf("ab: records of two runs, tags %q and %q: give one run's lines", tag, m[1])
		}
		variant := m[2]
		round, _ := strconv.Atoi(m[3])
		op := r.Op
		if op == "" {
			op = opSubm
		}
		k := abKey{op: op, mode: r.Mode, dtype: r.DType, res: r.RES, c: r.C, l: r.L}
		row, ok := s.cells[k]
		if !ok {
			row = map[string]*abCell{}
			s.cells[k] = row
			s.keys = append(s.keys, k)
		}
		if !slices.Contains(s.variants, variant) {
			s.variants = append(s.variants, variant)
		}
		c, ok := row[variant]
		if !ok {
			c = &abCell{rounds: map[int]float64{}}
			row[variant] = c
		}
		if _, dup := c.rounds[round]; dup {
			return nil, fmt.Errorf("ab: %s, variant %s, round %d recorded twice", k, variant, round)
		}
		if r.Error != "" {
			c.failed++
			continue
		}
		c.rounds[round] = r.MS
		if r.PeakMemGB != nil && *r.PeakMemGB > c.peak {
			c.peak = *r.PeakMemGB
		}
		if r.Power != nil {
			s.power = true
			c.smMHz = append(c.smMHz, r.Power.SMMHzMean)
			c.capped = append(c.capped, r.Power.CappedFraction)
		}
	}
	if len(s.keys) == 0 {
		return nil, errors.New("ab: no records with an A/B commit (<tag>-<variant>-r<round>)")
	}
	return s, nil
}

// median returns the median of c's rounds and the rounds' times in round
// order; ok is false without any (or without c).
func (c *abCell) median() (med float64, times []float64, ok bool) {
	if c == nil || len(c.rounds) == 0 {
		return 0, nil, false
	}
	rs := make([]int, 0, len(c.rounds))
	for r := range c.rounds {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	for _, r := range rs {
		times = append(times, c.rounds[r])
	}
	return medianOf(times), times, true
}

// write prints the summary as a markdown table: per workload and variant
// the rounds' times, their median and the median's change against the
// base variant's, and the largest peak memory of the rounds; with -power
// records also the medians of the rounds' mean SM clock and power-capped
// share.
func (s *abSummary) write(w io.Writer, base string) error {
	if !slices.Contains(s.variants, base) {
		return fmt.Errorf("ab: base variant %q not in the run (variants %v)", base, s.variants)
	}
	head, rule := "", ""
	if s.power {
		head, rule = " SM MHz | capped |", "---:|---:|"
	}
	fmt.Fprintf(w, "| op | mode | dtype | RES, C, L | variant | rounds ms | median ms | vs %s | peak GiB |%s\n", base, head)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---:|---:|---:|"+rule)
	for _, k := range s.keys {
		row := s.cells[k]
		bm, _, bok := row[base].median()
		for _, v := range s.variants {
			c := row[v]
			if c == nil {
				continue
			}
			med, times, ok := c.median()
			rounds := ""
			for i, t := range times {
				if i > 0 {
					rounds += " / "
				}
				rounds += strconv.FormatFloat(t, 'f', 3, 64)
			}
			if c.failed > 0 {
				rounds += fmt.Sprintf(" (%d failed)", c.failed)
			}
			medS, change, peak := "–", "–", "–"
			if ok {
				medS = strconv.FormatFloat(med, 'f', 3, 64)
				if v != base && bok {
					change = fmt.Sprintf("%+.1f %%", 100*(med/bm-1))
				}
			}
			if c.peak > 0 {
				peak = strconv.FormatFloat(c.peak, 'f', 4, 64)
			}
			pw := ""
			if s.power {
				mhz, capped := "–", "–"
				if len(c.smMHz) > 0 {
					mhz = strconv.FormatFloat(medianOf(c.smMHz), 'f', 0, 64)
					capped = strconv.FormatFloat(100*medianOf(c.capped), 'f', 0, 64) + " %"
				}
				pw = fmt.Sprintf(" %s | %s |", mhz, capped)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |%s\n", k, v, rounds, medS, change, peak, pw)
		}
	}
	if s.skipped > 0 {
		fmt.Fprintf(w, "\n%d records without an A/B commit skipped.\n", s.skipped)
	}
	return nil
}

// abMain is `bench ab [-base variant] results.jsonl …`: the summary of
// the alternated rounds bench/ab_run.sh recorded.
func abMain(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench ab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("base", "", "the variant the others are compared with (default: the first one recorded)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./bench ab [-base variant] results.jsonl …   (records of bench/ab_run.sh: commit <tag>-<variant>-r<round>)")
		fs.PrintDefaults()
	}
	recs, err := recordArgs(fs, args)
	if err != nil {
		return err
	}
	s, err := readAB(recs)
	if err != nil {
		return err
	}
	if *base == "" {
		*base = s.variants[0]
	}
	return s.write(stdout, *base)
}
