package cudaext

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTimelineLines(t *testing.T) {
	stamp := func(cycles int64, event int) int64 { return cycles<<4 | int64(event) }
	rows := func(counts ...[]int64) []int64 {
		buf := make([]int64, 4*timelineRowStamps)
		for r, c := range counts {
			copy(buf[r*timelineRowStamps:], c)
		}
		return buf
	}
	for _, tc := range []struct {
		name      string
		buf       []int64
		want      []string // nil: wantLen lines, the first wantFirst
		wantLen   int
		wantFirst string
	}{
		{name: "empty", buf: rows()},
		{name: "no buffer"},
		{name: "producer and consumer of block 0, consumer of block 1",
			buf:  rows([]int64{2, stamp(100, 0), stamp(140, 1)}, []int64{1, stamp(90, 5)}, nil, []int64{1, stamp(7, 7)}),
			want: []string{"fgtl 0 P 0 0 100", "fgtl 0 P 1 1 140", "fgtl 0 C 0 5 90", "fgtl 1 C 0 7 7"}},
		{name: "a count past the row is clamped", buf: rows([]int64{1 << 40}), wantLen: timelineRowStamps - 1, wantFirst: "fgtl 0 P 0 0 0"},
		{name: "a negative count prints nothing", buf: rows([]int64{-3, stamp(1, 1)})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := timelineLines(tc.buf)
			if tc.want == nil && tc.wantLen > 0 {
				require.Len(t, got, tc.wantLen)
				require.Equal(t, tc.wantFirst, got[0])
				return
			}
			require.Equal(t, tc.want, got)
		})
	}
}
