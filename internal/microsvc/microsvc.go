// Package microsvc is the one way a fleet process serves a NATS micro
// service (the lane service, the admin service, run hooks, remote tools):
// set-up with a logged subscription-error handler, endpoints added all or
// none, a flush so the server routes requests here once Serve returns,
// the requests run on goroutines of an inflight.Group, and a stop that
// refuses new requests, cancels those in flight, waits for them and
// unsubscribes. Replies go out only through the service's reply.Guard
// (package internal/reply): a handler gets a checked reply subject, never
// the raw one.
package microsvc

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/inflight"
	"github.com/lanefleet/lanefleet/internal/reply"
)

// FlushTimeoutDefault bounds Serve's flush when Config.FlushTimeout is 0
// (nats.Conn.Flush's own bound).
const FlushTimeoutDefault = 10 * time.Second

// Config configures a service.
type Config struct {
	// Name, Version, Description, Metadata, QueueGroup and StatsHandler
	// are micro's (QueueGroup "" = micro's default group).
	Name         string
	Version      string
	Description  string
	Metadata     map[string]string
	QueueGroup   string
	StatsHandler micro.StatsHandler
	// Label names the service in log lines ("lane service").
	Label string
	Log   zerolog.Logger
	// MaxConcurrent bounds the requests running at once (at least 1).
	MaxConcurrent int
	// FlushTimeout bounds Serve's flush; 0 = FlushTimeoutDefault.
	FlushTimeout time.Duration
}

// Endpoint is one endpoint of a service.
type Endpoint struct {
	Name     string // micro's endpoint name (one token)
	Subject  string
	Metadata map[string]string
	Handler  micro.Handler
	// What names the endpoint in the error of one that cannot be added
	// ("endpoint dlq.list"); default "endpoint <Name>".
	What string
}

// Service is a service being set up or served: its requests' goroutines
// (Calls) and the guard its replies go through (Guard) exist from New on,
// for the handlers to close over; Serve starts it.
type Service struct {
	micro.Service // nil until Serve
	Calls         *inflight.Group
	Guard         *reply.Guard
	nc            *nats.Conn
	cfg           Config
}

// New returns the service cfg on nc, not yet serving.
func New(nc *nats.Conn, cfg Config) *Service {
	return &Service{nc: nc, cfg: cfg, Calls: inflight.New(max(cfg.MaxConcurrent, 1)),
		Guard: &reply.Guard{NC: nc, Log: cfg.Log, Service: cfg.Label}}
}

// Serve adds the micro service and its endpoints and flushes: once it
// returns nil, the server routes the endpoints' requests here. An
// endpoint that cannot be added stops the service and returns
// "<What>: <error>"; a failed flush, "flush: <error>"; micro's own
// refusal, its error as it is.
func (s *Service) Serve(eps ...Endpoint) error {
	log, label := s.cfg.Log, s.cfg.Label
	ms, err := micro.AddService(s.nc, micro.Config{
		Name: s.cfg.Name, Version: s.cfg.Version, Description: s.cfg.Description, Metadata: s.cfg.Metadata,
		QueueGroup: s.cfg.QueueGroup, StatsHandler: s.cfg.StatsHandler,
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			log.Warn().Str("subject", e.Subject).Str("error", e.Description).Msg(label + ": subscription error")
		},
	})
	if err != nil {
		return err
	}
	s.Service = ms
	for _, ep := range eps {
		opts := []micro.EndpointOpt{micro.WithEndpointSubject(ep.Subject)}
		if ep.Metadata != nil {
			opts = append(opts, micro.WithEndpointMetadata(ep.Metadata))
		}
		if err := ms.AddEndpoint(ep.Name, ep.Handler, opts...); err != nil {
			_ = s.Stop(nil) // the endpoint's error is the one to report
			what := ep.What
			if what == "" {
				what = "endpoint " + ep.Name
			}
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	timeout := s.cfg.FlushTimeout
	if timeout <= 0 {
		timeout = FlushTimeoutDefault
	}
	if err := s.nc.FlushTimeout(timeout); err != nil {
		_ = s.Stop(nil) // the flush's error is the one to report
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

// Stop refuses new requests, cancels those in flight (their context's
// cause is cause, or context.Canceled when nil), waits for them to return
// and stops the micro service (inflight.StopMicro).
func (s *Service) Stop(cause error) error {
	return s.Calls.Stop(cause, s.stopMicro)
}

// Shutdown refuses new requests and waits for those in flight; when ctx
// ends first it cancels them (cause) and waits for them to return. Then
// it stops the micro service as Stop does.
func (s *Service) Shutdown(ctx context.Context, cause error) error {
	return s.Calls.Shutdown(ctx, cause, s.stopMicro)
}

func (s *Service) stopMicro() error {
	if s.Service == nil {
		return nil
	}
	return inflight.StopMicro(s.Service, s.nc)()
}
