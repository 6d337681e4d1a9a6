package viz

import (
	"bytes"
	"image/png"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDraw(t *testing.T) {
	// One voxel of class 1 predicted as 2 at (1, 2, 3) and one correct
	// voxel of class 0 at (5, 5, 0), in an 8³ grid drawn at 4 px per voxel.
	fig := &Figure{
		Title:   "t",
		Grid:    8,
		Classes: []string{"a", "b", "c"},
		Scale:   4,
		Views: []View{{
			Title:  "v",
			Coords: []int32{1, 2, 3, 5, 5, 0},
			Truth:  []int32{1, 0},
			Pred:   []int32{2, 0},
		}},
	}
	var buf bytes.Buffer
	require.NoError(t, fig.WritePNG(&buf))
	img, err := png.Decode(&buf)
	require.NoError(t, err)
	b := img.Bounds()
	require.Equal(t, 2*16+3*32+2*14, b.Dx())
	// A long title widens the picture; "\n" adds a line.
	fig.Title = "a much longer title than the three small panels are wide\nsecond line"
	wide, err := fig.Draw()
	require.NoError(t, err)
	require.Greater(t, wide.Bounds().Dx(), b.Dx())
	require.Equal(t, b.Dy()+26, wide.Bounds().Dy())
	fig.Title = "t"
	rgba, err := fig.Draw()
	require.NoError(t, err)
	// The centre of voxel (1, 2) in panel c: x0 + 1·4 + 2, bottom − 2·4 − 2.
	const panelTop = 16 + 34 + 26
	at := func(col, x, y int) (uint8, uint8, uint8) {
		px := 16 + col*(32+14) + x*4 + 2
		py := panelTop + 32 - y*4 - 2
		c := rgba.RGBAAt(px, py)
		return c.R, c.G, c.B
	}
	dominant := func(r, g, b uint8) string {
		switch {
		case r > g && r > b:
			return "r"
		case g > r && g > b:
			return "g"
		case b > r && b > g:
			return "b"
		}
		return "grey"
	}
	// Truth: class 1 (orange: red-dominant) at (1, 2); class 0 (blue) at (5, 5).
	require.Equal(t, "r", dominant(at(0, 1, 2)))
	require.Equal(t, "b", dominant(at(0, 5, 5)))
	// Prediction: class 2 (green) at (1, 2).
	require.Equal(t, "g", dominant(at(1, 1, 2)))
	// Errors: red at (1, 2), grey at (5, 5).
	r, g, bl := at(2, 1, 2)
	require.Greater(t, int(r), int(g)+80)
	require.Greater(t, int(r), int(bl)+80)
	require.Equal(t, "grey", dominant(at(2, 5, 5)))
	// Empty column stays white.
	r, g, bl = at(0, 7, 0)
	require.Equal(t, [3]uint8{255, 255, 255}, [3]uint8{r, g, bl})
}

func TestDrawErrors(t *testing.T) {
	good := View{Coords: []int32{0, 0, 0}, Truth: []int32{0}, Pred: []int32{0}}
	for _, f := range []*Figure{
		{Grid: 0, Classes: []string{"a"}, Views: []View{good}},
		{Grid: 4, Classes: []string{"a"}},
		{Grid: 4, Views: []View{good}},
		{Grid: 4, Classes: make([]string, len(Palette)+1), Views: []View{good}},
		{Grid: 4, Classes: []string{"a"}, Views: []View{{Coords: []int32{0, 0}, Truth: []int32{0}, Pred: []int32{0}}}},
		{Grid: 4, Classes: []string{"a"}, Views: []View{{Coords: []int32{0, 4, 0}, Truth: []int32{0}, Pred: []int32{0}}}},
		{Grid: 4, Classes: []string{"a"}, Views: []View{{Coords: []int32{0, 0, 0}, Truth: []int32{1}, Pred: []int32{0}}}},
		{Grid: 4, Classes: []string{"a"}, Views: []View{{Coords: []int32{0, 0, 0}, Truth: []int32{0}, Pred: []int32{-1}}}},
	} {
		_, err := f.Draw()
		require.ErrorIs(t, err, ErrInput)
	}
}
