package unet

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"gorgonia.org/tensor"

	"github.com/flexgemm-go/flexgemm/examples/unet/internal/safetensors"
	"github.com/flexgemm-go/flexgemm/examples/unet/internal/scenes"
)

func tinyConfig() Config {
	c := DefaultConfig(scenes.NumClasses)
	c.Channels, c.Levels = 4, 2
	return c
}

func tinyData(t *testing.T, m *Model, batches int) []*Sample {
	t.Helper()
	ds, err := scenes.NewDataset(scenes.Config{Grid: 16, MinShapes: 1, MaxShapes: 3, Seed: 5}, 2, batches, 0)
	require.NoError(t, err)
	out := make([]*Sample, len(ds.Train))
	for i, b := range ds.Train {
		out[i], err = m.Prepare(b, 16)
		require.NoError(t, err)
	}
	return out
}

func TestNewAndParams(t *testing.T) {
	cfg := DefaultConfig(4)
	m, err := New(cfg, 1)
	require.NoError(t, err)
	names := map[string]bool{}
	for _, p := range m.Params {
		require.False(t, names[p.Name], "unique names")
		names[p.Name] = true
		require.Equal(t, cfg.DType, p.Value.Dtype())
	}
	for _, n := range []string{"enc0.conv1.weight", "enc0.norm1.gamma", "down1.conv.weight", "enc2.norm1.beta", "up1.conv.weight", "dec0.conv1.weight", "head.weight", "head.bias"} {
		require.True(t, names[n], n)
	}
	shape := func(name string) tensor.Shape {
		for _, p := range m.Params {
			if p.Name == name {
				return p.Value.Shape()
			}
		}
		return nil
	}
	require.Equal(t, tensor.Shape{8, 3, 3, 3, 1}, shape("enc0.conv1.weight"))
	require.Equal(t, tensor.Shape{16, 2, 2, 2, 8}, shape("down1.conv.weight"))
	require.Equal(t, tensor.Shape{16, 2, 2, 2, 32}, shape("up1.conv.weight"))
	require.Equal(t, tensor.Shape{8, 3, 3, 3, 16}, shape("dec0.conv1.weight"))
	require.Equal(t, tensor.Shape{4, 1, 1, 1, 8}, shape("head.weight"))
	// Same seed, same weights; other seed, other weights.
	m2, err := New(cfg, 1)
	require.NoError(t, err)
	m3, err := New(cfg, 2)
	require.NoError(t, err)
	require.Equal(t, m.Params[0].Value.Data(), m2.Params[0].Value.Data())
	require.NotEqual(t, m.Params[0].Value.Data(), m3.Params[0].Value.Data())
}

func TestConfigErrors(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.Channels = 0 },
		func(c *Config) { c.Levels = 0 },
		func(c *Config) { c.Levels = 9 },
		func(c *Config) { c.Classes = 1 },
		func(c *Config) { c.Convs = 0 },
		func(c *Config) { c.InChannels = 0 },
		func(c *Config) { c.Eps = 0 },
		func(c *Config) { c.DType = tensor.Int32 },
	} {
		c := DefaultConfig(4)
		mod(&c)
		_, err := New(c, 1)
		require.ErrorIs(t, err, ErrConfig)
	}
	c := DefaultConfig(4)
	c.Algorithm = 99
	_, err := New(c, 1)
	require.Error(t, err)
	_, err = NewTrainer(&Model{}, 0)
	require.ErrorIs(t, err, ErrConfig)
}

func TestBuildMaps(t *testing.T) {
	m, err := New(DefaultConfig(4), 1)
	require.NoError(t, err)
	s := tinyData(t, m, 1)[0]
	mp := s.Maps
	require.Len(t, mp.Sub, 3)
	require.Nil(t, mp.Down[0])
	require.Equal(t, s.Batch.N(), mp.Sub[0].NIn)
	require.Equal(t, s.Batch.N(), mp.Head.NOut)
	for l := 1; l < 3; l++ {
		require.Equal(t, mp.Sub[l-1].NOut, mp.Down[l].NIn)
		require.Equal(t, mp.Down[l].NOut, mp.Sub[l].NIn)
		require.Less(t, mp.Down[l].NOut, mp.Down[l].NIn, "down-sampling shrinks")
		require.Equal(t, mp.Down[l].NOut, mp.Up[l-1].NIn)
		require.Equal(t, mp.Down[l].NIn, mp.Up[l-1].NOut)
	}
	// Host-built maps: every neighbour table counts, 4 bytes an entry.
	want := int64(len(mp.Head.Nbr)) * 4
	for l := range 3 {
		want += int64(len(mp.Sub[l].Nbr)) * 4
		if l > 0 {
			want += int64(len(mp.Down[l].Nbr)+len(mp.Up[l-1].Nbr)) * 4
		}
	}
	require.Equal(t, want, mp.HostTableBytes())
	require.Zero(t, (*Maps)(nil).HostTableBytes())
	_, err = BuildMaps(nil, s.Maps.Sub[0].In, 0)
	require.ErrorIs(t, err, ErrConfig)
	// Maps of the wrong depth are refused when building the graph.
	m2, err := New(tinyConfig(), 1)
	require.NoError(t, err)
	_, err = m2.Build(s.X, s.Maps)
	require.ErrorIs(t, err, ErrConfig)
}

// TestTrainingLearns runs a few Adam steps on a tiny problem: the loss on
// the training batches must fall well below its starting value, and two
// runs from the same seed must give bit-identical weights, whatever the
// number of threads.
func TestTrainingLearns(t *testing.T) {
	train := func() (*Model, []float64) {
		m, err := New(tinyConfig(), 3)
		require.NoError(t, err)
		tr, err := NewTrainer(m, 0.02)
		require.NoError(t, err)
		data := tinyData(t, m, 2)
		var losses []float64
		for step := range 16 {
			r, err := tr.Step(data[step%len(data)])
			require.NoError(t, err)
			require.Len(t, r.Pred, data[step%len(data)].Batch.N())
			losses = append(losses, r.Loss)
		}
		return m, losses
	}
	m, losses := train()
	first := (losses[0] + losses[1]) / 2
	last := (losses[len(losses)-2] + losses[len(losses)-1]) / 2
	require.Less(t, last, 0.8*first, "loss %v", losses)
	// A second run, on one thread, gives the same bits.
	old := runtime.GOMAXPROCS(1)
	m2, losses2 := train()
	runtime.GOMAXPROCS(old)
	require.Equal(t, losses, losses2)
	for i := range m.Params {
		require.Equal(t, m.Params[i].Value.Data(), m2.Params[i].Value.Data(), m.Params[i].Name)
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	m, err := New(tinyConfig(), 3)
	require.NoError(t, err)
	tr, err := NewTrainer(m, 0.02)
	require.NoError(t, err)
	data := tinyData(t, m, 1)
	_, err = tr.Step(data[0])
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "ck.safetensors")
	require.NoError(t, m.Save(path, map[string]string{"steps": "1"}))

	fresh, err := New(tinyConfig(), 99)
	require.NoError(t, err)
	meta, err := fresh.Load(path)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"steps": "1"}, meta)
	steps, err := Int(meta, "steps")
	require.NoError(t, err)
	require.Equal(t, 1, steps)
	for i := range m.Params {
		require.Equal(t, m.Params[i].Value.Data(), fresh.Params[i].Value.Data(), m.Params[i].Name)
	}
	l1, p1, err := m.Predict(data[0])
	require.NoError(t, err)
	l2, p2, err := fresh.Predict(data[0])
	require.NoError(t, err)
	require.Equal(t, l1, l2)
	require.Equal(t, p1, p2)

	require.ErrorIs(t, m.Save(path, map[string]string{"channels": "3"}), ErrCheckpoint, "reserved metadata key")
}

func TestCheckpointMismatch(t *testing.T) {
	dir := t.TempDir()
	m, err := New(tinyConfig(), 3)
	require.NoError(t, err)
	path := filepath.Join(dir, "ck.safetensors")
	require.NoError(t, m.Save(path, nil))
	before := append([]float32(nil), m.Params[0].Value.Data().([]float32)...)

	f, err := safetensors.Load(path)
	require.NoError(t, err)
	rewrite := func(name string, edit func(ts []safetensors.Tensor, meta map[string]string) []safetensors.Tensor) string {
		ts := append([]safetensors.Tensor(nil), f.Tensors...)
		meta := map[string]string{}
		for k, v := range f.Metadata {
			meta[k] = v
		}
		ts = edit(ts, meta)
		p := filepath.Join(dir, name)
		require.NoError(t, safetensors.Save(p, ts, meta))
		return p
	}
	for _, tc := range []struct {
		name string
		edit func(ts []safetensors.Tensor, meta map[string]string) []safetensors.Tensor
		msg  string
	}{
		{"channels", func(ts []safetensors.Tensor, meta map[string]string) []safetensors.Tensor {
			meta["channels"] = "8"
			return ts
		}, "channels=8, the model has channels=4 (set -channels)"},
		{"no metadata", func(ts []safetensors.Tensor, meta map[string]string) []safetensors.Tensor {
			clear(meta)
			return ts
		}, "is missing"},
		{"renamed", func(ts []safetensors.Tensor, _ map[string]string) []safetensors.Tensor {
			ts[0].Name = "enc0.conv1.kernel"
			return ts
		}, `unexpected tensor "enc0.conv1.kernel"`},
		{"missing", func(ts []safetensors.Tensor, _ map[string]string) []safetensors.Tensor {
			return ts[1:]
		}, `tensor "enc0.conv1.weight" is missing`},
		{"shape", func(ts []safetensors.Tensor, _ map[string]string) []safetensors.Tensor {
			ts[0].Shape = []int{4, 3, 3, 1, 3}
			return ts
		}, "has shape [4 3 3 1 3], the model needs [4 3 3 3 1]"},
		{"dtype", func(ts []safetensors.Tensor, _ map[string]string) []safetensors.Tensor {
			d := ts[1].Data.([]float32)
			f64 := make([]float64, len(d))
			for i, v := range d {
				f64[i] = float64(v)
			}
			ts[1].DType, ts[1].Data = safetensors.F64, f64
			return ts
		}, "is F64, the model needs F32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := rewrite(tc.name+".safetensors", tc.edit)
			_, err := m.Load(p)
			require.ErrorIs(t, err, ErrCheckpoint)
			require.ErrorContains(t, err, tc.msg)
			require.Equal(t, before, m.Params[0].Value.Data(), "a failed load changes nothing")
		})
	}
	// A truncated file is a format error.
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	bad := filepath.Join(dir, "truncated.safetensors")
	require.NoError(t, os.WriteFile(bad, b[:len(b)-3], 0o644))
	_, err = m.Load(bad)
	require.ErrorIs(t, err, safetensors.ErrFormat)
	_, err = m.Load(filepath.Join(dir, "absent"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestConfusion(t *testing.T) {
	c := NewConfusion(3)
	require.NoError(t, c.Add([]int32{0, 0, 1, 1, 1, 2, -1}, []int32{0, 1, 1, 1, 0, 1, 2}))
	require.Error(t, c.Add([]int32{0}, nil))
	require.Equal(t, int64(6), c.Total())
	require.InDelta(t, 3.0/6, c.Accuracy(), 1e-15)
	iou0, ok := c.IoU(0) // tp 1, fn 1, fp 1
	require.True(t, ok)
	require.InDelta(t, 1.0/3, iou0, 1e-15)
	iou1, _ := c.IoU(1) // tp 2, fn 1, fp 2
	require.InDelta(t, 2.0/5, iou1, 1e-15)
	iou2, ok := c.IoU(2) // tp 0, fn 1
	require.True(t, ok)
	require.Equal(t, 0.0, iou2)
	require.InDelta(t, (1.0/3+2.0/5)/3, c.MeanIoU(), 1e-15)
	e := NewConfusion(2)
	_, ok = e.IoU(1)
	require.False(t, ok)
	require.Equal(t, 0.0, e.Accuracy())
	require.Equal(t, 0.0, e.MeanIoU())
}

func TestEvaluateAndPrefetch(t *testing.T) {
	m, err := New(tinyConfig(), 3)
	require.NoError(t, err)
	ds, err := scenes.NewDataset(scenes.Config{Grid: 16, MinShapes: 1, MaxShapes: 3, Seed: 5}, 2, 3, 0)
	require.NoError(t, err)
	ev, err := m.Evaluate(ds.Train, 16)
	require.NoError(t, err)
	require.Len(t, ev.Pred, 3)
	want := NewConfusion(m.Config.Classes)
	loss := 0.0
	for i, b := range ds.Train {
		s, err := m.Prepare(b, 16)
		require.NoError(t, err)
		l, pred, err := m.Predict(s)
		require.NoError(t, err)
		require.Equal(t, pred, ev.Pred[i])
		require.NoError(t, want.Add(b.Labels, pred))
		loss += l / 3
	}
	require.Equal(t, want.Counts, ev.Confusion.Counts)
	require.InDelta(t, loss, ev.Loss, 1e-12)

	// Order is respected, a bad index is an error, Stop never blocks.
	p := m.Prefetch(FromSlice(ds.Train), []int{2, 0, 7}, 16)
	s, err := p.Next()
	require.NoError(t, err)
	require.Same(t, ds.Train[2], s.Batch)
	s, err = p.Next()
	require.NoError(t, err)
	require.Same(t, ds.Train[0], s.Batch)
	_, err = p.Next()
	require.ErrorIs(t, err, ErrConfig)
	_, err = p.Next()
	require.ErrorIs(t, err, ErrConfig, "exhausted")
	p.Stop()
	p.Stop()
	early := m.Prefetch(FromSlice(ds.Train), []int{0, 1, 2}, 16)
	early.Stop()
}
