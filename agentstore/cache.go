package agentstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/agents"
)

// Config configures a worker's Cache.
type Config struct {
	BucketConfig
	// CacheDir holds the worker's copies of the workspaces' files,
	// <CacheDir>/<workspace>/<path>. Required.
	CacheDir string
	// OnChange, when set, is called from the definitions' watcher (in
	// order, never concurrently) with every agent id whose definition
	// changed or was removed.
	OnChange func(id string)
	Logger   zerolog.Logger
}

// Cache is a worker's view of the agents: their definitions and the
// digests of their workspaces' files, both watched into memory, and the
// local copies of the files.
type Cache struct {
	b   *Bucket
	f   *Files
	cfg Config
	log zerolog.Logger

	mu     sync.RWMutex
	agents map[string]*agents.Agent
	remote map[string]map[string]string // workspace -> path -> digest, as the object store has them

	wsMu  sync.Mutex
	wsLck map[string]*wsState // per workspace: its local copies' digests, under the state's lock

	// seen remembers, per session directory and file, the file as Seed
	// left it (its stat and digest): a file whose stat is unchanged is
	// not read again to be compared. Bounded: emptied when it holds
	// maxSeen directories.
	seenMu sync.Mutex
	seen   map[string]map[string]seenFile

	kvw    jetstream.KeyWatcher
	ow     jetstream.ObjectWatcher
	cancel context.CancelFunc
	done   sync.WaitGroup
	stop   sync.Once
}

// seenFile is a session's file as Seed left it.
type seenFile struct {
	size   int64
	mtime  int64
	ino    uint64
	ctime  int64
	digest string
}

// maxSeen bounds the session directories Cache.seen remembers.
const maxSeen = 4096

// sig is a file's stat signature: size, modification and change times,
// inode.
func sig(fi os.FileInfo, digest string) seenFile {
	ino, ctime := inode(fi)
	return seenFile{size: fi.Size(), mtime: fi.ModTime().UnixNano(), ino: ino, ctime: ctime, digest: digest}
}

// sameAs reports whether fi is the file f describes (same stat). A
// write changes the change time, which a command cannot set back.
func (f seenFile) sameAs(fi os.FileInfo) bool {
	ino, ctime := inode(fi)
	return f.digest != "" && fi.Mode().IsRegular() && fi.Size() == f.size && fi.ModTime().UnixNano() == f.mtime && ino == f.ino && ctime == f.ctime
}

// seenIn is what Seed last left in dir; note records it.
func (c *Cache) seenIn(dir string) map[string]seenFile {
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	return maps.Clone(c.seen[dir])
}

func (c *Cache) note(dir string, files map[string]seenFile) {
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	if c.seen == nil || len(c.seen) >= maxSeen {
		c.seen = map[string]map[string]seenFile{}
	}
	c.seen[dir] = files
}

type wsState struct {
	mu    sync.Mutex
	local map[string]string // path -> digest of <CacheDir>/<ws>/<path>
}

// Open opens (creating when missing) the definitions' bucket and the
// files' object store, loads both and keeps watching them until Close.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Cache, error) {
	if cfg.CacheDir == "" || !filepath.IsAbs(cfg.CacheDir) {
		return nil, fmt.Errorf("agentstore: the cache directory %q must be an absolute path", cfg.CacheDir)
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o750); err != nil {
		return nil, fmt.Errorf("agentstore: cache directory: %w", err)
	}
	b, err := OpenBucket(ctx, js, cfg.BucketConfig)
	if err != nil {
		return nil, err
	}
	f, err := OpenFiles(ctx, js, cfg.BucketConfig)
	if err != nil {
		return nil, err
	}
	c := &Cache{b: b, f: f, cfg: cfg, log: cfg.Logger, agents: map[string]*agents.Agent{},
		remote: map[string]map[string]string{}, wsLck: map[string]*wsState{}}
	wctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	if c.kvw, err = b.kv.WatchAll(wctx); err != nil {
		cancel()
		return nil, fmt.Errorf("agentstore: watch %s: %w", b.cfg.Bucket, err)
	}
	if c.ow, err = f.obs.Watch(wctx); err != nil {
		_ = c.kvw.Stop()
		cancel()
		return nil, fmt.Errorf("agentstore: watch %s: %w", f.cfg.FilesBucket, err)
	}
	// Both watchers end their initial values with nil: wait for both.
	for kvDone, oDone := false, false; !kvDone || !oDone; {
		select {
		case e, ok := <-c.kvw.Updates():
			if !ok {
				c.Close() //nolint:errcheck // the load's error says more
				return nil, fmt.Errorf("agentstore: load %s: watcher closed", b.cfg.Bucket)
			}
			if e == nil {
				kvDone = true
			} else {
				c.observe(e)
			}
		case o, ok := <-c.ow.Updates():
			if !ok {
				c.Close() //nolint:errcheck // the load's error says more
				return nil, fmt.Errorf("agentstore: load %s: watcher closed", f.cfg.FilesBucket)
			}
			if o == nil {
				oDone = true
			} else {
				c.observeFile(o)
			}
		case <-ctx.Done():
			c.Close() //nolint:errcheck // the context's error says more
			return nil, fmt.Errorf("agentstore: load: %w", context.Cause(ctx))
		}
	}
	c.done.Add(2)
	go func() {
		defer c.done.Done()
		for e := range c.kvw.Updates() {
			if e != nil {
				if id := c.observe(e); id != "" && c.cfg.OnChange != nil {
					c.cfg.OnChange(id)
				}
			}
		}
	}()
	go func() {
		defer c.done.Done()
		for o := range c.ow.Updates() {
			if o != nil {
				c.observeFile(o)
			}
		}
	}()
	return c, nil
}

// Close stops the watchers and waits for them.
func (c *Cache) Close() error {
	c.stop.Do(func() {
		if c.kvw != nil {
			_ = c.kvw.Stop()
		}
		if c.ow != nil {
			_ = c.ow.Stop()
		}
		c.cancel()
	})
	c.done.Wait()
	return nil
}

// observe records one definition; it returns the id it changed.
func (c *Cache) observe(e jetstream.KeyValueEntry) string {
	id := e.Key()
	var a *agents.Agent
	if e.Operation() == jetstream.KeyValuePut {
		var err error
		if a, err = decodeEntry(id, e.Value()); err != nil {
			// A record that does not decode is no agent: its sessions
			// are refused with "no agent" until it is put right.
			c.log.Warn().Err(err).Msg("agentstore: unreadable agent definition; treating it as none")
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a == nil {
		delete(c.agents, id)
	} else {
		c.agents[id] = a
	}
	return id
}

// observeFile records one file's digest.
func (c *Cache) observeFile(o *jetstream.ObjectInfo) {
	ws, p, ok := strings.Cut(o.Name, "/")
	if !ok || agents.ValidID(ws) != nil || agents.ValidFilePath(p) != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	files := c.remote[ws]
	// A link (agentstore never writes one) is no file: Files.Get refuses it.
	if o.Deleted || o.Size > agents.MaxFileBytes || (o.Opts != nil && o.Opts.Link != nil) {
		delete(files, p)
		return
	}
	if files == nil {
		files = map[string]string{}
		c.remote[ws] = files
	}
	if len(files) < agents.MaxFiles || files[p] != "" {
		files[p] = o.Digest
	}
}

// Lookup returns an agent's definition as the worker last saw it. The
// definition is shared: read-only.
func (c *Cache) Lookup(id string) (*agents.Agent, bool) {
	c.mu.RLock()
	a, ok := c.agents[id]
	c.mu.RUnlock()
	return a, ok
}

// Resolve is Lookup that reads the bucket when the worker has not seen
// the definition: the watcher delivers a put some time after the put was
// stored, so a session's first message, sent right after its agent was
// defined, can reach the worker first (3 of 200 such turns were refused
// in an in-process fleet under -race, at a load of about 3). Only a miss reads the bucket, so the turns of a
// defined agent cost no request. A stored record that does not decode is
// no agent, as the watcher has it; the bucket's other errors are returned.
// What the read finds is not recorded: the watcher, which delivers every
// change in order, stays the cache's only writer.
func (c *Cache) Resolve(ctx context.Context, id string) (*agents.Agent, bool, error) {
	if a, ok := c.Lookup(id); ok {
		return a, true, nil
	}
	a, _, err := c.b.Get(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, agents.ErrInvalid):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return a, true, nil
}

// Dir is the worker's copy of a workspace, brought up to date with the
// object store as the worker last saw it: identity files for a run that
// has no session directory.
func (c *Cache) Dir(ctx context.Context, ws string) (string, error) {
	st := c.state(ws)
	st.mu.Lock()
	defer st.mu.Unlock()
	dir, _, err := c.sync(ctx, ws, st)
	return dir, err
}

// state is a workspace's local state.
func (c *Cache) state(ws string) *wsState {
	c.wsMu.Lock()
	defer c.wsMu.Unlock()
	st := c.wsLck[ws]
	if st == nil {
		st = &wsState{local: map[string]string{}}
		c.wsLck[ws] = st
	}
	return st
}

// sync brings <CacheDir>/<ws> up to the digests the watcher has: fetches
// each file whose digest changed, removes each file the store no longer
// has. It returns the directory and the digests it now holds. st.mu is
// held.
func (c *Cache) sync(ctx context.Context, ws string, st *wsState) (string, map[string]string, error) {
	if err := agents.ValidID(ws); err != nil {
		return "", nil, fmt.Errorf("workspace: %w", err)
	}
	dir := filepath.Join(c.cfg.CacheDir, ws)
	c.mu.RLock()
	want := make(map[string]string, len(c.remote[ws]))
	for p, d := range c.remote[ws] {
		want[p] = d
	}
	c.mu.RUnlock()
	for p, d := range st.local {
		if want[p] == "" {
			if err := os.Remove(filepath.Join(dir, filepath.FromSlash(p))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return "", nil, fmt.Errorf("agentstore: workspace %s: %w", ws, err)
			}
			delete(st.local, p)
		} else if d != want[p] {
			delete(st.local, p)
		}
	}
	for p, d := range want {
		if st.local[p] == d {
			continue
		}
		data, err := c.f.Get(ctx, ws, p)
		if errors.Is(err, ErrNotFound) {
			continue // removed since the watcher saw it
		}
		if err != nil {
			return "", nil, err
		}
		if err := writeAtomic(dir, p, data); err != nil {
			return "", nil, fmt.Errorf("agentstore: workspace %s: %w", ws, err)
		}
		// The digest of what was fetched: a newer version than the
		// watcher's is picked up (and fetched again) at the next sync.
		st.local[p] = Digest(data)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", nil, fmt.Errorf("agentstore: workspace %s: %w", ws, err)
	}
	have := make(map[string]string, len(st.local))
	for p, d := range st.local {
		have[p] = d
	}
	return dir, have, nil
}

// writeAtomic writes dir/p through a temporary file and a rename, so a
// reader sees the old file or the new one.
func writeAtomic(dir, p string, data []byte) error {
	full := filepath.Join(dir, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(full), 0o750); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(full), ".tmp-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), full); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

// Digest is a file's digest as the object store writes it.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])
}

// Seeded is what Seed put in a session's directory: each file's digest.
type Seeded struct {
	Workspace string
	Digests   map[string]string
	files     map[string]seenFile // their stat as written
}

// Seed brings a session's directory up to its agent's workspace at a
// turn's start: every file of the workspace (identity, instructions,
// skills, memory) is written there as the store has it, replacing what the
// session's earlier turns made of it. The directory is written through an
// os.Root: a link the session left there cannot lead the write out.
func (c *Cache) Seed(ctx context.Context, ws, dir string) (*Seeded, error) {
	st := c.state(ws)
	st.mu.Lock()
	defer st.mu.Unlock()
	cache, have, err := c.sync(ctx, ws, st)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("agentstore: seed %s: %w", dir, err)
	}
	defer root.Close()
	before := c.seenIn(dir)
	after := make(map[string]seenFile, len(have))
	for p, d := range have {
		// Unchanged since the last seed (same stat): not read again.
		if fi, err := root.Lstat(p); err == nil && before[p].digest == d && before[p].sameAs(fi) {
			after[p] = before[p]
			continue
		}
		if cur, err := readBounded(root, p); err == nil && Digest(cur) == d {
			if fi, err := root.Lstat(p); err == nil {
				after[p] = sig(fi, d)
			}
			continue
		}
		data, err := os.ReadFile(filepath.Join(cache, filepath.FromSlash(p)))
		if err != nil {
			return nil, fmt.Errorf("agentstore: seed %s: %w", p, err)
		}
		if d := path.Dir(p); d != "." {
			if err := root.MkdirAll(d, 0o750); err != nil {
				return nil, fmt.Errorf("agentstore: seed %s: %w", p, err)
			}
		}
		// Remove what is there first: a link is replaced, not followed.
		if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("agentstore: seed %s: %w", p, err)
		}
		if err := root.WriteFile(p, data, 0o640); err != nil {
			return nil, fmt.Errorf("agentstore: seed %s: %w", p, err)
		}
		if fi, err := root.Lstat(p); err == nil {
			after[p] = sig(fi, d)
		}
	}
	c.note(dir, after)
	return &Seeded{Workspace: ws, Digests: have, files: after}, nil
}

// readBounded reads a regular file (not a link) of at most
// agents.MaxFileBytes under root.
func readBounded(root *os.Root, p string) ([]byte, error) {
	fi, err := root.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	if fi.Size() > agents.MaxFileBytes {
		return nil, fmt.Errorf("%s is %d bytes, the limit is %d", p, fi.Size(), agents.MaxFileBytes)
	}
	// Non-blocking, and checked again once open: a process the session
	// left running may have swapped a FIFO in since the Lstat, whose open
	// would block the lane.
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.Join(fmt.Errorf("%s is not a regular file", p), err)
	}
	b, err := io.ReadAll(io.LimitReader(f, agents.MaxFileBytes+1))
	if err == nil && len(b) > agents.MaxFileBytes {
		err = fmt.Errorf("%s is over the limit of %d bytes", p, agents.MaxFileBytes)
	}
	return b, err
}

// WriteBack puts the memory files (agents.Writable: MEMORY.md, memory.md,
// memory/…) a turn changed in a session's directory back into the
// workspace: each regular file whose content differs from what Seed put
// there (or that Seed did not put there) becomes the file's new version.
// Two sessions that change one file in the same moment: the later put
// wins. A file a session removed stays in the workspace. It returns the
// paths it put; files it cannot read (links, too large, too many) are
// skipped and named in the error. What it put is noted in s: a second
// WriteBack of the same turn (after its memory flush, then at its end)
// puts only what changed since.
func (c *Cache) WriteBack(ctx context.Context, s *Seeded, dir string) ([]string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("agentstore: write back %s: %w", dir, err)
	}
	defer root.Close()
	cands := []string{"MEMORY.md", "memory.md"}
	walkErr := fs.WalkDir(root.FS(), "memory", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == "memory" {
				return fs.SkipDir
			}
			return err
		}
		if d.Type().IsRegular() && agents.ValidFilePath(p) == nil {
			if len(cands) >= agents.MaxFiles {
				return fmt.Errorf("more than %d memory files", agents.MaxFiles)
			}
			cands = append(cands, p)
		}
		return nil
	})
	var put []string
	var errs []error
	if walkErr != nil {
		errs = append(errs, walkErr)
	}
	for _, p := range cands {
		if fi, err := root.Lstat(p); err == nil && s.files[p].sameAs(fi) {
			continue // as Seed left it
		}
		data, err := readBounded(root, p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if Digest(data) == s.Digests[p] {
			continue
		}
		if _, err := c.f.Put(ctx, s.Workspace, p, data); err != nil {
			errs = append(errs, err)
			continue
		}
		if s.Digests == nil {
			s.Digests = map[string]string{}
		}
		s.Digests[p] = Digest(data)
		put = append(put, p)
	}
	if len(errs) > 0 {
		return put, fmt.Errorf("agentstore: write back to workspace %s: %w", s.Workspace, errors.Join(errs...))
	}
	return put, nil
}
