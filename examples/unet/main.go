// Command unet trains a sparse 3D UNet on synthetic voxel scenes, in pure
// Go, with Gorgonia and the sparse convolutions of this module.
//
// Each scene holds a few randomly sized, placed and rotated primitives
// (sphere, box, cylinder, torus), voxelised as surfaces in a grid³ volume;
// the network labels every occupied voxel with the type of primitive it
// belongs to. Training shows a progress bar with the loss and voxel
// accuracy; at the end the held-out voxel accuracy and per-class IoU are
// printed, a checkpoint is written in safetensors format and a PNG compares
// predicted and true labels of a few held-out scenes.
//
//	go run ./examples/unet                      # default run, a few minutes on 2 cores
//	go run ./examples/unet -quick               # seconds
//	go run ./examples/unet -load unet-out/unet.safetensors -epochs 0   # evaluate a checkpoint
//	go run ./examples/unet -load unet-out/unet.safetensors -epochs 2   # resume training
//
// On a GPU (build tag cudaext, see gpu_run.sh), with the same data set,
// model and metrics:
//
//	go build -tags cudaext -o unet ./examples/unet
//	./unet -device cuda                       # float32
//	./unet -device cuda -precision bf16       # bfloat16 activations
//	./unet -device cuda -precision fp16       # float16 with loss scaling
//
// -device fake runs the device code path on a CPU emulation of a device
// (every stored value rounded to the -precision dtype).
//
// Run with -h for every flag.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"gorgonia.org/tensor"

	"github.com/flexgemm-go/flexgemm/examples/unet/internal/scenes"
	"github.com/flexgemm-go/flexgemm/examples/unet/internal/unet"
	"github.com/flexgemm-go/flexgemm/examples/unet/internal/viz"
	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "unet:", err)
		os.Exit(1)
	}
}

// options are the command-line flags.
type options struct {
	epochs, steps                   int
	grid, batch, trainBatches, held int
	channels, levels, convs         int
	minShapes, maxShapes            int
	lr                              float64
	seed                            uint64
	algo                            string
	out, save, load, png, cpuprof   string
	trace                           string
	solid, f64, quick, noBar        bool
	views                           int
	device, precision               string
	gpu, logEvery, profileSteps     int
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("unet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.epochs, "epochs", 2, "passes over the training batches (0 = evaluate only)")
	fs.IntVar(&o.steps, "steps", 0, "stop after this many steps (0 = epochs × train-batches)")
	fs.IntVar(&o.grid, "grid", 32, "edge length of the voxel grid")
	fs.IntVar(&o.batch, "batch", 4, "scenes per batch")
	fs.IntVar(&o.trainBatches, "train-batches", 1024, "training batches per epoch (the same scenes every epoch, in a new order)")
	fs.IntVar(&o.held, "heldout-batches", 16, "held-out batches")
	fs.IntVar(&o.channels, "channels", 16, "width of the first level (doubles per level)")
	fs.IntVar(&o.levels, "levels", 4, "resolution levels of the UNet")
	fs.IntVar(&o.convs, "convs", 2, "3×3×3 convolutions per UNet block")
	fs.IntVar(&o.minShapes, "min-shapes", 2, "fewest primitives per scene")
	fs.IntVar(&o.maxShapes, "max-shapes", 4, "most primitives per scene")
	fs.Float64Var(&o.lr, "lr", 0.01, "Adam learning rate")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the data set, the initial weights and the batch order")
	fs.StringVar(&o.algo, "algo", "auto", "convolution algorithm: "+algoNames())
	fs.StringVar(&o.out, "out", "unet-out", "output directory (checkpoint and PNG)")
	fs.StringVar(&o.save, "save", "auto", `checkpoint to write after training ("auto" = <out>/unet.safetensors, "" = none)`)
	fs.StringVar(&o.load, "load", "", "checkpoint to start from (resume training, or evaluate with -epochs 0)")
	fs.StringVar(&o.png, "png", "predictions.png", `PNG of held-out predictions, in <out> ("" = none)`)
	fs.IntVar(&o.views, "views", 3, "held-out scenes drawn in the PNG")
	fs.BoolVar(&o.solid, "solid", false, "voxelise solid primitives instead of surfaces")
	fs.BoolVar(&o.f64, "f64", false, "compute in float64 instead of float32")
	fs.BoolVar(&o.quick, "quick", false, "tiny run for smoke tests: 16³ grid, 2 levels, few steps")
	fs.BoolVar(&o.noBar, "no-progress", false, "print one line per epoch instead of a progress bar")
	fs.StringVar(&o.cpuprof, "cpuprofile", "", "write a CPU profile of the training loop to this file")
	fs.StringVar(&o.trace, "trace", "", "write a Go execution trace of the training loop to this file (go tool trace)")
	fs.StringVar(&o.device, "device", "cpu", "where to compute: cpu, cuda (GPU; needs a build with -tags cudaext) or fake (CPU emulation of a device)")
	fs.IntVar(&o.gpu, "gpu", 0, "GPU ordinal for -device cuda")
	fs.StringVar(&o.precision, "precision", "fp32", "activation precision on a device: fp32, bf16 or fp16 (fp16 with dynamic loss scaling); the CPU computes in fp32")
	fs.IntVar(&o.logEvery, "log-every", 0, "print the loss of every n-th step (0 = none)")
	fs.IntVar(&o.profileSteps, "profile-steps", 0, "time the device work of this many extra steps after training (conv vs everything else)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		def := func(name string, p *int, v int) {
			if !set[name] {
				*p = v
			}
		}
		def("grid", &o.grid, 16)
		def("levels", &o.levels, 2)
		def("channels", &o.channels, 4)
		def("convs", &o.convs, 1)
		def("batch", &o.batch, 2)
		def("train-batches", &o.trainBatches, 3)
		def("heldout-batches", &o.held, 1)
		def("epochs", &o.epochs, 4)
		def("views", &o.views, 2)
		def("max-shapes", &o.maxShapes, 3)
		def("min-shapes", &o.minShapes, 1)
	}
	switch {
	case o.epochs < 0 || o.steps < 0:
		return nil, fmt.Errorf("-epochs %d and -steps %d must not be negative", o.epochs, o.steps)
	case o.trainBatches < 1 || o.held < 1 || o.batch < 1:
		return nil, fmt.Errorf("-batch %d, -train-batches %d and -heldout-batches %d must be positive", o.batch, o.trainBatches, o.held)
	case o.views < 0:
		return nil, fmt.Errorf("-views %d must not be negative", o.views)
	case o.logEvery < 0 || o.profileSteps < 0:
		return nil, fmt.Errorf("-log-every %d and -profile-steps %d must not be negative", o.logEvery, o.profileSteps)
	}
	return o, nil
}

func algoNames() string {
	names := []string{sparse.Auto.String()}
	for _, a := range sparse.Algorithms {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

func run(args []string, stdout, stderr io.Writer) error {
	start := time.Now()
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	algo, err := sparse.ParseAlgorithm(o.algo)
	if err != nil {
		return err
	}
	scfg := scenes.Config{Grid: o.grid, MinShapes: o.minShapes, MaxShapes: o.maxShapes, Solid: o.solid, Seed: o.seed}
	mcfg := unet.DefaultConfig(scenes.NumClasses)
	mcfg.Channels, mcfg.Levels, mcfg.Convs, mcfg.Algorithm = o.channels, o.levels, o.convs, algo
	if o.f64 {
		mcfg.DType = tensor.Float64
	}
	if err := mcfg.Validate(); err != nil {
		return err
	}
	// Each stride-2 level halves the grid; an odd size would drop the last
	// layer of voxels from the coarse levels.
	if o.grid%(1<<(o.levels-1)) != 0 {
		return fmt.Errorf("-grid %d must be divisible by 2^(levels−1) = %d", o.grid, 1<<(o.levels-1))
	}

	dev, err := openDevice(o)
	if err != nil {
		return err
	}
	if !dev.IsHost() {
		defer dev.Close()
		if o.f64 {
			return fmt.Errorf("-f64 runs only with -device cpu (devices compute in float32 or narrower)")
		}
	}

	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}

	// Data: the held-out batches are kept (for the picture); training
	// batches are generated when needed, a scene being a pure function of
	// (seed, split, index).
	held := make([]*scenes.Batch, o.held)
	nHeld := 0
	for i := range held {
		if held[i], err = scenes.MakeBatch(scfg, scenes.HeldOut, i, o.batch); err != nil {
			return err
		}
		nHeld += held[i].N()
	}
	trainSrc := func(i int) (*scenes.Batch, error) { return scenes.MakeBatch(scfg, scenes.Train, i, o.batch) }
	model, err := unet.New(mcfg, o.seed)
	if err != nil {
		return err
	}
	prevSteps := 0
	if o.load != "" {
		meta, err := model.Load(o.load)
		if err != nil {
			return err
		}
		if prevSteps, err = unet.Int(meta, "steps"); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "loaded %s (trained %d steps before)\n", o.load, prevSteps)
	}
	if err := model.Place(dev); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "data: %d training scenes (generated as needed), %d held-out scenes (%d voxels), grid %d³, %d per batch\n",
		o.trainBatches*o.batch, o.held*o.batch, nHeld, o.grid, o.batch)
	fmt.Fprintf(stdout, "model: %d levels × %d convs, channels %d…%d, %d parameters, %v, algorithm %v, GOMAXPROCS %d\n",
		mcfg.Levels, mcfg.Convs, mcfg.Channels, mcfg.Channels<<(mcfg.Levels-1), model.NumParams(), mcfg.DType, algo, runtime.GOMAXPROCS(0))
	fmt.Fprintf(stdout, "device: %s, activations %v\n", dev.Name(), dev.Activations())
	fmt.Fprintf(stdout, "setup %.1fs\n", time.Since(start).Seconds())

	// Training.
	steps := o.epochs * o.trainBatches
	if o.steps > 0 {
		steps = min(steps, o.steps)
	}
	trainer, err := unet.NewTrainer(model, o.lr)
	if err != nil {
		return err
	}
	var last trainStats
	stopProfile, err := recordTo(o.cpuprof, pprof.StartCPUProfile, pprof.StopCPUProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	stopTrace, err := recordTo(o.trace, trace.Start, trace.Stop)
	if err != nil {
		return err
	}
	defer stopTrace()
	if steps > 0 {
		t0 := time.Now()
		if last, err = trainLoop(trainer, trainSrc, steps, o, stdout, stderr); err != nil {
			return err
		}
		d := time.Since(t0)
		fmt.Fprintf(stdout, "trained %d steps in %.1fs (%.1f ms/step)\n", steps, d.Seconds(), 1000*d.Seconds()/float64(steps))
		if !dev.IsHost() {
			fmt.Fprintf(stdout, "copied per step: %s\n", perStep(last.xfer, steps))
			if mb := last.mapBytes / int64(steps); mb > 0 {
				fmt.Fprintf(stdout, "  plus %d bytes per step of kernel-map neighbour tables built on the host (a GPU engine uploads each on first use)\n", mb)
			}
			if trainer.Scaler != nil {
				fmt.Fprintf(stdout, "loss scale %g, %d steps skipped (overflow)\n", trainer.Scaler.Scale, trainer.Scaler.Skipped)
			}
		}
	}

	// Evaluation.
	ev, err := model.Evaluate(held, o.grid)
	if err != nil {
		return err
	}
	report(stdout, ev, last, steps)

	if save := o.save; save != "" {
		if save == "auto" {
			save = filepath.Join(o.out, "unet.safetensors")
		}
		meta := map[string]string{"steps": strconv.Itoa(prevSteps + steps), "seed": strconv.FormatUint(o.seed, 10), "grid": strconv.Itoa(o.grid)}
		if err := model.Save(save, meta); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "checkpoint: %s\n", save)
	}
	if o.png != "" && o.views > 0 {
		path := filepath.Join(o.out, o.png)
		if err := writePNG(path, o, ev, held); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "picture: %s\n", path)
	}
	// Profiled steps come last: they update the weights, after the
	// checkpoint was written.
	if o.profileSteps > 0 {
		if err := profileSteps(trainer, trainSrc, o, stdout); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "wall time %.1fs\n", time.Since(start).Seconds())
	return nil
}

// trainStats summarises the last epoch of training (and the bytes copied
// between host and device over all steps).
type trainStats struct {
	loss, acc float64
	xfer      device.Transfers
	// mapBytes counts the neighbour tables of host-built kernel maps,
	// which the device engine uploads on first use (not in xfer).
	mapBytes int64
}

// openDevice opens the device named by -device with the -precision
// activations.
func openDevice(o *options) (*device.Device, error) {
	var act sparse.DType
	switch o.precision {
	case "fp32", "float32":
		act = sparse.Float32
	case "bf16", "bfloat16":
		act = sparse.BFloat16
	case "fp16", "float16":
		act = sparse.Float16
	default:
		return nil, fmt.Errorf("-precision %q: want fp32, bf16 or fp16", o.precision)
	}
	switch o.device {
	case "cpu", "host":
		if act != sparse.Float32 {
			return nil, fmt.Errorf("-precision %s needs -device cuda or fake (the CPU computes in fp32)", o.precision)
		}
		return device.Host(), nil
	case "fake":
		return device.OpenFake(device.WithActivations(act))
	case "cuda", "gpu":
		d, err := device.OpenCUDA(o.gpu, device.WithActivations(act))
		if err != nil {
			return nil, fmt.Errorf("-device cuda: %w", err)
		}
		return d, nil
	}
	return nil, fmt.Errorf("-device %q: want cpu, cuda or fake", o.device)
}

// addTransfers returns a + b.
func addTransfers(a, b device.Transfers) device.Transfers {
	for i := range a.Up {
		a.Up[i] += b.Up[i]
	}
	for i := range a.Down {
		a.Down[i] += b.Down[i]
	}
	return a
}

// perStep formats transfers divided by the number of steps.
func perStep(t device.Transfers, steps int) string {
	var b strings.Builder
	n := int64(max(1, steps))
	fmt.Fprintf(&b, "%d bytes (", t.Total()/n)
	sep := ""
	for p := device.Params; p <= device.Other; p++ {
		if up, down := t.Up[p]/n, t.Down[p]/n; up != 0 || down != 0 {
			fmt.Fprintf(&b, "%s%v %d up %d down", sep, p, up, down)
			sep = ", "
		}
	}
	b.WriteString(")")
	return b.String()
}

// profileSteps runs -profile-steps more training steps (on the first
// training batches, after training) with per-operation timing on and
// prints the average per step: convolutions versus everything else.
// Profiled steps synchronise around every operation, so they are slower
// than the training steps timed above.
func profileSteps(t *unet.Trainer, train unet.Source, o *options, stdout io.Writer) error {
	d := t.Model.Device()
	if d.IsHost() {
		fmt.Fprintln(stdout, "profile: the CPU has no device profile (use -cpuprofile)")
		return nil
	}
	// The samples are prepared before any step is timed, so the timings
	// are of the steps alone (not of waiting for data).
	order := make([]int, 2*o.profileSteps) // device timing, then the wall-clock profile
	for i := range order {
		order[i] = i % o.trainBatches
	}
	prefetch := t.Model.Prefetch(train, order, o.grid)
	defer prefetch.Stop()
	samples := make([]*unet.Sample, len(order))
	for i := range samples {
		var err error
		if samples[i], err = prefetch.Next(); err != nil {
			return err
		}
	}
	run := func(batch []*unet.Sample) (time.Duration, error) {
		var wall time.Duration
		for i, s := range batch {
			var next *unet.Sample
			if i+1 < len(batch) {
				next = batch[i+1]
			}
			t0 := time.Now()
			if _, err := t.StepAhead(s, next); err != nil {
				return 0, fmt.Errorf("profiled step: %w", err)
			}
			wall += time.Since(t0)
		}
		return wall, nil
	}
	n := time.Duration(o.profileSteps)
	// A device that times its kernels (CUDA): the device's own account of
	// the steps, without waiting for it around every operation.
	if err := d.StartDeviceTiming(); err == nil {
		wall, err := run(samples[:o.profileSteps])
		tm, terr := d.StopDeviceTiming()
		if err != nil {
			return err
		}
		if terr != nil {
			return terr
		}
		conv, other := tm.ConvShare()
		k := float64(o.profileSteps)
		fmt.Fprintf(stdout, "device timing (%d steps, per step): stream %.2f ms = conv kernels %.2f ms + everything else %.2f ms (%.1f%%: other kernels, idle inside ops and between them); wall %.2f ms\n",
			o.profileSteps, tm.TotalMs/k, conv/k, other/k, 100*other/max(tm.TotalMs, 1e-9), ms(wall/n))
		fmt.Fprint(stdout, tm.String())
	}
	d.ResetProfile()
	d.SetProfiling(true)
	defer d.SetProfiling(false)
	wall, err := run(samples[o.profileSteps:])
	if err != nil {
		return err
	}
	p := d.Profile()
	var conv, all time.Duration
	for k, v := range p {
		all += v.Total
		if k == "conv" {
			conv += v.Total
		}
	}
	fmt.Fprintf(stdout, "wall-clock profile, waiting for the device around every op (%d steps, per step): conv %.2f ms, everything else %.2f ms, device ops %.2f ms, wall %.2f ms\n",
		o.profileSteps, ms(conv/n), ms((all-conv)/n), ms(all/n), ms(wall/n))
	fmt.Fprint(stdout, device.FormatProfile(p))
	return nil
}

// recordTo starts a recorder (CPU profile, execution trace) writing to
// the file at path and returns the function that stops it and closes the
// file; an empty path records nothing.
func recordTo(path string, start func(io.Writer) error, stop func()) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { stop(); f.Close() }, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func trainLoop(t *unet.Trainer, train unet.Source, steps int, o *options, stdout, stderr io.Writer) (trainStats, error) {
	var bar *progressbar.ProgressBar
	if !o.noBar {
		bar = progressbar.NewOptions(steps,
			progressbar.OptionSetWriter(stderr),
			progressbar.OptionSetWidth(24),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(stderr) }))
	}
	// The batch order: every epoch is a fresh permutation.
	r := rand.New(rand.NewPCG(o.seed, 0x6f72646572))
	order := make([]int, 0, steps)
	for len(order) < steps {
		for _, i := range r.Perm(o.trainBatches) {
			order = append(order, i)
		}
	}
	order = order[:steps]
	samples := t.Model.Prefetch(train, order, o.grid)
	defer samples.Stop()
	var (
		stats             trainStats
		epLoss            float64
		epOK, epN, epStep int
		smooth            = math.NaN()
	)
	epochs := (steps + o.trainBatches - 1) / o.trainBatches
	// Each step also compiles the next batch's graph while the device
	// works (Trainer.StepAhead).
	var next *unet.Sample
	if steps > 0 {
		var err error
		if next, err = samples.Next(); err != nil {
			return stats, err
		}
	}
	for step := range steps {
		if step%o.trainBatches == 0 {
			epLoss, epOK, epN, epStep = 0, 0, 0, 0
		}
		s := next
		next = nil
		if step+1 < steps {
			var err error
			if next, err = samples.Next(); err != nil {
				return stats, err
			}
		}
		res, err := t.StepAhead(s, next)
		if err != nil {
			return stats, fmt.Errorf("step %d: %w", step+1, err)
		}
		ok := 0
		for k, p := range res.Pred {
			if p == s.Batch.Labels[k] {
				ok++
			}
		}
		stats.xfer = addTransfers(stats.xfer, res.Transfers)
		stats.mapBytes += s.Maps.HostTableBytes()
		if o.logEvery > 0 && ((step+1)%o.logEvery == 0 || step == 0) {
			fmt.Fprintf(stdout, "step %d loss %.6f\n", step+1, res.Loss)
		}
		epLoss += res.Loss
		epOK += ok
		epN += len(res.Pred)
		epStep++
		if math.IsNaN(smooth) {
			smooth = res.Loss
		} else {
			smooth = 0.95*smooth + 0.05*res.Loss
		}
		stats.loss, stats.acc = epLoss/float64(epStep), float64(epOK)/float64(max(1, epN))
		epoch := step/o.trainBatches + 1
		if bar != nil {
			bar.Describe(fmt.Sprintf("epoch %d/%d  loss %.3f  acc %5.1f%%", epoch, epochs, smooth, 100*stats.acc))
			_ = bar.Add(1)
		}
		if o.noBar && ((step+1)%o.trainBatches == 0 || step == steps-1) {
			fmt.Fprintf(stdout, "epoch %d/%d  step %d/%d  loss %.4f  voxel accuracy %.1f%%\n", epoch, epochs, step+1, steps, stats.loss, 100*stats.acc)
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	return stats, nil
}

func report(w io.Writer, ev *unet.Evaluation, last trainStats, steps int) {
	if steps > 0 {
		fmt.Fprintf(w, "train (last epoch): loss %.4f, voxel accuracy %.1f%%\n", last.loss, 100*last.acc)
	}
	c := ev.Confusion
	// Chance: always predicting the most frequent held-out class.
	var best int64
	for k := range c.K {
		var n int64
		for j := range c.K {
			n += c.Counts[k*c.K+j]
		}
		best = max(best, n)
	}
	chance := float64(best) / float64(max(1, c.Total()))
	fmt.Fprintf(w, "held-out: loss %.4f, voxel accuracy %.1f%% (majority class %.1f%%), mIoU %.3f\n",
		ev.Loss, 100*c.Accuracy(), 100*chance, c.MeanIoU())
	fmt.Fprintf(w, "  %-9s %6s %9s\n", "class", "IoU", "voxels")
	for k := range c.K {
		var n int64
		for j := range c.K {
			n += c.Counts[k*c.K+j]
		}
		iou := "     -" // absent from labels and predictions
		if v, ok := c.IoU(k); ok {
			iou = fmt.Sprintf("%6.3f", v)
		}
		fmt.Fprintf(w, "  %-9s %s %9d\n", scenes.Class(k), iou, n)
	}
}

func writePNG(path string, o *options, ev *unet.Evaluation, held []*scenes.Batch) error {
	fig := &viz.Figure{
		Title: fmt.Sprintf("Sparse UNet on held-out scenes: voxel accuracy %.1f%%, mIoU %.3f\n"+
			"top view of the %d³ grid; colour = primitive type of the highest voxel", 100*ev.Confusion.Accuracy(), ev.Confusion.MeanIoU(), o.grid),
		Grid:    o.grid,
		Classes: scenes.ClassNames[:],
	}
	// The first scenes of the held-out batches, in order.
	for bi, b := range held {
		off := 0
		for si, sc := range b.Scenes {
			if len(fig.Views) == o.views {
				break
			}
			n := sc.N()
			truth := make([]int32, n)
			for k, l := range sc.Labels {
				truth[k] = int32(l)
			}
			fig.Views = append(fig.Views, viz.View{
				Title:  fmt.Sprintf("scene %d", bi*len(b.Scenes)+si+1),
				Coords: sc.Coords,
				Truth:  truth,
				Pred:   ev.Pred[bi][off : off+n],
			})
			off += n
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fig.WritePNG(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
