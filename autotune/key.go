package autotune

import (
	"cmp"
	"fmt"
	"math/bits"
	"time"
)

// Device identifies the processor a choice was measured on. Two devices
// are the same only if every field matches, so an H200 NVL never reuses an
// H200 SXM's entries.
type Device struct {
	// Name is the driver's device name, e.g. "NVIDIA H200".
	Name string `json:"name"`
	// SMs is the number of streaming multiprocessors (CPU: cores).
	SMs int `json:"sms"`
	// Major and Minor are the compute capability (0 and 0 on a CPU).
	Major int `json:"cc_major"`
	Minor int `json:"cc_minor"`
}

// Validate reports a device without a name or with negative counts.
func (d Device) Validate() error {
	if d.Name == "" {
		return fmt.Errorf("%w: device has no name", ErrKey)
	}
	if d.SMs < 0 || d.Major < 0 || d.Minor < 0 {
		return fmt.Errorf("%w: device %q has negative SM count %d or compute capability %d.%d", ErrKey, d.Name, d.SMs, d.Major, d.Minor)
	}
	return nil
}

// String formats d as "NVIDIA H200 (sm_90, 132 SMs)".
func (d Device) String() string {
	return fmt.Sprintf("%s (sm_%d%d, %d SMs)", d.Name, d.Major, d.Minor, d.SMs)
}

func compareDevice(a, b Device) int {
	return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Major, b.Major), cmp.Compare(a.Minor, b.Minor), cmp.Compare(a.SMs, b.SMs))
}

// Direction is the pass of a convolution a kernel computes.
type Direction string

// The three passes of a convolution.
const (
	Fwd   Direction = "fwd"   // forward: y from x and w
	DGrad Direction = "dgrad" // input gradient: dx from dy and w
	WGrad Direction = "wgrad" // weight gradient: dw from x and dy
)

// Common operation names for Key.Op.
const (
	OpSubmConv   = "subm_conv"   // submanifold convolution
	OpSparseConv = "sparse_conv" // strided, transposed or inverse sparse convolution
)

// DTypes lists the dtype names a Key accepts.
var DTypes = []string{"fp16", "bf16", "fp32", "fp64"}

// Key names a tuning problem. It is comparable, so it can key a map.
type Key struct {
	// Device is the processor; the cache file stores it once per section.
	Device Device `json:"-"`
	// Op is the operation, e.g. OpSubmConv. Lower-case letters, digits and
	// '_' only.
	Op string `json:"op"`
	// Dir is the pass.
	Dir Direction `json:"dir"`
	// DType is the storage dtype of the features, one of DTypes.
	DType string `json:"dtype"`
	// TF32 says that fp32 matrix products may use TF32 tensor cores. Only
	// valid with DType "fp32".
	TF32 bool `json:"tf32"`
	// V is the kernel volume (27 for 3×3×3).
	V int `json:"v"`
	// Ci and Co are the input and output channel counts.
	Ci int `json:"ci"`
	Co int `json:"co"`
	// LogN is Bucket(N) of the problem's row count N.
	LogN int `json:"log2n"`
}

// Bucket returns the row-count bucket of a key: ⌊log2 n⌋ for n ≥ 1 and −1
// for n ≤ 0, so an empty problem has its own bucket instead of an error.
func Bucket(n int) int {
	if n <= 0 {
		return -1
	}
	return bits.Len(uint(n)) - 1
}

// Validate reports every field of k that cannot be part of a key.
func (k Key) Validate() error {
	if err := k.Device.Validate(); err != nil {
		return err
	}
	if err := validateProblem(k); err != nil {
		return err
	}
	return nil
}

func validateProblem(k Key) error {
	if k.Op == "" {
		return fmt.Errorf("%w: empty op", ErrKey)
	}
	for _, r := range k.Op {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return fmt.Errorf("%w: op %q may hold only a-z, 0-9 and '_'", ErrKey, k.Op)
		}
	}
	switch k.Dir {
	case Fwd, DGrad, WGrad:
	default:
		return fmt.Errorf("%w: direction %q (want fwd, dgrad or wgrad)", ErrKey, k.Dir)
	}
	known := false
	for _, d := range DTypes {
		known = known || d == k.DType
	}
	if !known {
		return fmt.Errorf("%w: dtype %q (want one of %v)", ErrKey, k.DType, DTypes)
	}
	if k.TF32 && k.DType != "fp32" {
		return fmt.Errorf("%w: tf32 set with dtype %q (only fp32 can use TF32)", ErrKey, k.DType)
	}
	if k.V < 1 || k.Ci < 1 || k.Co < 1 {
		return fmt.Errorf("%w: V=%d Ci=%d Co=%d must all be positive", ErrKey, k.V, k.Ci, k.Co)
	}
	if k.LogN < -1 || k.LogN > 62 {
		return fmt.Errorf("%w: log2 N bucket %d outside [-1, 62]", ErrKey, k.LogN)
	}
	return nil
}

// String formats the key for people, e.g.
// "subm_conv fwd fp32+tf32 V=27 Ci=64 Co=64 N~2^14 on NVIDIA H200 (sm_90, 132 SMs)".
func (k Key) String() string {
	return k.problemString() + " on " + k.Device.String()
}

func (k Key) problemString() string {
	dt := k.DType
	if k.TF32 {
		dt += "+tf32"
	}
	n := fmt.Sprintf("2^%d", k.LogN)
	if k.LogN < 0 {
		n = "0"
	}
	return fmt.Sprintf("%s %s %s V=%d Ci=%d Co=%d N~%s", k.Op, k.Dir, dt, k.V, k.Ci, k.Co, n)
}

func compareKey(a, b Key) int {
	return cmp.Or(compareDevice(a.Device, b.Device),
		cmp.Compare(a.Op, b.Op), cmp.Compare(a.Dir, b.Dir), cmp.Compare(a.DType, b.DType),
		cmp.Compare(b2i(a.TF32), b2i(b.TF32)), cmp.Compare(a.V, b.V), cmp.Compare(a.Ci, b.Ci),
		cmp.Compare(a.Co, b.Co), cmp.Compare(a.LogN, b.LogN))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Candidate is one way to run a problem. It is comparable.
type Candidate struct {
	// Algorithm is the algorithm name, e.g. "masked_implicit_gemm_splitk".
	Algorithm string `json:"algo"`
	// Tile names the tile configuration, e.g. "b64x128x32_s4_w4"; empty
	// when the algorithm has none.
	Tile string `json:"tile,omitempty"`
	// SplitK is the split-K factor; 0 or 1 means no split.
	SplitK int `json:"split_k,omitempty"`
}

// String formats c as "algorithm[/tile][/splitk=n]".
func (c Candidate) String() string {
	s := c.Algorithm
	if c.Tile != "" {
		s += "/" + c.Tile
	}
	if c.SplitK > 1 {
		s += fmt.Sprintf("/splitk=%d", c.SplitK)
	}
	return s
}

func (c Candidate) validate() error {
	if c.Algorithm == "" {
		return fmt.Errorf("%w: candidate %+v has no algorithm", ErrCandidate, c)
	}
	if c.SplitK < 0 {
		return fmt.Errorf("%w: candidate %v has negative split-K %d", ErrCandidate, c, c.SplitK)
	}
	return nil
}

// Choice is the candidate picked for a key and how it was picked.
type Choice struct {
	Candidate
	// Time is the median measured time of one launch; 0 when not measured.
	Time time.Duration `json:"time_ns,omitempty"`
	// Heuristic marks a choice that was not measured (a default in a
	// pre-tuned table, or the heuristic function's pick).
	Heuristic bool `json:"heuristic,omitempty"`
	// Tried and Total count the candidates measured and offered when the
	// choice was tuned; Tried < Total means the budget ran out first.
	Tried int `json:"tried,omitempty"`
	Total int `json:"total,omitempty"`
}

func (c Choice) validate() error {
	if err := c.Candidate.validate(); err != nil {
		return err
	}
	if c.Time < 0 || c.Tried < 0 || c.Total < 0 || c.Tried > c.Total {
		return fmt.Errorf("%w: choice %v has time %v, tried %d of %d", ErrCandidate, c.Candidate, c.Time, c.Tried, c.Total)
	}
	if !c.Heuristic && c.Time == 0 {
		return fmt.Errorf("%w: choice %v is neither measured nor marked heuristic", ErrCandidate, c.Candidate)
	}
	return nil
}

// Source says where a Tuner's choice came from.
type Source int

// The sources of a choice.
const (
	// FromCache is an entry of the user's cache file (or this process).
	FromCache Source = iota
	// FromPretuned is an entry of the table embedded in the module.
	FromPretuned
	// FromMeasurement is a fresh measurement by the Tuner.
	FromMeasurement
	// FromHeuristic is the heuristic function's pick; nothing was measured.
	FromHeuristic
)

// String returns "cache", "pretuned", "measured" or "heuristic".
func (s Source) String() string {
	switch s {
	case FromCache:
		return "cache"
	case FromPretuned:
		return "pretuned"
	case FromMeasurement:
		return "measured"
	case FromHeuristic:
		return "heuristic"
	}
	return fmt.Sprintf("Source(%d)", int(s))
}
