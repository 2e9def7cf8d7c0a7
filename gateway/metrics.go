package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/lanefleet/lanefleet/metrics"
)

// gatewayMetrics are the gateway's families, on a registry of its own
// (no process-global one). Labels are the route's pattern, the method and
// the status: bounded by the route table; never a session key or token.
type gatewayMetrics struct {
	reg      *metrics.Registry
	requests *metrics.CounterVec
	latency  *metrics.HistogramVec
	streams  *metrics.Gauge
	limited  *metrics.CounterVec
}

func newMetrics() *gatewayMetrics {
	const p = metrics.Namespace + "_gateway_"
	reg := metrics.NewRegistry()
	m := &gatewayMetrics{
		reg:      reg,
		requests: reg.NewCounterVec(p+"requests_total", "HTTP requests served, by route pattern, method and status code.", "route", "method", "code"),
		latency: reg.NewHistogramVec(p+"request_duration_seconds", "Time to the response's headers (a stream's first byte), by route pattern.",
			[]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}, "route"),
		streams: reg.NewGauge(p+"open_streams", "Server-sent event streams open now."),
		limited: reg.NewCounterVec(p+"rate_limited_total", "Requests refused with 429 by a token's rate or concurrency limit, by token name.", "token"),
	}
	reg.RegisterRuntime()
	return m
}

// handler serves the registry.
func (m *gatewayMetrics) handler() http.Handler { return m.reg.Handler() }

// observe records one request. A method net/http does not name is
// "other": a caller must not mint label values.
func (m *gatewayMetrics) observe(route, method string, code int, took time.Duration) {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
	default:
		method = "other"
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(route).Observe(took.Seconds())
}
