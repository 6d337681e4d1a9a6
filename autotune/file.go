package autotune

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Format is the value of the "format" field that marks a file as an
// autotune cache of this package.
const Format = "flexgemm-go/autotune"

// Schema is the version of the cache file layout this package writes.
//
// Schema 2 (current) holds one section per device with structured keys:
//
//	{"format": "flexgemm-go/autotune", "schema": 2, "note": "…",
//	 "devices": [{"device": {"name": "NVIDIA H200", "sms": 132, "cc_major": 9, "cc_minor": 0},
//	              "entries": [{"key": {"op": "subm_conv", "dir": "fwd", "dtype": "fp16", "tf32": false,
//	                                   "v": 27, "ci": 64, "co": 64, "log2n": 14},
//	                           "choice": {"algo": "masked_implicit_gemm_splitk", "tile": "…", "split_k": 2,
//	                                      "time_ns": 81250, "tried": 8, "total": 8},
//	                           "updated": "2026-11-29T10:00:00Z"}]}]}
//
// Schema 1 was the first layout of this package, with string keys in the
// style of FlexGEMM's file:
//
//	{"format": "flexgemm-go/autotune", "schema": 1,
//	 "devices": {"NVIDIA H200|132|9.0": {"subm_conv|fwd|fp16|0|27|64|64|14":
//	             {"algo": "…", "tile": "…", "split_k": 2, "time_us": 81.25}}}}
//
// where the key fields are op|dir|dtype|tf32(0 or 1)|V|Ci|Co|log2n. It is
// migrated on load; entries whose strings do not parse are dropped with a
// warning.
const Schema = 2

// Entry is one cached choice.
type Entry struct {
	Key    Key
	Choice Choice
	// Updated is when the choice was stored; for one key the most recent
	// entry wins when files are merged. Zero for pre-tuned entries.
	Updated time.Time
}

type fileV2 struct {
	Format  string      `json:"format"`
	Schema  int         `json:"schema"`
	Note    string      `json:"note,omitempty"`
	Devices []sectionV2 `json:"devices"`
}

type sectionV2 struct {
	Device  Device    `json:"device"`
	Entries []entryV2 `json:"entries"`
}

type entryV2 struct {
	Key     Key       `json:"key"`
	Choice  Choice    `json:"choice"`
	Updated time.Time `json:"updated,omitzero"`
}

type fileV1 struct {
	Devices map[string]map[string]choiceV1 `json:"devices"`
}

type choiceV1 struct {
	Algo   string  `json:"algo"`
	Tile   string  `json:"tile"`
	SplitK int     `json:"split_k"`
	TimeUS float64 `json:"time_us"`
}

// fileState classifies a cache file after decoding.
type fileState int

const (
	stateMissing fileState = iota // no file: nothing to do
	stateOK                       // current schema, every entry valid
	stateRewrite                  // readable, but should be rewritten (migrated, or entries dropped)
	stateRebuild                  // unreadable (corrupt, foreign, unknown old schema): move aside and rebuild
	stateNewer                    // written by a newer version: leave it alone
)

type loaded struct {
	state    fileState
	entries  map[Key]Entry
	note     string
	warnings []error
}

// readFile reads and decodes the cache file at path. A missing file is not
// an error; an unreadable one is returned as an ErrIO error.
func readFile(path string) (loaded, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return loaded{state: stateMissing, entries: map[Key]Entry{}}, nil
	}
	if err != nil {
		return loaded{}, fmt.Errorf("%w: reading %s: %v", ErrIO, path, err)
	}
	return decodeFile(data, path), nil
}

// decodeFile decodes a cache file's bytes; name is used in warnings only.
func decodeFile(data []byte, name string) loaded {
	l := loaded{entries: map[Key]Entry{}}
	var head map[string]json.RawMessage
	if err := json.Unmarshal(data, &head); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			// Valid JSON, but not an object.
			l.state = stateRebuild
			l.warnings = append(l.warnings, fmt.Errorf("%w: %s holds a JSON %s, not an object", ErrForeign, name, typeErr.Value))
			return l
		}
		l.state = stateRebuild
		l.warnings = append(l.warnings, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err))
		return l
	}
	var format string
	if raw, ok := head["format"]; !ok || json.Unmarshal(raw, &format) != nil || format != Format {
		l.state = stateRebuild
		l.warnings = append(l.warnings, fmt.Errorf("%w: %s has no \"format\": %q marker (another program's file?)", ErrForeign, name, Format))
		return l
	}
	var schema int
	if raw, ok := head["schema"]; !ok || json.Unmarshal(raw, &schema) != nil {
		l.state = stateRebuild
		l.warnings = append(l.warnings, fmt.Errorf("%w: %s has no integer \"schema\" field", ErrCorrupt, name))
		return l
	}
	switch {
	case schema == Schema:
		return decodeV2(data, name, l)
	case schema == 1:
		return decodeV1(data, name, l)
	case schema > Schema:
		l.state = stateNewer
		l.warnings = append(l.warnings, fmt.Errorf("%w: %s has schema %d, newer than %d; it is left untouched and new choices stay in memory", ErrSchema, name, schema, Schema))
		return l
	default:
		l.state = stateRebuild
		l.warnings = append(l.warnings, fmt.Errorf("%w: %s has schema %d, which cannot be migrated; its entries are discarded", ErrSchema, name, schema))
		return l
	}
}

func decodeV2(data []byte, name string, l loaded) loaded {
	var f fileV2
	if err := json.Unmarshal(data, &f); err != nil {
		l.state = stateRebuild
		l.warnings = append(l.warnings, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err))
		return l
	}
	l.state = stateOK
	l.note = f.Note
	for _, s := range f.Devices {
		if err := s.Device.Validate(); err != nil {
			l.state = stateRewrite
			l.warnings = append(l.warnings, fmt.Errorf("%w: %s: section dropped with its %d entries: %v", ErrEntry, name, len(s.Entries), err))
			continue
		}
		for _, e := range s.Entries {
			e.Key.Device = s.Device
			if err := l.add(Entry{Key: e.Key, Choice: e.Choice, Updated: e.Updated}); err != nil {
				l.state = stateRewrite
				l.warnings = append(l.warnings, fmt.Errorf("%w: %s: %v", ErrEntry, name, err))
			}
		}
	}
	return l
}

// add inserts e, keeping the more recent of two entries for one key.
func (l *loaded) add(e Entry) error {
	if err := e.Key.Validate(); err != nil {
		return fmt.Errorf("entry dropped: %v", err)
	}
	if err := e.Choice.validate(); err != nil {
		return fmt.Errorf("entry for %v dropped: %v", e.Key, err)
	}
	old, dup := l.entries[e.Key]
	if !dup || e.Updated.After(old.Updated) {
		l.entries[e.Key] = e
	}
	if dup {
		return fmt.Errorf("two entries for %v; kept the one of %v", e.Key, l.entries[e.Key].Updated)
	}
	return nil
}

func decodeV1(data []byte, name string, l loaded) loaded {
	var f fileV1
	if err := json.Unmarshal(data, &f); err != nil {
		l.state = stateRebuild
		l.warnings = append(l.warnings, fmt.Errorf("%w: %s (schema 1): %v", ErrCorrupt, name, err))
		return l
	}
	l.state = stateRewrite
	l.warnings = append(l.warnings, fmt.Errorf("%w: %s has schema 1; migrated to schema %d", ErrSchema, name, Schema))
	devs := make([]string, 0, len(f.Devices))
	for d := range f.Devices {
		devs = append(devs, d)
	}
	slices.Sort(devs)
	for _, ds := range devs {
		dev, err := parseDeviceV1(ds)
		if err != nil {
			l.warnings = append(l.warnings, fmt.Errorf("%w: %s: schema-1 section %q dropped: %v", ErrEntry, name, ds, err))
			continue
		}
		keys := make([]string, 0, len(f.Devices[ds]))
		for k := range f.Devices[ds] {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, ks := range keys {
			c := f.Devices[ds][ks]
			k, err := parseKeyV1(ks)
			if err == nil {
				k.Device = dev
				ch := Choice{
					Candidate: Candidate{Algorithm: c.Algo, Tile: c.Tile, SplitK: c.SplitK},
					Time:      time.Duration(c.TimeUS * float64(time.Microsecond)),
				}
				ch.Heuristic = ch.Time <= 0
				err = l.add(Entry{Key: k, Choice: ch})
			}
			if err != nil {
				l.warnings = append(l.warnings, fmt.Errorf("%w: %s: schema-1 entry %q dropped: %v", ErrEntry, name, ks, err))
			}
		}
	}
	return l
}

// parseDeviceV1 parses "name|sms|major.minor".
func parseDeviceV1(s string) (Device, error) {
	parts := strings.Split(s, "|")
	if len(parts) < 3 {
		return Device{}, fmt.Errorf("want name|sms|major.minor")
	}
	n := len(parts)
	sms, err := strconv.Atoi(parts[n-2])
	if err != nil {
		return Device{}, fmt.Errorf("SM count: %v", err)
	}
	maj, min, ok := strings.Cut(parts[n-1], ".")
	if !ok {
		return Device{}, fmt.Errorf("compute capability %q is not major.minor", parts[n-1])
	}
	d := Device{Name: strings.Join(parts[:n-2], "|"), SMs: sms}
	if d.Major, err = strconv.Atoi(maj); err != nil {
		return Device{}, fmt.Errorf("compute capability: %v", err)
	}
	if d.Minor, err = strconv.Atoi(min); err != nil {
		return Device{}, fmt.Errorf("compute capability: %v", err)
	}
	return d, d.Validate()
}

// parseKeyV1 parses "op|dir|dtype|tf32|V|Ci|Co|log2n".
func parseKeyV1(s string) (Key, error) {
	p := strings.Split(s, "|")
	if len(p) != 8 {
		return Key{}, fmt.Errorf("want 8 fields op|dir|dtype|tf32|V|Ci|Co|log2n, got %d", len(p))
	}
	var nums [5]int
	for i, f := range p[3:] {
		v, err := strconv.Atoi(f)
		if err != nil {
			return Key{}, fmt.Errorf("field %d: %v", 4+i, err)
		}
		nums[i] = v
	}
	if nums[0] != 0 && nums[0] != 1 {
		return Key{}, fmt.Errorf("tf32 field %d is not 0 or 1", nums[0])
	}
	return Key{Op: p[0], Dir: Direction(p[1]), DType: p[2], TF32: nums[0] == 1, V: nums[1], Ci: nums[2], Co: nums[3], LogN: nums[4]}, nil
}

// encodeFile renders entries in the current schema, devices and entries in
// a fixed order so that equal contents give equal bytes.
func encodeFile(entries map[Key]Entry, note string) ([]byte, error) {
	all := make([]Entry, 0, len(entries))
	for _, e := range entries {
		all = append(all, e)
	}
	slices.SortFunc(all, func(a, b Entry) int { return compareKey(a.Key, b.Key) })
	f := fileV2{Format: Format, Schema: Schema, Note: note, Devices: []sectionV2{}}
	for _, e := range all {
		if n := len(f.Devices); n == 0 || f.Devices[n-1].Device != e.Key.Device {
			f.Devices = append(f.Devices, sectionV2{Device: e.Key.Device})
		}
		s := &f.Devices[len(f.Devices)-1]
		s.Entries = append(s.Entries, entryV2{Key: e.Key, Choice: e.Choice, Updated: e.Updated.UTC()})
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// writeAtomic replaces path with data: a temporary file in the same
// directory is written, synced and renamed over path, and the directory is
// synced, so readers see the old or the new file, never a mixture.
func writeAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %v", ErrIO, err)
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrIO, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("%w: writing %s: %v", ErrIO, path, err)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Chmod(tmp, 0o644); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	// Make the rename durable. Some systems (Windows) cannot sync a
	// directory; the file itself is already complete.
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
