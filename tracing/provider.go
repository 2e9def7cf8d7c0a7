package tracing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Exporter sends ended spans somewhere (tracing/otlp posts them to a
// collector).
type Exporter interface {
	// ExportSpans sends one batch; it returns when the batch is sent or
	// given up on.
	ExportSpans(ctx context.Context, spans []SpanData) error
	// Shutdown releases the exporter; no export follows.
	Shutdown(ctx context.Context) error
}

// Sampler decides at a span's start whether it is recorded, from its
// parent's span context (zero for a root) and its trace id.
type Sampler func(parent SpanContext, trace TraceID) bool

// Batch defaults (the OpenTelemetry batch span processor's).
const (
	BatchDelayDefault     = 5 * time.Second  // OTEL_BSP_SCHEDULE_DELAY
	ExportTimeoutDefault  = 30 * time.Second // OTEL_BSP_EXPORT_TIMEOUT
	MaxQueueDefault       = 2048             // OTEL_BSP_MAX_QUEUE_SIZE
	MaxExportBatchDefault = 512              // OTEL_BSP_MAX_EXPORT_BATCH_SIZE
)

// ProviderConfig configures a Provider.
type ProviderConfig struct {
	Exporter Exporter // required
	Resource []KeyValue
	// Sampler decides which spans are recorded; nil = ParentBased(AlwaysOn).
	Sampler Sampler
	// BatchDelay is the longest an ended span waits to be exported;
	// BatchDelayDefault when 0.
	BatchDelay time.Duration
	// ExportTimeout bounds one export; ExportTimeoutDefault when 0.
	ExportTimeout time.Duration
	// MaxQueue is how many ended spans wait at most; more are dropped
	// (Dropped counts them). MaxQueueDefault when 0.
	MaxQueue int
	// MaxExportBatch is the most spans one export sends;
	// MaxExportBatchDefault when 0 (at most MaxQueue).
	MaxExportBatch int
}

// Provider makes tracers and exports their ended spans in batches, from
// one goroutine it owns until Shutdown. A nil *Provider makes nil tracers,
// which record nothing.
type Provider struct {
	cfg      ProviderConfig
	sampler  Sampler
	resource *Resource

	queue   chan SpanData
	flush   chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	dropped atomic.Int64
	once    sync.Once
	err     error
}

// NewProvider returns a provider exporting through cfg.Exporter.
func NewProvider(cfg ProviderConfig) (*Provider, error) {
	if cfg.Exporter == nil {
		return nil, errors.New("tracing: no exporter")
	}
	if cfg.BatchDelay <= 0 {
		cfg.BatchDelay = BatchDelayDefault
	}
	if cfg.ExportTimeout <= 0 {
		cfg.ExportTimeout = ExportTimeoutDefault
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = MaxQueueDefault
	}
	if cfg.MaxExportBatch <= 0 {
		cfg.MaxExportBatch = MaxExportBatchDefault
	}
	cfg.MaxExportBatch = min(cfg.MaxExportBatch, cfg.MaxQueue)
	p := &Provider{cfg: cfg, sampler: cfg.Sampler, resource: &Resource{Attributes: cfg.Resource},
		queue: make(chan SpanData, cfg.MaxQueue), flush: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	if p.sampler == nil {
		p.sampler = ParentBased(AlwaysOn)
	}
	go p.run()
	return p, nil
}

// Tracer returns a tracer of the scope name at version.
func (p *Provider) Tracer(name, version string) *Tracer {
	if p == nil {
		return nil
	}
	return &Tracer{p: p, scope: Scope{Name: name, Version: version}}
}

// enqueue hands an ended span to the batcher, dropping it when the queue
// is full or the provider stopped.
func (p *Provider) enqueue(d SpanData) {
	select {
	case <-p.stop:
		return
	default:
	}
	select {
	case p.queue <- d:
	default:
		p.dropped.Add(1)
	}
}

// Dropped returns how many ended spans were dropped as the queue was full.
func (p *Provider) Dropped() int64 { return p.dropped.Load() }

// run batches spans: an export when a batch is full, when the oldest
// waiting span has waited BatchDelay, at a flush and at the stop.
func (p *Provider) run() {
	defer close(p.done)
	var batch []SpanData
	timer := time.NewTimer(p.cfg.BatchDelay)
	defer timer.Stop()
	export := func() {
		for len(batch) > 0 {
			n := min(len(batch), p.cfg.MaxExportBatch)
			ctx, cancel := context.WithTimeout(context.Background(), p.cfg.ExportTimeout)
			_ = p.cfg.Exporter.ExportSpans(ctx, batch[:n]) // the exporter logs its failures
			cancel()
			batch = batch[n:]
		}
		batch = nil
	}
	drain := func() {
		for {
			select {
			case d := <-p.queue:
				batch = append(batch, d)
			default:
				return
			}
		}
	}
	for {
		select {
		case d := <-p.queue:
			batch = append(batch, d)
			if len(batch) >= p.cfg.MaxExportBatch {
				export()
			}
		case <-timer.C:
			export()
			timer.Reset(p.cfg.BatchDelay)
		case ack := <-p.flush:
			drain()
			export()
			close(ack)
		case <-p.stop:
			drain()
			export()
			return
		}
	}
}

// ForceFlush exports every span ended so far, waiting for ctx at most.
func (p *Provider) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case p.flush <- ack:
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("tracing: flush: %w", context.Cause(ctx))
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("tracing: flush: %w", context.Cause(ctx))
	}
}

// Shutdown exports what is left, stops the batcher and shuts the
// exporter down, waiting for ctx at most. Spans ending later are dropped.
func (p *Provider) Shutdown(ctx context.Context) error {
	p.once.Do(func() {
		close(p.stop)
		select {
		case <-p.done:
		case <-ctx.Done():
			p.err = fmt.Errorf("tracing: shutdown: %w", context.Cause(ctx))
			return
		}
		p.err = p.cfg.Exporter.Shutdown(ctx)
	})
	return p.err
}

// AlwaysOn records every span.
func AlwaysOn(SpanContext, TraceID) bool { return true }

// AlwaysOff records none.
func AlwaysOff(SpanContext, TraceID) bool { return false }

// TraceIDRatio records a fraction of traces, by their ids: every process
// with the same fraction keeps the same traces.
func TraceIDRatio(fraction float64) Sampler {
	bound := ratioBound(fraction)
	return func(_ SpanContext, t TraceID) bool { return traceIDLow(t) < bound }
}

// ParentBased follows the parent's sampled flag, and root for a root span.
func ParentBased(root Sampler) Sampler {
	return func(parent SpanContext, t TraceID) bool {
		if parent.IsValid() {
			return parent.IsSampled()
		}
		return root(parent, t)
	}
}

// ErrSampler is a sampler configuration this tracer does not know.
var ErrSampler = errors.New("tracing: unsupported sampler")

// SamplerFromEnv reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG:
// always_on, always_off, traceidratio, parentbased_always_on (the
// default), parentbased_always_off, parentbased_traceidratio; the ratio's
// argument is a fraction in [0, 1], 1 when unset.
func SamplerFromEnv(getenv func(string) string) (Sampler, error) {
	name := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")))
	ratio := func() (Sampler, error) {
		arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
		if arg == "" {
			return TraceIDRatio(1), nil
		}
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || f < 0 || f > 1 {
			return nil, fmt.Errorf("%w: OTEL_TRACES_SAMPLER_ARG=%q is not a fraction from 0 to 1", ErrSampler, arg)
		}
		return TraceIDRatio(f), nil
	}
	switch name {
	case "", "parentbased_always_on":
		return ParentBased(AlwaysOn), nil
	case "always_on":
		return AlwaysOn, nil
	case "always_off":
		return AlwaysOff, nil
	case "parentbased_always_off":
		return ParentBased(AlwaysOff), nil
	case "traceidratio":
		return ratio()
	case "parentbased_traceidratio":
		s, err := ratio()
		if err != nil {
			return nil, err
		}
		return ParentBased(s), nil
	}
	return nil, fmt.Errorf("%w: OTEL_TRACES_SAMPLER=%s (always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio)", ErrSampler, name)
}
