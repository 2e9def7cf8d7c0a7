package events

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/internal/mpw"
)

// A turn publishes half a dozen events and writes its final event into its
// record; encoded by the msgpack library, each one cost about forty heap
// allocations, most of them its omitempty check boxing every field into an
// interface. appendEvent writes the same bytes by hand, with no allocation
// beyond its buffer. TestAppendEventAsLibrary fills every field of every
// type an event holds (new ones too, by reflection) and compares the bytes
// with the library's.

// appendEvent appends e's msgpack encoding, byte for byte what
// msgpack.Encoder (map keys sorted) writes for it, to b. ok is false, and b
// unchanged, when e holds a value of its own type (Data.Args or
// Data.Payload): those are left to the library.
func appendEvent(b []byte, e *Event) (_ []byte, ok bool) {
	if e.Data.Args != nil || e.Data.Payload != nil {
		return b, false
	}
	m := mpw.Begin(b)
	b = mpw.Int(m.Key(b, "v"), int64(e.V))
	b = mpw.Str(m.Key(b, "runId"), e.RunID)
	b = mpw.Str(m.Key(b, "sessionKey"), e.SessionKey)
	b = mpw.Uint64(m.Key(b, "seq"), e.Seq)
	if e.Attempt != 0 {
		b = mpw.Int(m.Key(b, "attempt"), int64(e.Attempt))
	}
	b = mpw.Str(m.Key(b, "stream"), e.Stream)
	b = mpw.Int64(m.Key(b, "ts"), e.TS)
	b = appendEventData(m.Key(b, "data"), &e.Data)
	return m.End(b), true
}

func appendEventData(b []byte, d *EventData) []byte {
	m := mpw.Begin(b)
	b = m.OptStr(b, "phase", d.Phase)
	b = m.OptStr(b, "text", d.Text)
	b = m.OptStr(b, "delta", d.Delta)
	b = m.OptInt64(b, "startedAt", d.StartedAt)
	b = m.OptInt64(b, "endedAt", d.EndedAt)
	b = m.OptStr(b, "error", d.Error)
	b = m.OptStr(b, "worker", d.Worker)
	b = m.OptStr(b, "tenant", d.Tenant)
	b = m.OptStr(b, "parentSession", d.ParentSession)
	b = m.OptStr(b, "parentRun", d.ParentRun)
	b = m.OptInt(b, "attempt", d.Attempt)
	b = m.OptInt(b, "steps", d.Steps)
	b = m.OptUint64(b, "inboundSeq", d.InboundSeq)
	b = m.OptStr(b, "name", d.Name)
	b = m.OptStr(b, "toolCallId", d.ToolCallID)
	// args: nil here (appendEvent leaves events with args to the library).
	if d.Result != nil {
		b = appendResult(m.Key(b, "result"), d.Result)
	}
	b = m.OptBool(b, "willRetry", d.WillRetry)
	b = m.OptBool(b, "isError", d.IsError)
	// payload: nil here, as args.
	b = m.OptInt64(b, "delayMs", d.DelayMs)
	b = m.OptInt(b, "maxAttempts", d.MaxAttempts)
	b = m.OptStr(b, "provider", d.Provider)
	b = m.OptStr(b, "model", d.Model)
	b = m.OptStr(b, "authProfile", d.AuthProfile)
	b = m.OptInt(b, "hop", d.Hop)
	b = m.OptStr(b, "reason", d.Reason)
	return m.End(b)
}

func appendResult(b []byte, r *Result) []byte {
	m := mpw.Begin(b)
	b = m.OptArrayLen(b, "payloads", len(r.Payloads))
	for i := range r.Payloads {
		p := &r.Payloads[i]
		pm := mpw.Begin(b)
		b = pm.OptStr(b, "text", p.Text)
		b = pm.OptBool(b, "isError", p.IsError)
		b = pm.End(b)
	}
	b = appendMeta(m.Key(b, "meta"), &r.Meta)
	return m.End(b)
}

func appendMeta(b []byte, x *Meta) []byte {
	m := mpw.Begin(b)
	b = mpw.Int64(m.Key(b, "durationMs"), x.DurationMs)
	b = m.OptBool(b, "aborted", x.Aborted)
	if a := x.AgentMeta; a != nil {
		b = m.Key(b, "agentMeta")
		am := mpw.Begin(b)
		b = mpw.Str(am.Key(b, "sessionId"), a.SessionID)
		b = mpw.Str(am.Key(b, "provider"), a.Provider)
		b = mpw.Str(am.Key(b, "model"), a.Model)
		b = am.OptInt(b, "compactionCount", a.CompactionCount)
		b = am.OptInt64(b, "promptTokens", a.PromptTokens)
		b = optUsage(&am, b, "usage", a.Usage)
		b = optUsage(&am, b, "lastCallUsage", a.LastCallUsage)
		b = am.End(b)
	}
	if x.Error != nil {
		b = m.Key(b, "error")
		em := mpw.Begin(b)
		b = mpw.Str(em.Key(b, "kind"), x.Error.Kind)
		b = mpw.Str(em.Key(b, "message"), x.Error.Message)
		b = em.End(b)
	}
	b = m.OptStr(b, "stopReason", x.StopReason)
	b = m.OptArrayLen(b, "pendingToolCalls", len(x.PendingToolCalls))
	for i := range x.PendingToolCalls {
		c := &x.PendingToolCalls[i]
		cm := mpw.Begin(b)
		b = mpw.Str(cm.Key(b, "id"), c.ID)
		b = mpw.Str(cm.Key(b, "name"), c.Name)
		b = mpw.Str(cm.Key(b, "arguments"), c.Arguments)
		b = cm.OptBool(b, "approval", c.Approval)
		b = cm.End(b)
	}
	b = m.OptStr(b, "mergedInto", x.MergedInto)
	b = m.OptArrayLen(b, "consumed", len(x.Consumed))
	for i := range x.Consumed {
		c := &x.Consumed[i]
		cm := mpw.Begin(b)
		b = mpw.Str(cm.Key(b, "runId"), c.RunID)
		b = cm.OptStr(b, "kind", c.Kind)
		b = cm.OptStr(b, "reason", c.Reason)
		b = cm.End(b)
	}
	b = m.OptBool(b, "heartbeatOk", x.HeartbeatOK)
	if x.Session != nil {
		b = appendSessionState(m.Key(b, "session"), x.Session)
	}
	b = m.OptInt(b, "waiting", x.Waiting)
	return m.End(b)
}

// AppendSessionState appends s's msgpack encoding, the library's bytes
// exactly, to b (for encoders of the structs that hold a session's state:
// kvstore's turn records).
func AppendSessionState(b []byte, s *SessionState) []byte { return appendSessionState(b, s) }

func appendSessionState(b []byte, s *SessionState) []byte {
	m := mpw.Begin(b)
	b = m.OptStr(b, "authProfile", s.AuthProfile)
	b = optUsage(&m, b, "usage", s.Usage)
	b = m.OptInt64(b, "turns", s.Turns)
	b = m.OptArrayLen(b, "approvals", len(s.Approvals))
	for i := range s.Approvals {
		a := &s.Approvals[i]
		am := mpw.Begin(b)
		b = mpw.Str(am.Key(b, "id"), a.ID)
		b = mpw.Str(am.Key(b, "name"), a.Name)
		b = am.End(b)
	}
	if p := s.Parent; p != nil {
		b = m.Key(b, "parent")
		pm := mpw.Begin(b)
		b = mpw.Str(pm.Key(b, "session"), p.Session)
		b = mpw.Str(pm.Key(b, "run"), p.Run)
		b = pm.OptStr(b, "label", p.Label)
		b = pm.OptStr(b, "nonce", p.Nonce)
		b = pm.OptArrayLen(b, "ancestors", len(p.Ancestors))
		for _, a := range p.Ancestors {
			b = mpw.Str(b, a)
		}
		b = pm.OptBool(b, "delivered", p.Delivered)
		b = pm.OptStr(b, "seal", p.Seal)
		b = pm.End(b)
	}
	b = m.OptArrayLen(b, "children", len(s.Children))
	for i := range s.Children {
		c := &s.Children[i]
		cm := mpw.Begin(b)
		b = mpw.Str(cm.Key(b, "session"), c.Session)
		b = mpw.Str(cm.Key(b, "run"), c.Run)
		b = mpw.Str(cm.Key(b, "parentRun"), c.ParentRun)
		b = cm.OptStr(b, "label", c.Label)
		b = cm.OptInt64(b, "spawned", c.Spawned)
		b = cm.OptBool(b, "stopped", c.Stopped)
		b = cm.End(b)
	}
	b = optUsage(&m, b, "childUsage", s.ChildUsage)
	return m.End(b)
}

func appendUsage(b []byte, u *UsageMeta) []byte {
	m := mpw.Begin(b)
	b = m.OptInt64(b, "input", u.Input)
	b = m.OptInt64(b, "output", u.Output)
	b = m.OptInt64(b, "cacheRead", u.CacheRead)
	b = m.OptInt64(b, "cacheWrite", u.CacheWrite)
	b = m.OptInt64(b, "total", u.Total)
	if c := u.Cost; c != nil {
		b = m.Key(b, "cost")
		cm := mpw.Begin(b)
		b = cm.OptFloat64(b, "input", c.Input)
		b = cm.OptFloat64(b, "output", c.Output)
		b = cm.OptFloat64(b, "cacheRead", c.CacheRead)
		b = cm.OptFloat64(b, "cacheWrite", c.CacheWrite)
		b = cm.OptFloat64(b, "total", c.Total)
		b = cm.End(b)
	}
	return m.End(b)
}

// optUsage appends key and u to m unless u is nil.
func optUsage(m *mpw.Map, b []byte, key string, u *UsageMeta) []byte {
	if u == nil {
		return b
	}
	return appendUsage(m.Key(b, key), u)
}

// AppendInbound appends in's msgpack encoding to b: byte for byte what
// msgpack.Marshal writes for it (EncodeInbound's bytes, without setting
// V), so hashes of it stay what they were. The usual message (text,
// images, the per-message choices) is written by hand; a message with
// tools, tool results, settings or sub-agent fields goes through the
// library.
func AppendInbound(b []byte, in *Inbound) ([]byte, error) {
	if out, ok := appendInbound(b, in); ok {
		return out, nil
	}
	var buf bytes.Buffer
	if err := msgpack.NewEncoder(&buf).Encode(in); err != nil {
		return b, fmt.Errorf("events: encode inbound: %w", err)
	}
	return append(b, buf.Bytes()...), nil
}

// appendInbound is AppendInbound's hand-written path; ok is false, b
// unchanged, for a message it leaves to the library.
func appendInbound(b []byte, in *Inbound) (_ []byte, ok bool) {
	if len(in.Tools) > 0 || len(in.ToolResults) > 0 || in.QueueSettings != nil || in.RunSettings != nil || in.Parent != nil || in.Subagent != nil {
		return b, false
	}
	m := mpw.Begin(b)
	b = m.OptInt(b, "v", in.V)
	b = m.OptStr(b, "id", in.ID)
	b = m.OptStr(b, "session", in.Session)
	b = m.OptStr(b, "text", in.Text)
	b = m.OptArrayLen(b, "images", len(in.Images))
	for i := range in.Images {
		im := &in.Images[i]
		mm := mpw.Begin(b)
		b = mpw.Str(mm.Key(b, "mimeType"), im.MimeType)
		b = mpw.Str(mm.Key(b, "data"), im.Data)
		b = mm.End(b)
	}
	b = m.OptStr(b, "mode", in.Mode)
	b = m.OptStr(b, "model", in.Model)
	b = m.OptStr(b, "thinking", in.Thinking)
	b = m.OptInt64(b, "sent", in.Sent)
	b = m.OptStr(b, "authProfile", in.AuthProfile)
	b = m.OptBool(b, "stop", in.Stop)
	b = m.OptBool(b, "heartbeat", in.Heartbeat)
	return m.End(b), true
}
