package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseTimeline(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[timelineThread][]timelineStamp
		err      string
	}{
		{name: "other lines skipped", in: "bench: cuda …\n\n{\"ms\":1}\n", want: map[timelineThread][]timelineStamp{}},
		{name: "two threads, rows put in order",
			in: "fgtl 0 C 1 1 150\nfgtl 0 P 0 0 100\nfgtl 0 C 0 0 120\nfgtl 1 P 0 5 7\n",
			want: map[timelineThread][]timelineStamp{
				{0, 'P'}: {{0, 'P', 0, 0, 100}},
				{0, 'C'}: {{0, 'C', 0, 0, 120}, {0, 'C', 1, 1, 150}},
				{1, 'P'}: {{1, 'P', 0, 5, 7}},
			}},
		{name: "too few fields", in: "fgtl 0 P 0 0\n", err: "line 1"},
		{name: "bad role", in: "fgtl 0 X 0 0 1\n", err: "P|C"},
		{name: "bad event", in: "fgtl 0 P 0 16 1\n", err: "event"},
		{name: "bad cycles", in: "x\nfgtl 0 P 0 1 1e3\n", err: "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTimeline(strings.NewReader(tc.in))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestTimelineSpans(t *testing.T) {
	// A producer: two stages (wait, copies, next), the second's wait long.
	ss := []timelineStamp{
		{event: 0, cycle: 0}, {event: 1, cycle: 10}, {event: 2, cycle: 40},
		{event: 0, cycle: 45}, {event: 1, cycle: 145}, {event: 2, cycle: 175},
	}
	spans, whole := timelineSpans(ss)
	require.Equal(t, int64(175), whole)
	require.Len(t, spans, 3)
	require.Equal(t, [2]int{0, 1}, [2]int{spans[0].from, spans[0].to}) // 110 cycles: the largest first
	require.Equal(t, []int64{10, 100}, spans[0].cycles)
	require.Equal(t, int64(110), spans[0].total)
	require.Equal(t, []int64{30, 30}, spans[1].cycles)
	require.Equal(t, int64(60), spans[1].total)
	require.Equal(t, []int64{5}, spans[2].cycles)
	require.Equal(t, int64(5), spans[2].total)
	spans, whole = timelineSpans(ss[:1])
	require.Nil(t, spans)
	require.Zero(t, whole)
}

func TestTimelineMain(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "err.txt")
	require.NoError(t, os.WriteFile(in, []byte("bench: …\nfgtl 0 C 0 0 1000\nfgtl 0 C 1 1 1600\nfgtl 0 C 2 2 2000\nfgtl 0 C 3 0 2010\nfgtl 0 C 4 1 2110\n"), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 0, runMain([]string{"timeline", in}, &out, &errb), errb.String())
	s := out.String()
	require.Contains(t, s, "block 0, consumer warp 0: 5 stamps over 1110 cycles")
	require.Contains(t, s, "| stage: before the full wait → stage: full | 2 | 700 | 63.1 % | 350 | 600 | 600 |")
	empty := filepath.Join(dir, "none.txt")
	require.NoError(t, os.WriteFile(empty, []byte("bench: no probe\n"), 0o644))
	errb.Reset()
	require.Equal(t, 1, runMain([]string{"timeline", empty}, &out, &errb))
	require.Contains(t, errb.String(), "no fgtl lines")
	errb.Reset()
	require.Equal(t, 1, runMain([]string{"timeline"}, &out, &errb))
	require.Contains(t, errb.String(), "no input files")
}
