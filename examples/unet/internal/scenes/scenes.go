// Package scenes generates the synthetic data set of the sparse UNet
// example: voxelised random primitives (sphere, box, cylinder, torus) in a
// cubic grid, with the primitive type of every occupied voxel as its label.
//
// Every scene is a pure function of (seed, split, index), so the training
// and held-out splits never share a scene and a data set is the same on
// every machine and for any GOMAXPROCS.
package scenes

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
)

// Class is the label of a voxel: the type of primitive it belongs to.
type Class int32

// The classes, in label order.
const (
	Sphere Class = iota
	Box
	Cylinder
	Torus
	// NumClasses is the number of classes.
	NumClasses = 4
)

// ClassNames lists the class names in label order.
var ClassNames = [NumClasses]string{"sphere", "box", "cylinder", "torus"}

// String implements fmt.Stringer for Class.
func (c Class) String() string {
	if c >= 0 && int(c) < NumClasses {
		return ClassNames[c]
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// ErrConfig reports an invalid generator configuration.
var ErrConfig = errors.New("scenes: bad configuration")

// Config describes how scenes are drawn.
type Config struct {
	// Grid is the edge length of the cubic voxel grid (at least 16).
	Grid int
	// MinShapes and MaxShapes bound the number of primitives per scene.
	MinShapes, MaxShapes int
	// Solid fills the primitives instead of voxelising only their surfaces.
	Solid bool
	// Seed selects the data set.
	Seed uint64
}

// DefaultConfig returns a 32³ grid with 2 to 4 hollow primitives per scene.
func DefaultConfig(seed uint64) Config {
	return Config{Grid: 32, MinShapes: 2, MaxShapes: 4, Seed: seed}
}

// Validate reports whether the configuration can generate scenes.
func (c Config) Validate() error {
	if c.Grid < 16 || c.Grid > 1024 {
		return fmt.Errorf("%w: grid %d outside [16, 1024]", ErrConfig, c.Grid)
	}
	if c.MinShapes < 1 || c.MaxShapes < c.MinShapes || c.MaxShapes > 64 {
		return fmt.Errorf("%w: shapes per scene [%d, %d] (want 1 ≤ min ≤ max ≤ 64)", ErrConfig, c.MinShapes, c.MaxShapes)
	}
	return nil
}

// Split names a part of the data set.
type Split uint64

// The splits.
const (
	Train Split = iota
	HeldOut
)

// String implements fmt.Stringer for Split.
func (s Split) String() string {
	switch s {
	case Train:
		return "train"
	case HeldOut:
		return "held-out"
	}
	return fmt.Sprintf("Split(%d)", uint64(s))
}

// Scene is one voxelised scene. Voxels are listed in (x, y, z) order.
type Scene struct {
	// Coords holds the occupied voxels, flat [N, 3] (x, y, z).
	Coords []int32
	// Labels holds the class of each voxel, [N].
	Labels []Class
	// Shapes records the primitives drawn, in drawing order.
	Shapes []Shape
}

// N returns the number of occupied voxels.
func (s *Scene) N() int { return len(s.Labels) }

// Shape is one placed primitive.
type Shape struct {
	Class Class
	// Center is the position of the primitive's centre in voxel units.
	Center [3]float64
	// Rot rotates world offsets into the primitive's frame (row-major 3×3).
	Rot [9]float64
	// Size holds the class's parameters: sphere (radius), box (half
	// extents x, y, z), cylinder (radius, half height), torus (major
	// radius, minor radius).
	Size [3]float64
}

// Radius bounds the distance from the centre to any point of the shape.
func (s Shape) Radius() float64 {
	a, b, c := s.Size[0], s.Size[1], s.Size[2]
	switch s.Class {
	case Sphere:
		return a
	case Box:
		return math.Sqrt(a*a + b*b + c*c)
	case Cylinder:
		return math.Hypot(a, b)
	case Torus:
		return a + b
	}
	return 0
}

// Distance returns the signed distance (negative inside) from the world
// point p to the shape's surface, exact for every class.
func (s Shape) Distance(p [3]float64) float64 {
	var d [3]float64
	for a := range 3 {
		d[a] = p[a] - s.Center[a]
	}
	var q [3]float64
	for r := range 3 {
		q[r] = s.Rot[3*r]*d[0] + s.Rot[3*r+1]*d[1] + s.Rot[3*r+2]*d[2]
	}
	switch s.Class {
	case Sphere:
		return math.Sqrt(q[0]*q[0]+q[1]*q[1]+q[2]*q[2]) - s.Size[0]
	case Box:
		var out, in float64
		in = math.Inf(-1)
		for a := range 3 {
			e := math.Abs(q[a]) - s.Size[a]
			out += max(e, 0) * max(e, 0)
			in = max(in, e)
		}
		return math.Sqrt(out) + min(in, 0)
	case Cylinder:
		er := math.Hypot(q[0], q[1]) - s.Size[0]
		eh := math.Abs(q[2]) - s.Size[1]
		return math.Hypot(max(er, 0), max(eh, 0)) + min(max(er, eh), 0)
	case Torus:
		return math.Hypot(math.Hypot(q[0], q[1])-s.Size[0], q[2]) - s.Size[1]
	}
	return math.Inf(1)
}

// shellHalfWidth is the half thickness of a voxelised surface: a voxel is on
// the surface when its centre is within this distance of it. Above
// √3/2 ≈ 0.87 no line of sight passes between two surface voxels; 0.8 keeps
// the shells thin and, in practice, closed.
const shellHalfWidth = 0.8

// Generate returns scene index of split. Scenes of different (seed, split,
// index) are independent draws.
func Generate(cfg Config, split Split, index int) (*Scene, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if index < 0 {
		return nil, fmt.Errorf("%w: negative scene index %d", ErrConfig, index)
	}
	r := rand.New(rand.NewPCG(cfg.Seed, uint64(split)<<48^uint64(index)))
	g := float64(cfg.Grid)
	scale := g / 32 // sizes below are for a 32³ grid
	n := cfg.MinShapes + r.IntN(cfg.MaxShapes-cfg.MinShapes+1)
	shapes := make([]Shape, n)
	for i := range shapes {
		s := Shape{Class: Class(r.IntN(NumClasses)), Rot: randomRotation(r)}
		u := func(lo, hi float64) float64 { return scale * (lo + (hi-lo)*r.Float64()) }
		switch s.Class {
		case Sphere:
			s.Size = [3]float64{u(3.5, 8), 0, 0}
		case Box:
			s.Size = [3]float64{u(2.5, 6.5), u(2.5, 6.5), u(2.5, 6.5)}
		case Cylinder:
			s.Size = [3]float64{u(2.5, 5.5), u(3, 7.5), 0}
		case Torus:
			s.Size = [3]float64{u(4, 7.5), u(1.2, 2.8), 0}
		}
		rad := min(s.Radius(), g/2-1.5)
		for a := range 3 {
			s.Center[a] = rad + (g-1-2*rad)*r.Float64()
		}
		shapes[i] = s
	}
	return voxelise(cfg, shapes), nil
}

// inradius returns the radius of a ball around the centre that lies inside
// the (solid) shape, 0 if the centre is outside it.
func (s Shape) inradius() float64 {
	a, b, c := s.Size[0], s.Size[1], s.Size[2]
	switch s.Class {
	case Sphere:
		return a
	case Box:
		return min(a, b, c)
	case Cylinder:
		return min(a, b)
	case Torus:
		return max(0, b-a)
	}
	return 0
}

// voxelise rasterises the shapes; a voxel covered by several shapes takes
// the class of the last one drawn.
//
// Only voxels that can be labelled are tested with Shape.Distance. Every
// point of a shape lies within Radius of its centre and, for a solid
// shape, the ball of radius inradius around the centre lies inside it, so
// the exact signed distance d(p) of a point p at distance ρ from the centre
// satisfies ρ − Radius ≤ d(p) ≤ ρ − inradius. A labelled voxel has
// d ≤ shellHalfWidth (and d ≥ −shellHalfWidth for surfaces), so it lies
// within Radius + 1 of the centre (and, for surfaces, beyond inradius − 1):
// the skipped voxels are at least 0.2 voxel (far more than any rounding
// error) from being labelled, and the result is the one of testing every
// voxel of the bounding box.
func voxelise(cfg Config, shapes []Shape) *Scene {
	g := cfg.Grid
	label := make([]int8, g*g*g)
	for i := range label {
		label[i] = -1
	}
	for _, s := range shapes {
		rad := s.Radius() + 1
		var lo, hi [3]int
		for a := range 3 {
			lo[a] = max(0, int(math.Floor(s.Center[a]-rad)))
			hi[a] = min(g-1, int(math.Ceil(s.Center[a]+rad)))
		}
		outer := rad * rad
		inner := 0.0 // voxels closer than √inner to the centre are inside the surface
		if r := s.inradius() - 1; !cfg.Solid && r > 0 {
			inner = r * r
		}
		cls := int8(s.Class)
		for x := lo[0]; x <= hi[0]; x++ {
			dx := float64(x) - s.Center[0]
			rx := outer - dx*dx
			if rx < 0 {
				continue
			}
			for y := lo[1]; y <= hi[1]; y++ {
				dy := float64(y) - s.Center[1]
				ry := rx - dy*dy
				if ry < 0 {
					continue
				}
				h := math.Sqrt(ry)
				zlo := max(lo[2], int(math.Floor(s.Center[2]-h)))
				zhi := min(hi[2], int(math.Ceil(s.Center[2]+h)))
				row := label[(x*g+y)*g : (x*g+y+1)*g]
				for z := zlo; z <= zhi; z++ {
					if inner > 0 {
						dz := float64(z) - s.Center[2]
						if dx*dx+dy*dy+dz*dz < inner {
							continue
						}
					}
					d := s.Distance([3]float64{float64(x), float64(y), float64(z)})
					if (cfg.Solid && d <= 0) || (!cfg.Solid && math.Abs(d) <= shellHalfWidth) {
						row[z] = cls
					}
				}
			}
		}
	}
	n := 0
	for _, l := range label {
		if l >= 0 {
			n++
		}
	}
	sc := &Scene{Shapes: shapes}
	if n > 0 {
		sc.Coords, sc.Labels = make([]int32, 0, 3*n), make([]Class, 0, n)
	}
	for i, l := range label {
		if l < 0 {
			continue
		}
		x, y, z := i/(g*g), i/g%g, i%g
		sc.Coords = append(sc.Coords, int32(x), int32(y), int32(z))
		sc.Labels = append(sc.Labels, Class(l))
	}
	return sc
}

// randomRotation draws a uniformly distributed rotation (a random unit
// quaternion) and returns its matrix.
func randomRotation(r *rand.Rand) [9]float64 {
	var q [4]float64
	for {
		n := 0.0
		for i := range q {
			q[i] = r.NormFloat64()
			n += q[i] * q[i]
		}
		if n > 1e-12 {
			n = math.Sqrt(n)
			for i := range q {
				q[i] /= n
			}
			break
		}
	}
	w, x, y, z := q[0], q[1], q[2], q[3]
	return [9]float64{
		1 - 2*(y*y+z*z), 2 * (x*y - w*z), 2 * (x*z + w*y),
		2 * (x*y + w*z), 1 - 2*(x*x+z*z), 2 * (y*z - w*x),
		2 * (x*z - w*y), 2 * (y*z + w*x), 1 - 2*(x*x+y*y),
	}
}

// Batch is several scenes stacked for one forward pass: coordinates carry a
// batch index column.
type Batch struct {
	// Coords holds (batch, x, y, z) rows, flat [N, 4].
	Coords []int32
	// Labels holds the class of each row, [N].
	Labels []int32
	// Scenes are the scenes of the batch, in batch-index order.
	Scenes []*Scene
}

// N returns the number of voxels of the batch.
func (b *Batch) N() int { return len(b.Labels) }

// Stack concatenates scenes into a batch; scene i gets batch index i.
func Stack(scenes ...*Scene) *Batch {
	n := 0
	for _, s := range scenes {
		n += s.N()
	}
	b := &Batch{Scenes: scenes}
	if n > 0 {
		b.Coords, b.Labels = make([]int32, 0, 4*n), make([]int32, 0, n)
	}
	for i, s := range scenes {
		for r := range s.N() {
			b.Coords = append(b.Coords, int32(i), s.Coords[3*r], s.Coords[3*r+1], s.Coords[3*r+2])
			b.Labels = append(b.Labels, int32(s.Labels[r]))
		}
	}
	return b
}

// MakeBatch generates batch index of split: the size scenes with indices
// index·size … index·size + size − 1, stacked. The scenes are generated on
// up to GOMAXPROCS goroutines; each is a pure function of its index, so the
// batch is the same for any GOMAXPROCS.
func MakeBatch(cfg Config, split Split, index, size int) (*Batch, error) {
	if size < 1 || index < 0 || index > math.MaxInt/size-1 {
		return nil, fmt.Errorf("%w: batch %d of size %d", ErrConfig, index, size)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sc := make([]*Scene, size)
	errs := make([]error, size)
	var next atomic.Int64
	work := func() {
		for i := int(next.Add(1) - 1); i < size; i = int(next.Add(1) - 1) {
			sc[i], errs[i] = Generate(cfg, split, index*size+i)
		}
	}
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), size) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return Stack(sc...), nil
}

// Dataset holds the scenes of both splits, grouped into batches.
type Dataset struct {
	Config  Config
	Train   []*Batch
	HeldOut []*Batch
}

// NewDataset generates trainBatches·batchSize training scenes and
// heldOutBatches·batchSize held-out scenes. For large training sets use
// MakeBatch on demand instead: a scene is a pure function of its index.
func NewDataset(cfg Config, batchSize, trainBatches, heldOutBatches int) (*Dataset, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if batchSize < 1 || trainBatches < 0 || heldOutBatches < 0 {
		return nil, fmt.Errorf("%w: batch size %d, %d training and %d held-out batches", ErrConfig, batchSize, trainBatches, heldOutBatches)
	}
	ds := &Dataset{Config: cfg}
	build := func(split Split, nb int) ([]*Batch, error) {
		out := make([]*Batch, nb)
		for b := range out {
			var err error
			if out[b], err = MakeBatch(cfg, split, b, batchSize); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	var err error
	if ds.Train, err = build(Train, trainBatches); err != nil {
		return nil, err
	}
	if ds.HeldOut, err = build(HeldOut, heldOutBatches); err != nil {
		return nil, err
	}
	return ds, nil
}
