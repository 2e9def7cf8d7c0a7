// Package otlp exports the worker's spans over OTLP/HTTP (binary protobuf,
// POST <endpoint>/v1/traces), configured by the standard OTEL_* variables,
// and builds the worker's tracing.Provider from them (sampler, batching,
// resource). Tracing
// is off unless OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set.
//
// The upstream otlptracehttp exporter imports gRPC (through the generated
// collector types and its shared configuration), which would add the whole
// gRPC tree to the worker binary for a protocol it never speaks; this
// package writes the protocol's few messages by hand instead (encode.go)
// and its tests decode them with the generated types.
package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/tracing"
)

// Defaults.
const (
	// TimeoutDefault bounds one export (OTEL_EXPORTER_OTLP_TIMEOUT).
	TimeoutDefault = 10 * time.Second
	// maxResponse bounds the response body read (and discarded).
	maxResponse = 64 << 10
	// errorLogEvery spaces out the log lines of a failing collector.
	errorLogEvery = time.Minute
)

// Config configures an Exporter.
type Config struct {
	// URL is where spans are posted: the traces endpoint itself, e.g.
	// http://127.0.0.1:4318/v1/traces.
	URL     string
	Headers map[string]string // sent with every export (an API key, a tenant)
	Timeout time.Duration     // one export, retries included; TimeoutDefault when 0
	Gzip    bool              // compress request bodies
	TLS     *tls.Config       // https: the CA and client certificate; nil = system roots
	Logger  zerolog.Logger
}

// Exporter is a tracing.Exporter posting OTLP/HTTP protobuf.
type Exporter struct {
	cfg    Config
	client *http.Client
	log    zerolog.Logger

	mu       sync.Mutex
	stopped  bool
	lastLog  time.Time
	failures int // exports failed since the last log line
}

// New returns an exporter for cfg.
func New(cfg Config) (*Exporter, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("otlp: endpoint %q is not an http(s) URL", cfg.URL)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = TimeoutDefault
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.TLS != nil {
		tr.TLSClientConfig = cfg.TLS
	}
	return &Exporter{cfg: cfg, client: &http.Client{Transport: tr}, log: cfg.Logger}, nil
}

// ErrStopped is the error of an export after Shutdown.
var ErrStopped = errors.New("otlp: exporter stopped")

// exportBackoff is the wait between an export's tries, unless the
// server asks for longer (Retry-After): 100ms, doubling up to 5s.
var exportBackoff = backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second}

// ExportSpans posts spans as one request, retrying what the protocol says
// may pass (429, 502, 503, 504, connection errors) within the timeout.
func (e *Exporter) ExportSpans(ctx context.Context, spans []tracing.SpanData) error {
	e.mu.Lock()
	stopped := e.stopped
	e.mu.Unlock()
	if stopped {
		return ErrStopped
	}
	if len(spans) == 0 {
		return nil
	}
	body := encodeRequest(spans)
	gz := false
	if e.cfg.Gzip {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(body)
		if err := zw.Close(); err == nil {
			body, gz = buf.Bytes(), true
		}
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	for n := 1; ; n++ {
		retry, wait, err := e.post(ctx, body, gz)
		if err == nil {
			e.recovered()
			return nil
		}
		if !retry || ctx.Err() != nil {
			if ctx.Err() != nil {
				// The export's time ran out during an attempt.
				err = fmt.Errorf("%w (gave up: %w)", err, context.Cause(ctx))
			}
			e.failed(err, len(spans))
			return err
		}
		if werr := backoff.Sleep(ctx, max(wait, exportBackoff.Delay(n))); werr != nil {
			err = fmt.Errorf("%w (gave up: %w)", err, werr)
			e.failed(err, len(spans))
			return err
		}
	}
}

// post sends one request and says whether a failure may be retried, after
// how long at least (Retry-After).
func (e *Exporter) post(ctx context.Context, body []byte, gz bool) (retry bool, wait time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return false, 0, fmt.Errorf("otlp: %w", err)
	}
	for k, v := range e.cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if gz {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return ctx.Err() == nil, 0, fmt.Errorf("otlp: post %s: %w", redactURL(e.cfg.URL), err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if resp.StatusCode/100 == 2 {
		return false, 0, nil
	}
	err = fmt.Errorf("otlp: post %s: %s", redactURL(e.cfg.URL), resp.Status)
	if s := strings.TrimSpace(string(msg)); s != "" && isText(resp.Header.Get("Content-Type")) {
		err = fmt.Errorf("%w: %s", err, clip(s))
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true, retryAfter(resp.Header.Get("Retry-After")), err
	}
	return false, 0, err
}

// failed logs a failed export, at most once per errorLogEvery.
func (e *Exporter) failed(err error, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failures++
	if time.Since(e.lastLog) < errorLogEvery {
		return
	}
	e.log.Warn().Err(err).Int("spans", n).Int("failed_exports", e.failures).Msg("trace export failed; spans dropped")
	e.lastLog, e.failures = time.Now(), 0
}

// recovered logs the first success after logged failures.
func (e *Exporter) recovered() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.lastLog.IsZero() {
		e.log.Info().Int("failed_exports_since_last_log", e.failures).Msg("trace export works again")
		e.lastLog, e.failures = time.Time{}, 0
	}
}

// Shutdown stops exporting; the batch processor has flushed before it.
func (e *Exporter) Shutdown(context.Context) error {
	e.mu.Lock()
	e.stopped = true
	e.mu.Unlock()
	e.client.CloseIdleConnections()
	return nil
}

func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return min(time.Duration(s)*time.Second, time.Minute)
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(t), 0), time.Minute)
	}
	return 0
}

func isText(ct string) bool {
	return strings.HasPrefix(ct, "text/") || strings.HasPrefix(ct, "application/json")
}

func clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// redactURL drops credentials and the query from an endpoint for messages.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(endpoint)"
	}
	u.User, u.RawQuery = nil, ""
	return u.String()
}

// ErrUnsupported is a configuration this exporter cannot honour (a gRPC
// protocol, an unknown compression).
var ErrUnsupported = errors.New("otlp: unsupported configuration")

// Env is the exporter's configuration as the standard variables give it.
type Env struct {
	Config
	// Secrets are the header values: whatever masks the worker's logs
	// must know them (an API key of a hosted collector).
	Secrets []string
}

// FromEnv reads the standard variables (the TRACES_ one of each pair wins):
// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _TIMEOUT (ms),
// _COMPRESSION (gzip, none), _PROTOCOL (http/protobuf only),
// _CERTIFICATE, _CLIENT_CERTIFICATE and _CLIENT_KEY; OTEL_SDK_DISABLED and
// OTEL_TRACES_EXPORTER (otlp or none). ok is false when tracing is off: no
// endpoint set, the SDK disabled, or the exporter none.
func FromEnv(getenv func(string) string) (env Env, ok bool, err error) {
	get := func(name string) string {
		if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_" + name)); v != "" {
			return v
		}
		return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_" + name))
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return Env{}, false, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "", "otlp":
	case "none":
		return Env{}, false, nil
	default:
		return Env{}, false, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%s (this worker exports otlp, or none)", ErrUnsupported, exp)
	}
	if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")); v != "" {
		env.URL = v // used as given
	} else if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); v != "" {
		env.URL = strings.TrimRight(v, "/") + "/v1/traces"
	} else {
		return Env{}, false, nil
	}
	switch p := get("PROTOCOL"); p {
	case "", "http/protobuf":
	default:
		return Env{}, false, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_PROTOCOL=%s: this worker exports OTLP over HTTP (http/protobuf, the collector's port 4318), not gRPC or JSON", ErrUnsupported, p)
	}
	switch c := get("COMPRESSION"); c {
	case "", "none":
	case "gzip":
		env.Gzip = true
	default:
		return Env{}, false, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_COMPRESSION=%s (gzip or none)", ErrUnsupported, c)
	}
	if t := get("TIMEOUT"); t != "" {
		ms, err := strconv.Atoi(t)
		if err != nil || ms <= 0 {
			return Env{}, false, fmt.Errorf("otlp: OTEL_EXPORTER_OTLP_TIMEOUT=%q is not a positive number of milliseconds", t)
		}
		env.Timeout = time.Duration(ms) * time.Millisecond
	}
	if h := get("HEADERS"); h != "" {
		if env.Headers, err = parseHeaders("OTEL_EXPORTER_OTLP_HEADERS", h); err != nil {
			return Env{}, false, err
		}
		for _, v := range env.Headers {
			env.Secrets = append(env.Secrets, v)
		}
	}
	if env.TLS, err = tlsFromEnv(get("CERTIFICATE"), get("CLIENT_CERTIFICATE"), get("CLIENT_KEY")); err != nil {
		return Env{}, false, err
	}
	if _, err := New(env.Config); err != nil {
		return Env{}, false, err
	}
	return env, true, nil
}

// parseHeaders reads "key=value,key2=value2" with URL-encoded values (the
// W3C baggage format the variables use).
func parseHeaders(name, s string) (map[string]string, error) {
	out := map[string]string{}
	for _, item := range strings.Split(s, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("otlp: %s: %q is not key=value", name, clip(strings.TrimSpace(k)))
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("otlp: %s: the value of %s is not URL-encoded: %w", name, k, err)
		}
		out[k] = dv
	}
	return out, nil
}

func tlsFromEnv(ca, cert, key string) (*tls.Config, error) {
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("otlp: OTEL_EXPORTER_OTLP_CERTIFICATE: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("otlp: OTEL_EXPORTER_OTLP_CERTIFICATE %s holds no PEM certificate", ca)
		}
	}
	if cert != "" || key != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("otlp: OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE/_CLIENT_KEY: %w", err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}

// Service identifies the process in its spans' resource.
type Service struct {
	Name     string // service.name unless OTEL_SERVICE_NAME says otherwise
	Version  string // service.version
	Instance string // service.instance.id (the worker id)
}

// NewTracerProvider returns a tracer provider exporting through exp in
// batches, sampling as OTEL_TRACES_SAMPLER[_ARG] say and batching as
// OTEL_BSP_SCHEDULE_DELAY, _EXPORT_TIMEOUT (ms), _MAX_QUEUE_SIZE and
// _MAX_EXPORT_BATCH_SIZE say, with svc and OTEL_RESOURCE_ATTRIBUTES as its
// resource. Shut it down to flush.
func NewTracerProvider(exp tracing.Exporter, svc Service, getenv func(string) string) (*tracing.Provider, error) {
	attrs, err := resourceAttributes(svc, getenv)
	if err != nil {
		return nil, err
	}
	sampler, err := tracing.SamplerFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	cfg := tracing.ProviderConfig{Exporter: exp, Resource: attrs, Sampler: sampler}
	for _, v := range []struct {
		name string
		ms   *time.Duration
		n    *int
	}{
		{"OTEL_BSP_SCHEDULE_DELAY", &cfg.BatchDelay, nil},
		{"OTEL_BSP_EXPORT_TIMEOUT", &cfg.ExportTimeout, nil},
		{"OTEL_BSP_MAX_QUEUE_SIZE", nil, &cfg.MaxQueue},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", nil, &cfg.MaxExportBatch},
	} {
		s := strings.TrimSpace(getenv(v.name))
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > 1<<24 {
			return nil, fmt.Errorf("otlp: %s=%q is not a positive number", v.name, s)
		}
		if v.ms != nil {
			*v.ms = time.Duration(n) * time.Millisecond
		} else {
			*v.n = n
		}
	}
	return tracing.NewProvider(cfg)
}

// resourceAttributes are OTEL_RESOURCE_ATTRIBUTES ("k=v,k2=v2") under the
// service's own, OTEL_SERVICE_NAME winning over svc.Name.
func resourceAttributes(svc Service, getenv func(string) string) ([]tracing.KeyValue, error) {
	var attrs []tracing.KeyValue
	seen := map[string]bool{}
	add := func(k, v string) {
		if v != "" && !seen[k] {
			seen[k] = true
			attrs = append(attrs, tracing.String(k, v))
		}
	}
	add("service.name", strings.TrimSpace(getenv("OTEL_SERVICE_NAME")))
	if ra := strings.TrimSpace(getenv("OTEL_RESOURCE_ATTRIBUTES")); ra != "" {
		kv, err := parseHeaders("OTEL_RESOURCE_ATTRIBUTES", ra)
		if err != nil {
			return nil, err
		}
		for k, v := range kv {
			add(k, v)
		}
	}
	add("service.name", svc.Name)
	add("service.version", svc.Version)
	add("service.instance.id", svc.Instance)
	add("telemetry.sdk.language", "go")
	add("telemetry.sdk.name", "lanefleet")
	return attrs, nil
}
