package tracing

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"sync"
	"time"
)

// TraceID identifies a trace (16 bytes, W3C Trace Context).
type TraceID [16]byte

// SpanID identifies a span within its trace (8 bytes).
type SpanID [8]byte

// String returns the id in lower-case hex, as traceparent writes it.
func (t TraceID) String() string { return hex.EncodeToString(t[:]) }

// String returns the id in lower-case hex.
func (s SpanID) String() string { return hex.EncodeToString(s[:]) }

// FlagSampled is the W3C trace flag saying the trace is recorded.
const FlagSampled byte = 0x01

// SpanContext is what travels between processes: a span's ids, its trace
// flags and the vendors' tracestate.
type SpanContext struct {
	TraceID TraceID
	SpanID  SpanID
	Flags   byte
	State   string // tracestate, passed on as received (bounded by Extract)
	Remote  bool   // read from a message's or request's headers
}

// IsValid reports whether both ids are set (W3C: all-zero ids are invalid).
func (sc SpanContext) IsValid() bool { return sc.TraceID != TraceID{} && sc.SpanID != SpanID{} }

// IsSampled reports whether the sampled flag is set.
func (sc SpanContext) IsSampled() bool { return sc.Flags&FlagSampled != 0 }

// SpanKind is a span's role (OTLP's numbering).
type SpanKind int

// Span kinds.
const (
	SpanKindUnspecified SpanKind = iota
	SpanKindInternal
	SpanKindServer
	SpanKindClient
	SpanKindProducer
	SpanKindConsumer
)

// StatusCode is a span's outcome (OTLP's numbering).
type StatusCode int

// Status codes.
const (
	StatusUnset StatusCode = iota
	StatusOK
	StatusError
)

// Status is a span's outcome and, for an error, its description.
type Status struct {
	Code        StatusCode
	Description string
}

// Event is a timestamped annotation of a span.
type Event struct {
	Name       string
	Time       time.Time
	Attributes []KeyValue
}

// Link points at another span (of this trace or another).
type Link struct {
	SpanContext SpanContext
	Attributes  []KeyValue
}

// spanKey is the context key of the current span.
type spanKey struct{}

// ContextWithSpanContext returns ctx carrying sc as the parent of the
// spans started from it (a remote parent when sc.Remote).
func ContextWithSpanContext(ctx context.Context, sc SpanContext) context.Context {
	return context.WithValue(ctx, spanKey{}, &Span{sc: sc})
}

// SpanContextFromContext returns the span context of ctx's current span,
// or the remote parent it carries; the zero value when none.
func SpanContextFromContext(ctx context.Context) SpanContext {
	if s, ok := ctx.Value(spanKey{}).(*Span); ok && s != nil {
		return s.sc
	}
	return SpanContext{}
}

// Limits on what one span keeps (the OpenTelemetry defaults); more are
// counted as dropped.
const (
	maxAttributes = 128
	maxEvents     = 128
	maxLinks      = 128
)

// Span is one operation of a trace. A nil *Span, or one that is not
// sampled, records nothing; every method is safe on it.
type Span struct {
	sc     SpanContext
	tracer *Tracer // nil: not recorded

	mu   sync.Mutex
	data SpanData
	done bool
}

// SpanContext returns the span's ids and flags.
func (s *Span) SpanContext() SpanContext {
	if s == nil {
		return SpanContext{}
	}
	return s.sc
}

// lock locks a recording span that has not ended, and says whether it did.
func (s *Span) lock() bool {
	if s == nil || s.tracer == nil {
		return false
	}
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return false
	}
	return true
}

// SetAttributes sets attributes, a key set again taking the new value.
func (s *Span) SetAttributes(kv ...KeyValue) {
	if !s.lock() {
		return
	}
	defer s.mu.Unlock()
	s.data.Attributes, s.data.DroppedAttributes = setAttributes(s.data.Attributes, s.data.DroppedAttributes, kv)
}

func setAttributes(attrs []KeyValue, dropped int, kv []KeyValue) ([]KeyValue, int) {
next:
	for _, a := range kv {
		for i := range attrs {
			if attrs[i].Key == a.Key {
				attrs[i] = a
				continue next
			}
		}
		if len(attrs) >= maxAttributes {
			dropped++
			continue
		}
		attrs = append(attrs, a)
	}
	return attrs, dropped
}

// AddEvent records an event now.
func (s *Span) AddEvent(name string, kv ...KeyValue) {
	if !s.lock() {
		return
	}
	defer s.mu.Unlock()
	if len(s.data.Events) >= maxEvents {
		s.data.DroppedEvents++
		return
	}
	s.data.Events = append(s.data.Events, Event{Name: name, Time: time.Now(), Attributes: kv})
}

// SetStatus sets the span's outcome; a description goes with an error
// only, and an OK status is final.
func (s *Span) SetStatus(code StatusCode, description string) {
	if !s.lock() {
		return
	}
	defer s.mu.Unlock()
	if precedence(s.data.Status.Code) > precedence(code) {
		return
	}
	if code != StatusError {
		description = ""
	}
	s.data.Status = Status{Code: code, Description: description}
}

// precedence orders status codes: OK over Error over Unset.
func precedence(c StatusCode) int {
	switch c {
	case StatusOK:
		return 2
	case StatusError:
		return 1
	}
	return 0
}

// End ends the span now and hands it to its tracer's exporter. Only the
// first End counts.
func (s *Span) End() {
	if !s.lock() {
		return
	}
	s.done = true
	s.data.End = time.Now()
	d := s.data
	s.mu.Unlock()
	s.tracer.p.enqueue(d)
}

// Tracer starts spans of one instrumentation scope. A nil *Tracer starts
// none: its Start returns ctx as it is, so a parent it carries still
// reaches the next process.
type Tracer struct {
	p     *Provider
	scope Scope
}

// Scope names what instrumented the spans.
type Scope struct{ Name, Version string }

// StartOption configures a span at its start.
type StartOption func(*SpanData)

// WithSpanKind sets the span's kind (SpanKindInternal otherwise).
func WithSpanKind(k SpanKind) StartOption { return func(d *SpanData) { d.Kind = k } }

// WithTimestamp sets the span's start time (now otherwise).
func WithTimestamp(t time.Time) StartOption { return func(d *SpanData) { d.Start = t } }

// WithAttributes sets attributes at the start (a sampler could read them).
func WithAttributes(kv ...KeyValue) StartOption {
	return func(d *SpanData) {
		d.Attributes, d.DroppedAttributes = setAttributes(d.Attributes, d.DroppedAttributes, kv)
	}
}

// WithLinks links the span to others.
func WithLinks(links ...Link) StartOption {
	return func(d *SpanData) {
		for _, l := range links {
			if len(d.Links) >= maxLinks {
				d.DroppedLinks++
				continue
			}
			d.Links = append(d.Links, l)
		}
	}
}

// Start starts a span named name, the child of ctx's current span (or of
// the remote parent ctx carries), and returns ctx carrying it. A root
// span starts a new trace. The provider's sampler decides whether the span
// is recorded; an unrecorded one still carries its ids to children and to
// the next process.
func (t *Tracer) Start(ctx context.Context, name string, opts ...StartOption) (context.Context, *Span) {
	if t == nil {
		return ctx, nil
	}
	parent := SpanContextFromContext(ctx)
	sc := SpanContext{SpanID: newSpanID()}
	if parent.IsValid() {
		sc.TraceID, sc.State = parent.TraceID, parent.State
	} else {
		sc.TraceID = newTraceID()
		parent = SpanContext{}
	}
	if t.p.sampler(parent, sc.TraceID) {
		sc.Flags |= FlagSampled
	}
	s := &Span{sc: sc}
	if sc.IsSampled() {
		s.tracer = t
		s.data = SpanData{SpanContext: sc, Parent: parent, Name: name, Kind: SpanKindInternal, Scope: t.scope, Resource: t.p.resource}
		for _, o := range opts {
			o(&s.data)
		}
		if s.data.Start.IsZero() {
			s.data.Start = time.Now()
		}
	}
	return context.WithValue(ctx, spanKey{}, s), s
}

// SpanData is an ended span as an exporter receives it.
type SpanData struct {
	SpanContext SpanContext
	Parent      SpanContext // zero for a root span
	Name        string
	Kind        SpanKind
	Start, End  time.Time

	Attributes        []KeyValue
	DroppedAttributes int
	Events            []Event
	DroppedEvents     int
	Links             []Link
	DroppedLinks      int
	Status            Status

	Scope    Scope
	Resource *Resource // the provider's; spans of one provider share it
}

// Resource describes the process that made the spans.
type Resource struct{ Attributes []KeyValue }

// newTraceID returns a random trace id, never all-zero.
func newTraceID() (t TraceID) {
	for t == (TraceID{}) {
		binary.BigEndian.PutUint64(t[:8], rand.Uint64())
		binary.BigEndian.PutUint64(t[8:], rand.Uint64())
	}
	return t
}

// newSpanID returns a random span id, never all-zero.
func newSpanID() (s SpanID) {
	for s == (SpanID{}) {
		binary.BigEndian.PutUint64(s[:], rand.Uint64())
	}
	return s
}

// ratioBound returns the sampler's bound for a fraction: a trace is kept
// when the low 63 bits of its id's second half fall under it.
func ratioBound(f float64) uint64 {
	switch {
	case f >= 1:
		return 1 << 63
	case f <= 0:
		return 0
	}
	return uint64(f * (1 << 63))
}

func traceIDLow(t TraceID) uint64 { return binary.BigEndian.Uint64(t[8:]) >> 1 }
