package kernels

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"embed"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

//go:embed images/*.fatbin images/*.ptx.gz images/*.cubin.gz
var imageFS embed.FS

//go:embed manifest.txt
var manifest string

// EnvImage is the environment variable that overrides embedded images.
const EnvImage = "FLEXGEMM_KERNEL_IMAGE"

// EnvHopperPTX is the environment variable that, set to 1, makes Images
// return the Hopper modules' embedded sm_90a PTX (which the driver
// compiles at the first load, 80-100 s on an H200, then caches) instead of
// their embedded sm_90a cubins, compiled from that PTX by build.sh.
const EnvHopperPTX = "FLEXGEMM_HOPPER_PTX"

// Manifest returns the build manifest of the embedded images.
func Manifest() string { return manifest }

var (
	kernelIndexOnce sync.Once
	kernelIndex     map[string]string
	kernelWaits     map[string]string // kernel → module, of the "waits" lines
)

func indexKernels() {
	kernelIndexOnce.Do(func() {
		kernelIndex = map[string]string{}
		kernelWaits = map[string]string{}
		entries, _, _, _ := ParseManifest(manifest)
		for _, e := range entries {
			switch e.Kind {
			case "kernel":
				kernelIndex[e.Name] = e.Module
			case "waits":
				kernelWaits[e.Name] = e.Module
			}
		}
	})
}

// KernelModule returns the module (image name) that defines kernel name,
// according to the manifest of the embedded images.
func KernelModule(name string) (module string, ok bool) {
	indexKernels()
	module, ok = kernelIndex[name]
	return
}

// KernelWaits reports whether kernel name, as built into the embedded
// image of module, waits for the grids ahead of it before it touches
// global memory (fg_await_prior_grid, pdl.cuh; a "waits" line of the
// manifest, read from the kernel's compute_90 PTX): only such a kernel may
// be launched with programmatic stream serialization, on compute
// capability 9.0 and up. An image loaded from EnvImage is not the embedded
// one: the caller must not take this answer for it.
func KernelWaits(module, name string) bool {
	indexKernels()
	m, ok := kernelWaits[name]
	return ok && m == module
}

// Image is one loadable module image.
type Image struct {
	// Name is the module name: the source file's base name without ".cu".
	Name string
	// Data is a fatbin, cubin or NUL-terminated PTX.
	Data []byte
	// Source says where the image came from: "embedded" or a file path.
	Source string
}

// Images returns every module image, sorted by name: the embedded ones,
// with those named by FLEXGEMM_KERNEL_IMAGE replacing (or adding to) them.
// A Hopper module is embedded twice, as sm_90a PTX (X.ptx.gz) and as the
// sm_90a cubin build.sh compiled from it (X.cubin.gz): Images returns the
// cubin, or the PTX when FLEXGEMM_HOPPER_PTX=1.
func Images() ([]Image, error) {
	entries, err := imageFS.ReadDir("images")
	if err != nil {
		return nil, fmt.Errorf("kernels: reading embedded images: %w", err)
	}
	want := ".cubin.gz"
	switch v := os.Getenv(EnvHopperPTX); v {
	case "", "0":
	case "1":
		want = ".ptx.gz"
	default:
		return nil, fmt.Errorf("kernels: %s=%q: want 1 (load the Hopper PTX) or 0 (the cubins)", EnvHopperPTX, v)
	}
	byName := map[string]Image{}
	for _, e := range entries {
		name, ext := e.Name(), filepath.Ext(e.Name())
		for _, gz := range []string{".ptx.gz", ".cubin.gz"} {
			if strings.HasSuffix(name, gz) {
				ext = gz
			}
		}
		name = strings.TrimSuffix(name, ext)
		if _, ok := byName[name]; ok && ext != want {
			continue // the other form of a Hopper module, already read
		}
		data, err := imageFS.ReadFile("images/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("kernels: reading embedded image %s: %w", e.Name(), err)
		}
		if strings.HasSuffix(ext, ".gz") {
			if data, err = gunzip(data); err != nil {
				return nil, fmt.Errorf("kernels: embedded image %s: %w", e.Name(), err)
			}
		}
		if ext == ".ptx.gz" {
			data = append(data, 0) // the driver wants NUL-terminated PTX
		}
		byName[name] = Image{Name: name, Data: data, Source: "embedded"}
	}
	if path := os.Getenv(EnvImage); path != "" {
		over, err := overrides(path)
		if err != nil {
			return nil, err
		}
		for _, im := range over {
			byName[im.Name] = im
		}
	}
	out := make([]Image, 0, len(byName))
	for _, im := range byName {
		out = append(out, im)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// gunzip returns the decompressed content of a gzip stream.
func gunzip(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func overrides(path string) ([]Image, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("kernels: %s=%q: %w", EnvImage, path, err)
	}
	files := []string{path}
	if st.IsDir() {
		files = nil
		for _, ext := range []string{".fatbin", ".cubin", ".ptx"} {
			m, _ := filepath.Glob(filepath.Join(path, "*"+ext))
			files = append(files, m...)
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("kernels: %s=%q: no .fatbin, .cubin or .ptx files", EnvImage, path)
		}
	}
	var out []Image
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("kernels: %s: %w", EnvImage, err)
		}
		ext := filepath.Ext(f)
		if ext == ".ptx" {
			data = append(data, 0) // the driver wants NUL-terminated PTX
		}
		out = append(out, Image{Name: strings.TrimSuffix(filepath.Base(f), ext), Data: data, Source: f})
	}
	return out, nil
}

// ManifestEntry is one "source", "image", "cubin", "kernel" or "waits"
// line of the manifest. Kernel and waits lines have Module and Name (the
// kernel symbol) and no SHA256; a waits line says that the kernel's code
// waits for the grids ahead of it (KernelWaits). A cubin line's Name is a
// Hopper module and its SHA256 that of the PTX image (X.ptx.gz) its cubin
// (X.cubin.gz) was compiled from.
type ManifestEntry struct {
	Kind, SHA256, Name, Module string
}

// ParseManifest returns the source and image lines of a manifest and its
// nvcc and flags lines.
func ParseManifest(text string) (entries []ManifestEntry, nvcc, flags string, err error) {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, rest, _ := strings.Cut(line, " ")
		switch key {
		case "nvcc":
			nvcc = rest
		case "flags":
			flags = rest
		case "common", "ptxas":
		case "source", "image", "cubin", "kernel", "waits":
			f := strings.Fields(rest)
			if len(f) != 2 {
				return nil, "", "", fmt.Errorf("kernels: bad manifest line %q", line)
			}
			if key == "kernel" || key == "waits" {
				entries = append(entries, ManifestEntry{Kind: key, Module: f[0], Name: f[1]})
			} else {
				entries = append(entries, ManifestEntry{Kind: key, SHA256: f[0], Name: f[1]})
			}
		default:
			return nil, "", "", fmt.Errorf("kernels: bad manifest line %q", line)
		}
	}
	return entries, nvcc, flags, sc.Err()
}
