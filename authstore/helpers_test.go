package authstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// t0 is the fake clocks' start.
var t0 = time.UnixMilli(1_750_000_000_000)

// clock is a settable clock shared by the stores of one test.
type clock struct{ ms atomic.Int64 }

func newClock(at time.Time) *clock {
	c := &clock{}
	c.ms.Store(at.UnixMilli())
	return c
}

func (c *clock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// logBuffer collects log output for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// bundle is one test's server, log capture and the way to open stores on
// separate connections (as separate workers would).
type bundle struct {
	srv  *natstest.Server
	logs *logBuffer
	log  zerolog.Logger
}

func setup(t testing.TB, opts ...natstest.Options) *bundle {
	t.Helper()
	b := &bundle{srv: natstest.Start(t, opts...), logs: &logBuffer{}}
	var w io.Writer = b.logs
	if tt, ok := t.(*testing.T); ok {
		w = io.MultiWriter(b.logs, zerolog.NewTestWriter(tt))
	}
	b.log = zerolog.New(w)
	return b
}

// js opens a new connection.
func (b *bundle) js(t testing.TB) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, b.srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// open opens a Store on a new connection, closed when the test ends.
func (b *bundle) open(t testing.TB, cfg Config) *Store {
	t.Helper()
	cfg.Logger = b.log
	s, err := Open(context.Background(), b.js(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// kv binds to the bucket on a new connection, for writing and scanning it
// directly.
func (b *bundle) kv(t testing.TB) jetstream.KeyValue {
	t.Helper()
	kv, err := b.js(t).KeyValue(context.Background(), DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// waitRevision waits until s has seen revision rev (or a later one) of key.
func (s *Store) waitRevision(ctx context.Context, key string, rev uint64) error {
	for {
		have, changed := s.cache.revision(key)
		if have >= rev {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// seen waits, with a generous deadline, until s has seen revision rev of
// key and returns how long that took.
func seen(t testing.TB, s *Store, key string, rev uint64) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.waitRevision(ctx, key, rev); err != nil {
		t.Fatalf("revision %d of %s not seen: %v", rev, key, err)
	}
	return time.Since(start)
}

// revisionOf returns the newest revision s has of a profile's key.
func revisionOf(t testing.TB, s *Store, profileID string) (string, uint64) {
	t.Helper()
	key, err := profileKey(profileID)
	if err != nil {
		t.Fatal(err)
	}
	rev, _ := s.cache.revision(key)
	return key, rev
}

// apiKeys returns n api_key profiles for prov, ids "<prov>:pNNN".
func apiKeys(prov string, n int) *authprofile.Store {
	creds := &authprofile.Store{Version: 1}
	for i := range n {
		creds.Profiles = append(creds.Profiles, authprofile.Profile{
			ID: fmt.Sprintf("%s:p%03d", prov, i), Type: authprofile.TypeAPIKey, Provider: prov, Key: "sk-test",
		})
	}
	return creds
}

// loadCreds is LoadCredentials of the file at path and env, without exec
// secret providers.
func loadCreds(t *testing.T, path string, env func(string) string) (*authprofile.Store, error) {
	t.Helper()
	creds, exec, err := LoadCredentials(t.Context(), CredentialsConfig{Path: path, Env: env})
	if exec != nil {
		t.Fatal("exec secret providers ran without SecretExec")
	}
	return creds, err
}
