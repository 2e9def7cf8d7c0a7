package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/internal/directget"
)

// DefaultRunsBucket is the bucket of the active-run registry.
const DefaultRunsBucket = "runs"

// RunsInfoSubject is the JetStream API subject that asks for the runs
// bucket's stream info: a request on it is the cheapest way to learn
// whether the connection's user may read the registry at all (a server
// drops a request the user may not publish, and reports the violation).
func RunsInfoSubject() string {
	return jetstream.DefaultAPIPrefix + "STREAM.INFO.KV_" + DefaultRunsBucket
}

// RunInfo is one active run as the registry shows it: which worker runs
// which message of which session, and what it is doing.
type RunInfo struct {
	Session   string `json:"session"`
	RunID     string `json:"runId"`
	Worker    string `json:"worker"`
	Attempt   int    `json:"attempt,omitempty"`
	StartedAt int64  `json:"startedAt"` // Unix ms
	// Phase is RunPhaseRunning or RunPhaseCompacting (steering waits
	// while compacting).
	Phase string `json:"phase"`
	// Handle tells registrations apart: a run clears or updates the entry
	// only while it still holds its own handle.
	Handle string `json:"handle"`
}

// A registered run's phases (RunInfo.Phase).
const (
	RunPhaseRunning    = "running"
	RunPhaseCompacting = "compacting"
)

// Runs is the active-run registry: a KV bucket with one key per running
// session (the lane token). A run's entry is removed when it ends, leaving
// a marker that lives runsMarkerTTL; entries expire after the bucket's
// MaxAge, so a run whose worker died vanishes even if no one clears it.
type Runs struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
	// api is the bucket's stream, bound (its info read) when it did not
	// answer a Direct Get (AllowDirect off): Active then reads each entry
	// through the JetStream API. nil until then.
	mu  sync.Mutex
	api jetstream.Stream
}

// runsMarkerTTL is how long the marker of a cleared entry, or of one the
// bucket's MaxAge removed, stays: the shortest per-message TTL.
const runsMarkerTTL = time.Second

// RunsConfig configures the registry bucket.
type RunsConfig struct {
	Bucket   string // default DefaultRunsBucket
	Replicas int    // default 1
	// MaxAge bounds how long an entry outlives a dead worker (default 1
	// hour; set it above the longest run, since a live run's entry is
	// rewritten only when its phase changes).
	MaxAge time.Duration
	// MaxBytes caps the bucket (memory); default DefaultRunsMaxBytes, -1 =
	// none. A full registry refuses new entries; runs go on without them.
	MaxBytes int64
}

// DefaultRunsMaxBytes caps the registry: a few hundred thousand entries,
// within a single node's default 256 MiB of JetStream memory.
const DefaultRunsMaxBytes = 64 << 20

// OpenRuns creates or binds the registry bucket, updating its limits.
func OpenRuns(ctx context.Context, js jetstream.JetStream, cfg RunsConfig) (*Runs, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultRunsBucket
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = time.Hour
	}
	switch {
	case cfg.MaxBytes == 0:
		cfg.MaxBytes = DefaultRunsMaxBytes
	case cfg.MaxBytes < 0:
		cfg.MaxBytes = -1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: cfg.Bucket, Description: "Lanefleet active runs",
		History: 1, TTL: cfg.MaxAge, LimitMarkerTTL: runsMarkerTTL, MaxBytes: cfg.MaxBytes, Storage: jetstream.MemoryStorage, Replicas: max(1, cfg.Replicas)})
	if err != nil {
		return nil, fmt.Errorf("kvstore: open bucket %s: %w", cfg.Bucket, err)
	}
	return &Runs{js: js, kv: kv}, nil
}

// BindRuns binds to an existing registry bucket without creating it, for
// readers such as clients listing what runs where.
func BindRuns(ctx context.Context, js jetstream.JetStream, bucket string) (*Runs, error) {
	if bucket == "" {
		bucket = DefaultRunsBucket
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("kvstore: bind bucket %s: %w", bucket, err)
	}
	return &Runs{js: js, kv: kv}, nil
}

// RunHandle is one registration.
type RunHandle struct {
	runs  *Runs
	token string
	info  RunInfo
	rev   uint64
}

// Register records a run of the lane token; it replaces any entry a dead
// run left behind.
func (r *Runs) Register(ctx context.Context, token string, info RunInfo) (*RunHandle, error) {
	if info.Phase == "" {
		info.Phase = RunPhaseRunning
	}
	if info.Handle == "" {
		info.Handle = fmt.Sprintf("%s/%s/%d", info.Worker, info.RunID, time.Now().UnixNano())
	}
	data, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	rev, err := r.kv.Put(ctx, token, data)
	if err != nil {
		return nil, fmt.Errorf("kvstore: register run %s: %w", info.RunID, err)
	}
	return &RunHandle{runs: r, token: token, info: info, rev: rev}, nil
}

// ErrStaleRun means the registry entry belongs to a newer run.
var ErrStaleRun = errors.New("kvstore: the run registry entry belongs to a newer run")

// SetPhase updates the run's phase, only if the entry is still this run's.
func (h *RunHandle) SetPhase(ctx context.Context, phase string) error {
	h.info.Phase = phase
	data, err := json.Marshal(h.info)
	if err != nil {
		return err
	}
	rev, err := h.runs.kv.Update(ctx, h.token, data, h.rev)
	if err != nil {
		if isWrongLastSeq(err) || errors.Is(err, jetstream.ErrKeyNotFound) {
			return ErrStaleRun
		}
		return fmt.Errorf("kvstore: update run %s: %w", h.info.RunID, err)
	}
	h.rev = rev
	return nil
}

// Clear removes the entry if it is still this run's: a stale run never
// clears a newer one. It purges the key with a marker that expires after
// runsMarkerTTL: a plain delete marker would stay for the bucket's MaxAge,
// one per session that ran in that time.
func (h *RunHandle) Clear(ctx context.Context) error {
	err := h.runs.kv.Purge(ctx, h.token, jetstream.LastRevision(h.rev), jetstream.PurgeTTL(runsMarkerTTL))
	if err != nil && (isWrongLastSeq(err) || errors.Is(err, jetstream.ErrKeyNotFound)) {
		return ErrStaleRun
	}
	if err != nil {
		return fmt.Errorf("kvstore: clear run %s: %w", h.info.RunID, err)
	}
	return nil
}

// Get returns the active run of a lane token.
func (r *Runs) Get(ctx context.Context, token string) (RunInfo, bool, error) {
	e, err := r.kv.Get(ctx, token)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return RunInfo{}, false, nil
	}
	if err != nil {
		return RunInfo{}, false, fmt.Errorf("kvstore: get run %s: %w", token, err)
	}
	return decodeRun(token, e.Value())
}

// decodeRun reads the registry entry of token.
func decodeRun(token string, data []byte) (RunInfo, bool, error) {
	var info RunInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return RunInfo{}, false, fmt.Errorf("kvstore: run entry %s: %w", token, err)
	}
	return info, true, nil
}

// RunRead is one lane's registry entry as Active reads it: its run
// (Running), none, or Err when the entry does not read.
type RunRead struct {
	Info    RunInfo
	Running bool
	Err     error
}

// Active returns the active runs of tokens' lanes (in tokens' order) as
// Get reads each, in one multi-last Direct Get: a listing's page of
// sessions asks the registry once, not once a session. The client
// library makes and updates every bucket to answer Direct Gets; a
// registry stream that does not (one an operator or an older version
// made, or changed) is read one entry at a time instead, from its first
// refused Direct Get on.
func (r *Runs) Active(ctx context.Context, tokens []string) ([]RunRead, error) {
	out := make([]RunRead, len(tokens))
	if len(tokens) == 0 {
		return out, nil
	}
	r.mu.Lock()
	api := r.api
	r.mu.Unlock()
	if api != nil {
		return r.activeEach(ctx, api, tokens, out)
	}
	// The entry of a lane token is the subject $KV.<bucket>.<token> of
	// the bucket's stream KV_<bucket>.
	prefix := "$KV." + r.kv.Bucket() + "."
	subjects := make([]string, len(tokens))
	for i, tok := range tokens {
		subjects[i] = prefix + tok
	}
	err := lastOfEach(ctx, r.js, "KV_"+r.kv.Bucket(), subjects, func(m directget.Msg, at []int) {
		if m.Header.Get(kvOperation) != "" || m.Header.Get(jetstream.MarkerReasonHeader) != "" {
			return // cleared: a purge, a delete, or the server's marker
		}
		var rd RunRead
		rd.Info, rd.Running, rd.Err = decodeRun(strings.TrimPrefix(m.Subject, prefix), m.Data)
		for _, i := range at {
			out[i] = rd
		}
	})
	if errors.Is(err, directget.ErrNotServed) {
		// Bound anew: a stream bound before its AllowDirect went off
		// would still read by Direct Get.
		api, err := r.js.Stream(ctx, "KV_"+r.kv.Bucket())
		if err != nil {
			return nil, fmt.Errorf("kvstore: runs: the registry's stream answers no Direct Get: %w", err)
		}
		r.mu.Lock()
		r.api = api
		r.mu.Unlock()
		return r.activeEach(ctx, api, tokens, out)
	}
	if err != nil {
		return nil, fmt.Errorf("kvstore: runs: %w", err)
	}
	return out, nil
}

// activeEach is Active with one read of each entry through the
// JetStream API of the registry's stream st, into out.
func (r *Runs) activeEach(ctx context.Context, st jetstream.Stream, tokens []string, out []RunRead) ([]RunRead, error) {
	prefix := "$KV." + r.kv.Bucket() + "."
	for i, tok := range tokens {
		m, err := st.GetLastMsgForSubject(ctx, prefix+tok)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("kvstore: runs: run %s: %w", tok, err)
		}
		if m.Header.Get(kvOperation) != "" || m.Header.Get(jetstream.MarkerReasonHeader) != "" {
			continue // cleared
		}
		out[i].Info, out[i].Running, out[i].Err = decodeRun(tok, m.Data)
	}
	return out, nil
}

// List returns every active run.
func (r *Runs) List(ctx context.Context) ([]RunInfo, error) {
	lister, err := r.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("kvstore: list runs: %w", err)
	}
	var out []RunInfo
	for k := range lister.Keys() {
		info, ok, err := r.Get(ctx, k)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, info)
		}
	}
	return out, nil
}
