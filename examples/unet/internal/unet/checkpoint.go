package unet

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"gorgonia.org/tensor"

	"github.com/flexgemm-go/flexgemm/examples/unet/internal/safetensors"
)

// ErrCheckpoint reports a checkpoint that does not fit the model.
var ErrCheckpoint = errors.New("unet: checkpoint does not match the model")

// Save writes the parameters, in model order, and the configuration (plus
// extra, e.g. the number of steps trained) as a safetensors file. A model
// placed on a device is copied back to Params first.
func (m *Model) Save(path string, extra map[string]string) error {
	if err := m.Sync(); err != nil {
		return err
	}
	ts := make([]safetensors.Tensor, len(m.Params))
	for i, p := range m.Params {
		t, err := safetensors.NewTensor(p.Name, p.Value.Shape(), p.Value.Data())
		if err != nil {
			return err
		}
		ts[i] = t
	}
	meta := m.Config.metadata()
	for k, v := range extra {
		if _, clash := meta[k]; clash {
			return fmt.Errorf("%w: metadata key %q is reserved", ErrCheckpoint, k)
		}
		meta[k] = v
	}
	return safetensors.Save(path, ts, meta)
}

// Load reads a checkpoint written by Save (or by any safetensors writer
// with the same names) into the model's parameters and returns its
// metadata. The configuration recorded in the file, every name, shape and
// dtype must match the model exactly; on any mismatch nothing is changed
// and the error (wrapping ErrCheckpoint or safetensors.ErrFormat) names it.
// On a device the loaded values are copied there.
func (m *Model) Load(path string) (map[string]string, error) {
	f, err := safetensors.Load(path)
	if err != nil {
		return nil, err
	}
	if err := m.checkMetadata(f.Metadata); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	want := make(map[string]Param, len(m.Params))
	for _, p := range m.Params {
		want[p.Name] = p
	}
	got := make(map[string]bool, len(f.Tensors))
	for _, t := range f.Tensors {
		p, ok := want[t.Name]
		if !ok {
			return nil, fmt.Errorf("%s: %w: unexpected tensor %q", path, ErrCheckpoint, t.Name)
		}
		got[t.Name] = true
		if s := p.Value.Shape(); !slices.Equal([]int(s), t.Shape) {
			return nil, fmt.Errorf("%s: %w: %q has shape %v, the model needs %v", path, ErrCheckpoint, t.Name, t.Shape, []int(s))
		}
		if dt := dtypeName(p.Value.Dtype()); dt != t.DType {
			return nil, fmt.Errorf("%s: %w: %q is %s, the model needs %s", path, ErrCheckpoint, t.Name, t.DType, dt)
		}
	}
	for _, p := range m.Params {
		if !got[p.Name] {
			return nil, fmt.Errorf("%s: %w: tensor %q is missing", path, ErrCheckpoint, p.Name)
		}
	}
	for _, p := range m.Params {
		t, _ := f.Get(p.Name)
		switch dst := p.Value.Data().(type) {
		case []float32:
			copy(dst, t.Data.([]float32))
		case []float64:
			copy(dst, t.Data.([]float64))
		}
	}
	if m.dev != nil && !m.dev.IsHost() {
		m.freeDevice()
		if err := m.upload(); err != nil {
			return nil, err
		}
	}
	meta := maps.Clone(f.Metadata)
	for k := range m.Config.metadata() {
		delete(meta, k)
	}
	return meta, nil
}

func (m *Model) checkMetadata(meta map[string]string) error {
	for k, want := range m.Config.metadata() {
		got, ok := meta[k]
		if !ok {
			return fmt.Errorf("%w: metadata %q is missing (not written by this example?)", ErrCheckpoint, k)
		}
		if got != want {
			return fmt.Errorf("%w: it was saved with %s=%s, the model has %s=%s%s", ErrCheckpoint, k, got, k, want, flagHint(k))
		}
	}
	return nil
}

func flagHint(k string) string {
	switch k {
	case "channels", "levels", "convs":
		return " (set -" + k + ")"
	case "dtype":
		return " (set -f64 accordingly)"
	}
	return ""
}

func dtypeName(dt tensor.Dtype) safetensors.DType {
	if dt == tensor.Float64 {
		return safetensors.F64
	}
	return safetensors.F32
}

// Int reads an integer metadata value, 0 if absent.
func Int(meta map[string]string, key string) (int, error) {
	s, ok := meta[key]
	if !ok {
		return 0, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%w: metadata %q = %q is not an integer", ErrCheckpoint, key, s)
	}
	return v, nil
}
