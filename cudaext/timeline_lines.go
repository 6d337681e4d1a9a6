package cudaext

import "fmt"

// timelineRowStamps is the length of one row of the timeline probe's
// buffer (gather_ws.cuh, FG_TIMELINE: kTimelineStamps): the row's count of
// stamps, then the stamps.
const timelineRowStamps = 320

// timelineLines returns the lines printTimeline prints for the probe's
// buffer buf ([4][timelineRowStamps] int64, rows 2·block + role): one line
// a stamp, "fgtl <block> <P|C> <i> <event> <cycles>", where a stamp is
// (clock64 << 4) | event. A row's count is clamped to the row, so a
// corrupted count prints no more than the row holds. In a file without
// the cudaext tag so that its test runs without a GPU.
func timelineLines(buf []int64) []string {
	var out []string
	for slot := 0; slot < len(buf)/timelineRowStamps; slot++ {
		row := buf[slot*timelineRowStamps : (slot+1)*timelineRowStamps]
		n := int(min(max(row[0], 0), timelineRowStamps-1))
		for i := 1; i <= n; i++ {
			out = append(out, fmt.Sprintf("fgtl %d %c %d %d %d", slot/2, "PC"[slot%2], i-1, row[i]&15, row[i]>>4))
		}
	}
	return out
}
