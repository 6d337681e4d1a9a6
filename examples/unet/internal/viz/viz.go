// Package viz draws predicted and true voxel labels of a few scenes side by
// side as a PNG: each scene is seen from above (along −z), every column of
// voxels showing its top voxel coloured by class and shaded by height and
// slope, with a legend of the classes.
package viz

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
)

// ErrInput reports views that cannot be drawn.
var ErrInput = errors.New("viz: bad input")

// Palette holds one colour per class (colour-blind-friendly Tableau tones).
var Palette = []color.RGBA{
	{31, 119, 180, 255},  // blue
	{255, 127, 14, 255},  // orange
	{44, 160, 44, 255},   // green
	{148, 103, 189, 255}, // purple
	{140, 86, 75, 255},   // brown
	{227, 119, 194, 255}, // pink
	{188, 189, 34, 255},  // olive
	{23, 190, 207, 255},  // cyan
}

var (
	errColor  = color.RGBA{214, 39, 40, 255}
	okColor   = color.RGBA{200, 200, 200, 255}
	inkColor  = color.RGBA{30, 30, 30, 255}
	backColor = color.RGBA{250, 250, 250, 255}
	gridColor = color.RGBA{232, 232, 232, 255}
)

// View is one scene to draw.
type View struct {
	// Title names the scene, e.g. "held-out scene 3".
	Title string
	// Coords holds the voxels, flat [N, 3] (x, y, z), inside [0, Grid)³.
	Coords []int32
	// Truth and Pred hold the true and predicted class of every voxel.
	Truth, Pred []int32
}

// Figure describes the whole picture.
type Figure struct {
	// Title is drawn at the top; "\n" starts a new line. The picture is
	// widened to fit it.
	Title   string
	Grid    int      // edge length of the voxel grid
	Classes []string // class names, in label order
	Views   []View
	// Scale is the size of a voxel in pixels (0 = automatic, about 7).
	Scale int
}

// WritePNG draws the figure: one row per view with the columns "truth",
// "prediction" and "errors", then a legend.
func (f *Figure) WritePNG(w io.Writer) error {
	img, err := f.Draw()
	if err != nil {
		return err
	}
	return png.Encode(w, img)
}

// Draw renders the figure into an image.
func (f *Figure) Draw() (*image.RGBA, error) {
	if f.Grid < 1 || len(f.Views) == 0 || len(f.Classes) == 0 || len(f.Classes) > len(Palette) {
		return nil, fmt.Errorf("%w: grid %d, %d views, %d classes (at most %d)", ErrInput, f.Grid, len(f.Views), len(f.Classes), len(Palette))
	}
	for i, v := range f.Views {
		n := len(v.Truth)
		if len(v.Coords) != 3*n || len(v.Pred) != n {
			return nil, fmt.Errorf("%w: view %d has %d coordinates, %d labels, %d predictions", ErrInput, i, len(v.Coords)/3, n, len(v.Pred))
		}
		for r := range n {
			for a := range 3 {
				if c := v.Coords[3*r+a]; c < 0 || int(c) >= f.Grid {
					return nil, fmt.Errorf("%w: view %d voxel %d coordinate %d outside [0, %d)", ErrInput, i, r, c, f.Grid)
				}
			}
			for _, l := range []int32{v.Truth[r], v.Pred[r]} {
				if l < 0 || int(l) >= len(f.Classes) {
					return nil, fmt.Errorf("%w: view %d voxel %d has class %d of %d", ErrInput, i, r, l, len(f.Classes))
				}
			}
		}
	}
	scale := f.Scale
	if scale <= 0 {
		scale = max(2, 224/f.Grid)
	}
	title, err := newFace(20)
	if err != nil {
		return nil, err
	}
	text, err := newFace(15)
	if err != nil {
		return nil, err
	}
	const margin, gap, head, legendH, lineH = 16, 14, 26, 40, 26
	panel := f.Grid * scale
	width := 2*margin + 3*panel + 2*gap
	lines := strings.Split(f.Title, "\n")
	for _, l := range lines {
		width = max(width, 2*margin+font.MeasureString(title, l).Ceil())
	}
	top := margin + lineH*len(lines) + 8
	height := top + len(f.Views)*(panel+head+gap) + legendH + margin
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.NewUniform(backColor), image.Point{}, draw.Src)
	for i, l := range lines {
		drawText(img, title, margin, margin+20+i*lineH, l)
	}

	for i, v := range f.Views {
		y0 := top + i*(panel+head+gap)
		correct := 0
		for r := range v.Truth {
			if v.Truth[r] == v.Pred[r] {
				correct++
			}
		}
		acc := 100 * float64(correct) / float64(max(1, len(v.Truth)))
		cols := []struct {
			label string
			kind  panelKind
		}{
			{v.Title + ": truth", truthPanel},
			{fmt.Sprintf("prediction (%.1f%% correct)", acc), predPanel},
			{"errors anywhere in the column", errorPanel},
		}
		for c, col := range cols {
			x0 := margin + c*(panel+gap)
			drawText(img, text, x0, y0+17, col.label)
			f.drawPanel(img, image.Rect(x0, y0+head, x0+panel, y0+head+panel), scale, v, col.kind)
		}
	}
	// Legend.
	x, y := margin, height-margin-legendH+12
	for k, name := range f.Classes {
		x = legendItem(img, text, x, y, Palette[k], name)
	}
	legendItem(img, text, x+12, y, errColor, "misclassified")
	return img, nil
}

func legendItem(img *image.RGBA, face font.Face, x, y int, c color.RGBA, label string) int {
	draw.Draw(img, image.Rect(x, y, x+18, y+18), image.NewUniform(c), image.Point{}, draw.Src)
	w := drawText(img, face, x+24, y+14, label)
	return x + 24 + w + 22
}

type panelKind int

const (
	truthPanel panelKind = iota // top voxel's true class
	predPanel                   // top voxel's predicted class
	errorPanel                  // red where any voxel of the column is wrong
)

// drawPanel projects the view along z: each (x, y) column shows its
// highest voxel. Image right is +x, image up is +y.
func (f *Figure) drawPanel(img *image.RGBA, r image.Rectangle, scale int, v View, kind panelKind) {
	g := f.Grid
	draw.Draw(img, r, image.NewUniform(color.White), image.Point{}, draw.Src)
	for i := 0; i <= g; i += 8 { // light reference grid every 8 voxels
		x := r.Min.X + min(i*scale, r.Dx()-1)
		y := r.Min.Y + min(i*scale, r.Dy()-1)
		draw.Draw(img, image.Rect(x, r.Min.Y, x+1, r.Max.Y), image.NewUniform(gridColor), image.Point{}, draw.Src)
		draw.Draw(img, image.Rect(r.Min.X, y, r.Max.X, y+1), image.NewUniform(gridColor), image.Point{}, draw.Src)
	}
	depth := make([]int, g*g)
	top := make([]int, g*g)
	for i := range depth {
		depth[i], top[i] = -1, -1
	}
	wrong := make([]bool, g*g)
	for k := range len(v.Coords) / 3 {
		x, y, z := int(v.Coords[3*k]), int(v.Coords[3*k+1]), int(v.Coords[3*k+2])
		if z > depth[x*g+y] {
			depth[x*g+y], top[x*g+y] = z, k
		}
		if v.Truth[k] != v.Pred[k] {
			wrong[x*g+y] = true
		}
	}
	colour := func(x, y, k int) color.RGBA {
		switch kind {
		case truthPanel:
			return Palette[v.Truth[k]]
		case predPanel:
			return Palette[v.Pred[k]]
		}
		if wrong[x*g+y] {
			return errColor
		}
		return okColor
	}
	h := func(x, y int) float64 {
		if x < 0 || y < 0 || x >= g || y >= g || depth[x*g+y] < 0 {
			return math.NaN()
		}
		return float64(depth[x*g+y])
	}
	for x := range g {
		for y := range g {
			k := top[x*g+y]
			if k < 0 {
				continue
			}
			// Height gradient from the neighbours that exist; light comes
			// from the upper left.
			z := h(x, y)
			dx := slope(h(x-1, y), z, h(x+1, y))
			dy := slope(h(x, y-1), z, h(x, y+1))
			nz := 1 / math.Sqrt(dx*dx+dy*dy+1)
			lambert := max(0, (-dx*-0.4+-dy*0.4+1*0.82)*nz)
			light := 0.35 + 0.35*z/float64(max(1, g-1)) + 0.4*lambert
			c := shade(colour(x, y, k), light)
			px := r.Min.X + x*scale
			py := r.Max.Y - (y+1)*scale
			draw.Draw(img, image.Rect(px, py, px+scale, py+scale), image.NewUniform(c), image.Point{}, draw.Src)
		}
	}
}

// slope estimates dh/dx from the samples left, centre and right (NaN =
// missing).
func slope(l, c, r float64) float64 {
	switch {
	case !math.IsNaN(l) && !math.IsNaN(r):
		return (r - l) / 2
	case !math.IsNaN(r):
		return r - c
	case !math.IsNaN(l):
		return c - l
	}
	return 0
}

func shade(c color.RGBA, f float64) color.RGBA {
	f = min(max(f, 0.25), 1.15)
	ch := func(v uint8) uint8 { return uint8(min(255, float64(v)*f)) }
	return color.RGBA{ch(c.R), ch(c.G), ch(c.B), 255}
}

func newFace(size float64) (font.Face, error) {
	ft, err := opentype.Parse(goregular.TTF)
	if err != nil {
		return nil, err
	}
	return opentype.NewFace(ft, &opentype.FaceOptions{Size: size, DPI: 72, Hinting: font.HintingFull})
}

// drawText draws s with its baseline at (x, y) and returns its width.
func drawText(img *image.RGBA, face font.Face, x, y int, s string) int {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(inkColor), Face: face, Dot: fixed.P(x, y)}
	d.DrawString(s)
	return (d.Dot.X - fixed.I(x)).Ceil()
}
