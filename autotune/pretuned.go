package autotune

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
)

// The pre-tuned tables shipped with the module, one file per device, in
// the cache file format. Entries come from measured runs on that device
// (see Cache.WriteTable); defaults that were not measured must carry
// "heuristic": true.
//
//go:embed pretuned/*.json
var pretunedFiles embed.FS

func embeddedTables() fs.FS {
	sub, err := fs.Sub(pretunedFiles, "pretuned")
	if err != nil {
		return nil
	}
	return sub
}

// loadTables reads every *.json file at the root of fsys. Unlike the user's
// cache file, a pre-tuned table must be valid: it ships with the program.
func loadTables(fsys fs.FS) (map[Key]Entry, error) {
	out := map[Key]Entry{}
	if fsys == nil {
		return out, nil
	}
	names, err := fs.Glob(fsys, "*.json")
	if err != nil {
		return nil, fmt.Errorf("%w: listing pre-tuned tables: %v", ErrIO, err)
	}
	all := loaded{entries: out}
	for _, name := range names {
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("%w: pre-tuned table %s: %v", ErrIO, name, err)
		}
		l := decodeFile(data, path.Join("pretuned", name))
		if l.state != stateOK {
			return nil, fmt.Errorf("pre-tuned table %s is not a valid schema-%d file: %w", name, Schema, firstOr(l.warnings, ErrCorrupt))
		}
		for _, e := range l.entries {
			if err := all.add(e); err != nil {
				return nil, fmt.Errorf("%w: pre-tuned table %s: %v", ErrEntry, name, err)
			}
		}
	}
	return out, nil
}

func firstOr(errs []error, def error) error {
	if len(errs) > 0 {
		return errs[0]
	}
	return def
}
