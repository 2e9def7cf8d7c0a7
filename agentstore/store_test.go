package agentstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/agents"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

type bundle struct {
	js    jetstream.JetStream
	b     *Bucket
	f     *Files
	cache string
}

func setup(t testing.TB) bundle {
	t.Helper()
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenBucket(context.Background(), js, BucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := OpenFiles(context.Background(), js, BucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return bundle{js: js, b: b, f: f, cache: t.TempDir()}
}

// open opens a worker's cache; changed receives the ids its watcher saw.
func (bu bundle) open(t *testing.T) (*Cache, chan string) {
	t.Helper()
	changed := make(chan string, 16)
	c, err := Open(t.Context(), bu.js, Config{CacheDir: filepath.Join(bu.cache, t.Name(), filepath.Base(t.TempDir())),
		OnChange: func(id string) { changed <- id }, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, changed
}

func (bu bundle) put(t *testing.T, ws, p, content string) {
	t.Helper()
	if _, err := bu.f.Put(t.Context(), ws, p, []byte(content)); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, dir, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestBucket(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	ctx := t.Context()
	if _, err := bu.b.Put(ctx, &agents.Agent{ID: "Bad"}); !errors.Is(err, agents.ErrInvalid) {
		t.Fatalf("Put(bad id) = %v", err)
	}
	for _, id := range []string{"b", "a"} {
		if _, err := bu.b.Put(ctx, &agents.Agent{ID: id, SystemPrompt: "I am " + id}); err != nil {
			t.Fatal(err)
		}
	}
	a, rev, err := bu.b.Get(ctx, "a")
	if err != nil || a.SystemPrompt != "I am a" || rev == 0 {
		t.Fatalf("Get = %+v, %d, %v", a, rev, err)
	}
	// Hostile records: not msgpack, and agent b's record under key c.
	if _, err := bu.b.kv.Put(ctx, "junk", []byte("\xc1")); err != nil {
		t.Fatal(err)
	}
	rec, _ := agents.Encode(&agents.Agent{ID: "b"})
	if _, err := bu.b.kv.Put(ctx, "c", rec); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bu.b.Get(ctx, "c"); !errors.Is(err, agents.ErrInvalid) {
		t.Fatalf("Get(c holding b) = %v; want ErrInvalid", err)
	}
	list, bad, err := bu.b.List(ctx)
	if err != nil || len(list) != 2 || list[0].ID != "a" || list[1].ID != "b" || len(bad) != 2 {
		t.Fatalf("List = %v, bad %v, %v", list, bad, err)
	}
	if err := bu.b.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bu.b.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(deleted) = %v", err)
	}
	if err := bu.b.Delete(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete(deleted) = %v", err)
	}
}

func TestFiles(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	ctx := t.Context()
	for _, bad := range [][2]string{{"x", "../etc/passwd"}, {"x", "/abs"}, {"X", "AGENTS.md"}, {"x", ".env"}} {
		if _, err := bu.f.Put(ctx, bad[0], bad[1], nil); !errors.Is(err, agents.ErrInvalid) {
			t.Errorf("Put(%s, %s) = %v; want ErrInvalid", bad[0], bad[1], err)
		}
	}
	if _, err := bu.f.Put(ctx, "x", "big.md", make([]byte, agents.MaxFileBytes+1)); !errors.Is(err, agents.ErrInvalid) {
		t.Errorf("Put(too large) = %v", err)
	}
	bu.put(t, "x", "AGENTS.md", "v1")
	bu.put(t, "x", "AGENTS.md", "v2")
	bu.put(t, "x", "memory/a.md", "m")
	bu.put(t, "xy", "AGENTS.md", "other workspace")
	list, err := bu.f.List(ctx, "x")
	if err != nil || len(list) != 2 || list[0].Path != "AGENTS.md" || list[0].Digest != Digest([]byte("v2")) || list[1].Path != "memory/a.md" {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if b, err := bu.f.Get(ctx, "x", "AGENTS.md"); err != nil || string(b) != "v2" {
		t.Fatalf("Get = %q, %v", b, err)
	}
	// A link (which agentstore never writes) is refused, not followed.
	target, err := bu.f.obs.GetInfo(ctx, "xy/AGENTS.md")
	must(t, err)
	_, err = bu.f.obs.AddLink(ctx, "x/LINK.md", target)
	must(t, err)
	if b, err := bu.f.Get(ctx, "x", "LINK.md"); !errors.Is(err, agents.ErrInvalid) {
		t.Fatalf("Get(link) = %q, %v; want ErrInvalid", b, err)
	}
	if err := bu.f.Delete(ctx, "x", "AGENTS.md"); err != nil {
		t.Fatal(err)
	}
	if _, err := bu.f.Get(ctx, "x", "AGENTS.md"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(deleted) = %v", err)
	}
}

// TestSeedWriteBack is the workspace shared by two workers: worker A seeds
// a session's directory with the agent's files, the turn changes memory
// and identity files; the memory goes back to the store, the identity
// does not; worker B's session then sees A's memory and the stored
// identity.
func TestSeedWriteBack(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	ctx := t.Context()
	if _, err := bu.b.Put(ctx, &agents.Agent{ID: "x"}); err != nil {
		t.Fatal(err)
	}
	bu.put(t, "x", "AGENTS.md", "be kind")
	bu.put(t, "x", "MEMORY.md", "nothing yet")
	bu.put(t, "x", "skills/git/SKILL.md", "---\nname: git\n---\n")

	a, changedA := bu.open(t)
	if _, ok := a.Lookup("x"); !ok {
		t.Fatal("Lookup(x) after Open: not found")
	}
	dirA := t.TempDir()
	// A link the session left must be replaced, not written through.
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("safe"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dirA, "AGENTS.md")); err != nil {
		t.Fatal(err)
	}
	seeded, err := a.Seed(ctx, "x", dirA)
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, dirA, "AGENTS.md"); got != "be kind" {
		t.Fatalf("AGENTS.md = %q", got)
	}
	if got := read(t, outside, ""); got != "safe" {
		t.Fatalf("the link's target was written: %q", got)
	}
	if got := read(t, dirA, "skills/git/SKILL.md"); got == "" {
		t.Fatal("skill not seeded")
	}
	// The turn writes memory and changes an identity file.
	must(t, os.WriteFile(filepath.Join(dirA, "MEMORY.md"), []byte("the user likes tea"), 0o600))
	must(t, os.MkdirAll(filepath.Join(dirA, "memory"), 0o750))
	must(t, os.WriteFile(filepath.Join(dirA, "memory", "2026-11-29.md"), []byte("met the user"), 0o600))
	must(t, os.WriteFile(filepath.Join(dirA, "AGENTS.md"), []byte("be mean"), 0o600))
	put, err := a.WriteBack(ctx, seeded, dirA)
	slices.Sort(put)
	if err != nil || !slices.Equal(put, []string{"MEMORY.md", "memory/2026-11-29.md"}) {
		t.Fatalf("WriteBack = %v, %v", put, err)
	}
	// A second write-back of the same turn (after its memory flush, then
	// at its end) puts only what changed since the first.
	if again, err := a.WriteBack(ctx, seeded, dirA); err != nil || len(again) != 0 {
		t.Fatalf("the turn's second WriteBack = %v, %v", again, err)
	}
	// Nothing changed since: nothing to put.
	if again, err := a.WriteBack(ctx, &Seeded{Workspace: "x", Digests: map[string]string{
		"MEMORY.md": Digest([]byte("the user likes tea")), "memory/2026-11-29.md": Digest([]byte("met the user"))}}, dirA); err != nil || len(again) != 0 {
		t.Fatalf("second WriteBack = %v, %v", again, err)
	}

	b, _ := bu.open(t)
	dirB := t.TempDir()
	if _, err := b.Seed(ctx, "x", dirB); err != nil {
		t.Fatal(err)
	}
	if got := read(t, dirB, "MEMORY.md"); got != "the user likes tea" {
		t.Fatalf("worker B's MEMORY.md = %q", got)
	}
	if got := read(t, dirB, "memory/2026-11-29.md"); got != "met the user" {
		t.Fatalf("worker B's memory/2026-11-29.md = %q", got)
	}
	if got := read(t, dirB, "AGENTS.md"); got != "be kind" {
		t.Fatalf("worker B's AGENTS.md = %q: a session's change of an identity file went back", got)
	}
	// The next turn on A puts the identity file back as stored.
	if _, err := a.Seed(ctx, "x", dirA); err != nil {
		t.Fatal(err)
	}
	if got := read(t, dirA, "AGENTS.md"); got != "be kind" {
		t.Fatalf("AGENTS.md after the next seed = %q", got)
	}
	// A change that keeps the size and sets the modification time back
	// is still seen (the change time moved) and undone.
	fi, err := os.Stat(filepath.Join(dirA, "AGENTS.md"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dirA, "AGENTS.md"), []byte("be rude"), 0o600))
	must(t, os.Chtimes(filepath.Join(dirA, "AGENTS.md"), fi.ModTime(), fi.ModTime()))
	if _, err := a.Seed(ctx, "x", dirA); err != nil {
		t.Fatal(err)
	}
	if got := read(t, dirA, "AGENTS.md"); got != "be kind" {
		t.Fatalf("AGENTS.md changed in place with its old mtime, after the next seed = %q", got)
	}
	cacheDir, err := b.Dir(ctx, "x")
	if err != nil || read(t, cacheDir, "AGENTS.md") != "be kind" {
		t.Fatalf("Dir = %s, %v", cacheDir, err)
	}

	// Removing the agent reaches the watchers.
	must(t, bu.b.Delete(ctx, "x"))
	if id := <-changedA; id != "x" {
		t.Fatalf("changed %q", id)
	}
	if _, ok := a.Lookup("x"); ok {
		t.Fatal("Lookup(x) after Delete: found")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestLinkIsNoFile: a link object in a workspace (agentstore never
// writes one) is left out of the worker's copy instead of failing it.
func TestLinkIsNoFile(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	ctx := t.Context()
	bu.put(t, "other", "AGENTS.md", "not yours")
	bu.put(t, "ws", "AGENTS.md", "yours")
	target, err := bu.f.obs.GetInfo(ctx, "other/AGENTS.md")
	must(t, err)
	_, err = bu.f.obs.AddLink(ctx, "ws/LINK.md", target)
	must(t, err)
	c, _ := bu.open(t)
	dir, err := c.Dir(ctx, "ws")
	if err != nil {
		t.Fatalf("Dir with a link in the workspace: %v", err)
	}
	if got := read(t, dir, "AGENTS.md"); got != "yours" {
		t.Fatalf("AGENTS.md = %q", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "LINK.md")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LINK.md in the copy: %v", err)
	}
}

// TestResolveReadsWhatTheWatcherHasNotDelivered: a definition stored
// after the worker's watcher last delivered (here: a watcher stopped, the
// longest a delivery can lag) is missing from Lookup, and Resolve finds
// it in the bucket. An id with no definition, an id that is none, and a
// record that does not decode resolve to no agent, without an error.
func TestResolveReadsWhatTheWatcherHasNotDelivered(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	ctx := t.Context()
	c, _ := bu.open(t)
	must(t, c.Close()) // no further deliveries
	if _, err := bu.b.Put(ctx, &agents.Agent{ID: "x", SystemPrompt: "I am x"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Lookup("x"); ok {
		t.Fatal("a stopped watcher delivered a put")
	}
	a, ok, err := c.Resolve(ctx, "x")
	if err != nil || !ok || a.SystemPrompt != "I am x" {
		t.Fatalf("Resolve(x) = %+v, %v, %v; want the stored definition", a, ok, err)
	}
	_, err = bu.b.kv.Put(ctx, "bad", []byte("not a definition"))
	must(t, err)
	for _, id := range []string{"y", "Not-an-id", "bad"} {
		if a, ok, err := c.Resolve(ctx, id); a != nil || ok || err != nil {
			t.Errorf("Resolve(%q) = %+v, %v, %v; want no agent", id, a, ok, err)
		}
	}
}
