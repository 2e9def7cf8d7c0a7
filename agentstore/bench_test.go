package agentstore

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/agents"
)

// BenchmarkTurnAgent is what a turn's agent costs a worker once the
// workspace is cached: the lookup (a map read under a read lock), Seed
// with nothing changed (each of the workspace's files hashed and
// compared with the session's copy, no fetch, no write) and WriteBack with
// nothing changed. The budget for the lookup: 0.2 ms per turn.
func BenchmarkTurnAgent(b *testing.B) {
	bu := setup(b)
	ctx := b.Context()
	if _, err := bu.b.Put(ctx, &agents.Agent{ID: "x", SystemPrompt: "You are X."}); err != nil {
		b.Fatal(err)
	}
	for _, p := range []string{"AGENTS.md", "SOUL.md", "USER.md", "MEMORY.md", "HEARTBEAT.md"} {
		if _, err := bu.f.Put(ctx, "x", p, []byte(strings.Repeat(p+" line\n", 400))); err != nil { // about 5 KB each
			b.Fatal(err)
		}
	}
	c, err := Open(ctx, bu.js, Config{CacheDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	dir := b.TempDir()
	s, err := c.Seed(ctx, "x", dir)
	if err != nil {
		b.Fatal(err)
	}
	// The floor on this machine: opening the directory and looking at
	// its five files once, as Seed must.
	b.Run("baseline-openroot-lstat-5", func(b *testing.B) {
		for b.Loop() {
			root, err := os.OpenRoot(dir)
			if err != nil {
				b.Fatal(err)
			}
			for p := range s.Digests {
				if _, err := root.Lstat(p); err != nil {
					b.Fatal(err)
				}
			}
			root.Close()
		}
	})
	b.Run("lookup", func(b *testing.B) {
		for b.Loop() {
			if _, ok := c.Lookup("x"); !ok {
				b.Fatal("no agent")
			}
		}
	})
	b.Run("seed-5-files-unchanged", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Seed(ctx, "x", dir); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("writeback-unchanged", func(b *testing.B) {
		for b.Loop() {
			if put, err := c.WriteBack(ctx, s, dir); err != nil || len(put) != 0 {
				b.Fatal(fmt.Sprint(put, err))
			}
		}
	})
}
