package fleet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/subagent"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/sessions"
	"github.com/lanefleet/lanefleet/tracing"
)

// sessionBackend is the session tools' sessions.Backend over the member's
// streams and buckets: the admin service's listing (in process: the
// worker's NATS user may not request the admin service), the lanes'
// transcripts, and a publish onto the target's lane through the Go
// client, as any sender's.
type sessionBackend struct {
	m    *Member
	send SendFunc
}

// SendFunc publishes text onto session key's lane as a message with id
// (its de-duplication key), without following the run, and returns the
// run's id.
type SendFunc func(ctx context.Context, key, text, id string) (runID string, err error)

func (b *sessionBackend) List(ctx context.Context, prefixes, keys []string, limit int) ([]sessions.Info, error) {
	m := b.m
	rep, err := admin.ListSessions(ctx, admin.Config{JS: m.JS, Inbound: m.Streams.Inbound, Events: m.Streams.Events, Dead: m.Streams.Dead,
		Runs: m.Runs, Lanes: m.Lanes, Index: m.index, Logger: m.log},
		admin.SessionsRequest{Limit: limit, Scope: &admin.Scope{Prefixes: prefixes, Keys: keys}})
	if err != nil {
		return nil, err
	}
	out := make([]sessions.Info, 0, len(rep.Sessions))
	for _, s := range rep.Sessions {
		i := sessions.Info{Key: s.Key, Running: s.Running != "", Runs: s.Runs}
		if s.LastActivity > 0 {
			i.LastActivity = time.UnixMilli(s.LastActivity)
		}
		out = append(out, i)
	}
	return out, nil
}

func (b *sessionBackend) History(ctx context.Context, key string, q sessions.HistoryQuery, fn func(turn uint64, entries []message.Entry) bool) (sessions.HistoryRead, error) {
	tok, err := events.KeyToken(key)
	if err != nil {
		return sessions.HistoryRead{}, err
	}
	read, err := b.m.Lanes.NewestRecords(ctx, tok, q.Before, kvstore.NewestLimits{Records: q.MaxTurns, Bytes: q.MaxBytes}, func(r kvstore.Record) bool {
		return fn(r.InboundSeq, r.Entries)
	})
	if err != nil && !errors.Is(err, kvstore.ErrCorrupt) {
		return sessions.HistoryRead{}, err
	}
	return sessions.HistoryRead{Turns: read.Records, Bytes: read.Bytes, More: read.More, Next: read.Next}, nil
}

func (b *sessionBackend) Send(ctx context.Context, key, text, id string) (string, error) {
	return b.send(ctx, key, text, id)
}

// Spawn publishes a sub-agent's spawn message straight onto the child's
// lane (the Go client's Send carries no lineage).
func (b *sessionBackend) Spawn(ctx context.Context, key string, in *events.Inbound, publishID string) (string, error) {
	if in.Parent != nil {
		// The child adopts only a parent the fleet sealed.
		p := *in.Parent
		p.Seal = subagent.SealSpawn(b.m.sealKey, key, &p)
		sealed := *in
		sealed.Parent = &p
		in = &sealed
	}
	data, _, err := events.EncodeInbound(in, false)
	if err != nil {
		return "", err
	}
	// The child's turns continue the trace of the call that spawned it.
	hdr := nats.Header{}
	tracing.Inject(ctx, hdr)
	seq, err := lanes.PublishInbound(ctx, b.m.JS, key, data, publishID, in.ID, hdr)
	if err != nil {
		return "", err
	}
	return strconv.FormatUint(seq, 10), nil
}

// startToolState gives the tool source what needs the built member: the
// process table (named after the worker) and the session tools' backend.
func (m *Member) startToolState(ts *toolSource) error {
	cfg := m.cfg
	if cfg.Process && ts.box != nil {
		procs, err := tools.NewProcesses(tools.ProcessConfig{Box: ts.box, Worker: m.Worker.ID(), PerSession: cfg.ProcessesPerSession})
		if err != nil {
			return fmt.Errorf("fleet: process: %w", err)
		}
		ts.procs, m.procs = procs, procs
		m.log.Info().Msg("process tool on: background commands in exec's sandbox")
	}
	if cfg.SessionTools != "" {
		pol := sessions.Policy{Scope: cfg.SessionTools, Tenants: m.Tenants(), MaxDepth: cfg.SubagentMaxDepth, MaxChildren: cfg.SubagentMaxChildren}
		if err := pol.Validate(); err != nil {
			return fmt.Errorf("fleet: --session-tools: %w", err)
		}
		if cfg.SessionSender == nil {
			return errors.New("fleet: session tools: no SessionSender to publish sessions_send's messages")
		}
		send, err := cfg.SessionSender(m.Conn)
		if err != nil {
			return fmt.Errorf("fleet: session tools: %w", err)
		}
		ts.sessions, ts.sessionsPolicy = &sessionBackend{m: m, send: send}, pol
		m.log.Info().Str("scope", cfg.SessionTools).Msg("session tools on: sessions_list, sessions_history, sessions_send, sessions_spawn, sessions_yield")
	}
	return nil
}

// endSession kills the background processes a session started on this
// worker: at its reset (/new, /reset) and when it is forgotten.
func (m *Member) endSession(key string) {
	if m.procs == nil {
		return
	}
	if n := m.procs.EndSession(key); n > 0 {
		m.log.Info().Str("session", events.Fingerprint(key)).Int("killed", n).Msg("process: the session's background processes were killed")
	}
}
