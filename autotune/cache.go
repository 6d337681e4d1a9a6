package autotune

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/gofrs/flock"
)

// EnvCache is the environment variable that overrides the cache file path.
const EnvCache = "FLEXGEMM_AUTOTUNE_CACHE"

// DefaultPath returns the cache file path used when no option says
// otherwise: $FLEXGEMM_AUTOTUNE_CACHE if set, else
// os.UserCacheDir()/flexgemm-go/autotune.json.
func DefaultPath() (string, error) {
	if p := os.Getenv(EnvCache); p != "" {
		return p, nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("%w: no user cache directory (set %s): %v", ErrIO, EnvCache, err)
	}
	return filepath.Join(dir, "flexgemm-go", "autotune.json"), nil
}

// Cache holds tuned choices: the user's entries (the cache file plus this
// process's new ones) over the pre-tuned table embedded in the module. It
// is safe for concurrent use by goroutines and by processes sharing the
// file.
type Cache struct {
	path        string // "" = memory only
	warn        func(error)
	lockTimeout time.Duration

	mu       sync.Mutex
	user     map[Key]Entry // file contents merged with this process's entries
	pending  map[Key]Entry // stored here but not yet written to the file
	pre      map[Key]Entry // pre-tuned table
	note     string        // note of the file, kept on rewrite
	readOnly bool          // the file is of a newer schema
}

type config struct {
	path        string
	pathSet     bool
	warn        func(error)
	pretuned    fs.FS
	lockTimeout time.Duration
}

// Option configures Open.
type Option func(*config)

// WithPath sets the cache file path, overriding FLEXGEMM_AUTOTUNE_CACHE
// and the default. An empty path means InMemory.
func WithPath(path string) Option {
	return func(c *config) { c.path, c.pathSet = path, true }
}

// InMemory makes a cache that never touches a file.
func InMemory() Option { return WithPath("") }

// WithWarn sets the function that receives warnings (a corrupt, foreign or
// old cache file, a failed write). The default logs them with package log.
// Each warning wraps one of the package's sentinel errors.
func WithWarn(f func(error)) Option {
	return func(c *config) { c.warn = f }
}

// WithPretuned replaces the embedded pre-tuned table by the *.json files at
// the root of fsys (nil: no pre-tuned table). The files use the cache file
// format.
func WithPretuned(fsys fs.FS) Option {
	return func(c *config) { c.pretuned = fsys }
}

// WithLockTimeout bounds the wait for the file lock (default one minute).
func WithLockTimeout(d time.Duration) Option {
	return func(c *config) { c.lockTimeout = d }
}

// Open returns a cache backed by the file chosen by the options (default
// DefaultPath). A missing file is fine (it is created by the first Store);
// a corrupt, foreign or old one is reported to the warning function and
// rebuilt, and an unreadable one leaves the cache working in memory. Open
// fails only for a pre-tuned option it cannot use.
func Open(opts ...Option) (*Cache, error) {
	cfg := config{pretuned: embeddedTables(), lockTimeout: time.Minute}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.warn == nil {
		cfg.warn = func(err error) { log.Printf("flexgemm-go: %v", err) }
	}
	c := &Cache{warn: cfg.warn, lockTimeout: cfg.lockTimeout, user: map[Key]Entry{}, pending: map[Key]Entry{}}
	pre, err := loadTables(cfg.pretuned)
	if err != nil {
		return nil, err
	}
	c.pre = pre
	if cfg.pathSet {
		c.path = cfg.path
	} else if c.path, err = DefaultPath(); err != nil {
		c.warn(fmt.Errorf("%w; the autotune cache stays in memory", err))
	}
	if c.path != "" {
		c.mu.Lock()
		c.loadLocked()
		c.mu.Unlock()
	}
	return c, nil
}

// Path returns the cache file path, or "" for a memory-only cache.
func (c *Cache) Path() string { return c.path }

// Lookup returns the choice for k: the user's entry if there is one, else
// the pre-tuned one. The source is FromCache or FromPretuned.
func (c *Cache) Lookup(k Key) (Choice, Source, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.user[k]; ok {
		return e.Choice, FromCache, true
	}
	if e, ok := c.pre[k]; ok {
		return e.Choice, FromPretuned, true
	}
	return Choice{}, 0, false
}

// Store records ch for k and writes it to the file at once (read the file
// under the lock, merge, replace atomically). The entry is kept in memory
// even when the write fails; the error (wrapping ErrIO or ErrReadOnly) is
// returned and also the next Store retries the write.
func (c *Cache) Store(k Key, ch Choice) error {
	if err := k.Validate(); err != nil {
		return err
	}
	if err := ch.validate(); err != nil {
		return err
	}
	e := Entry{Key: k, Choice: ch, Updated: time.Now().UTC()}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.user[k] = e
	if c.path == "" {
		return nil
	}
	c.pending[k] = e
	if c.readOnly {
		return fmt.Errorf("%w: %s: %v kept in memory only", ErrReadOnly, c.path, k)
	}
	return c.flushLocked()
}

// Reload re-reads the file, picking up entries other processes stored
// since Open. Entries this process could not write are kept.
func (c *Cache) Reload() {
	if c.path == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loadLocked()
}

// Entries returns the user's entries for dev (all devices if dev is the
// zero Device), sorted by key. Pre-tuned entries are not included.
func (c *Cache) Entries(dev Device) []Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Entry
	for _, e := range c.user {
		if dev == (Device{}) || e.Key.Device == dev {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return compareKey(a.Key, b.Key) })
	return out
}

// WriteTable writes the user's measured entries for dev in the cache file
// format, ready to be committed as a pre-tuned table
// (autotune/pretuned/<device>.json). note explains where they come from.
func (c *Cache) WriteTable(w io.Writer, dev Device, note string) error {
	if err := dev.Validate(); err != nil {
		return err
	}
	m := map[Key]Entry{}
	for _, e := range c.Entries(dev) {
		if !e.Choice.Heuristic {
			m[e.Key] = e
		}
	}
	data, err := encodeFile(m, note)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// loadLocked reads the file into c.user (c.mu held). A file that must be
// rebuilt or migrated is rewritten under the file lock.
func (c *Cache) loadLocked() {
	l, err := readFile(c.path)
	if err != nil {
		c.warn(fmt.Errorf("%w; the autotune cache stays in memory", err))
		return
	}
	if l.state == stateRebuild || l.state == stateRewrite {
		// Repair under the lock; flushLocked reads the file again (another
		// process may have repaired it meanwhile) and reports its warnings.
		err := c.flushLocked()
		if err == nil {
			return
		}
		for _, w := range l.warnings {
			c.warn(w)
		}
		c.warn(err)
	} else {
		for _, w := range l.warnings {
			c.warn(w)
		}
	}
	c.readOnly = l.state == stateNewer
	if l.note != "" {
		c.note = l.note
	}
	c.user = mergeEntries(l.entries, c.pending)
}

// flushLocked merges c.pending into the file under the file lock and
// replaces it atomically (c.mu held). A file that cannot be read as this
// schema is moved aside first.
func (c *Cache) flushLocked() error {
	dir := filepath.Dir(c.path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %v", ErrIO, err)
	}
	lk := flock.New(c.path + ".lock")
	ctx, cancel := context.WithTimeout(context.Background(), c.lockTimeout)
	defer cancel()
	ok, err := lk.TryLockContext(ctx, 5*time.Millisecond)
	if err != nil || !ok {
		return fmt.Errorf("%w: locking %s.lock: %v (waited %v)", ErrIO, c.path, err, c.lockTimeout)
	}
	defer lk.Unlock()

	l, err := readFile(c.path)
	if err != nil {
		return err
	}
	for _, w := range l.warnings {
		c.warn(w)
	}
	switch l.state {
	case stateNewer:
		c.readOnly = true
		c.user = mergeEntries(l.entries, c.pending)
		if len(c.pending) == 0 {
			return nil
		}
		return fmt.Errorf("%w: %s was written by a newer version; %d entries kept in memory", ErrReadOnly, c.path, len(c.pending))
	case stateRebuild:
		bad := fmt.Sprintf("%s.bad-%s", c.path, time.Now().UTC().Format("20060102T150405.000000000"))
		if err := os.Rename(c.path, bad); err != nil {
			return fmt.Errorf("%w: moving the unusable cache file aside: %v", ErrIO, err)
		}
		c.warn(fmt.Errorf("%w: moved the unusable cache file to %s and rebuilt %s", ErrCorrupt, bad, c.path))
	}
	if l.note != "" {
		c.note = l.note
	}
	merged := mergeEntries(l.entries, c.pending)
	if l.state == stateRewrite || l.state == stateRebuild || len(c.pending) > 0 {
		data, err := encodeFile(merged, c.note)
		if err != nil {
			return fmt.Errorf("%w: encoding: %v", ErrIO, err)
		}
		if err := writeAtomic(c.path, data); err != nil {
			c.user = merged
			return err
		}
	}
	c.readOnly = false
	c.user = merged
	clear(c.pending)
	return nil
}

// mergeEntries returns base with over merged in; for one key the more
// recent entry wins, and over wins a tie.
func mergeEntries(base, over map[Key]Entry) map[Key]Entry {
	out := maps.Clone(base)
	if out == nil {
		out = map[Key]Entry{}
	}
	for k, e := range over {
		if old, ok := out[k]; !ok || !old.Updated.After(e.Updated) {
			out[k] = e
		}
	}
	return out
}
