package inflight

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// flushTimeout bounds StopMicro's flush.
const flushTimeout = 5 * time.Second

// StopMicro returns the stop of a micro service svc on nc, for Stop and
// Shutdown: micro's Stop, then a flush, so that once it returns the server
// has the unsubscribes and routes the service's requests to other
// instances (or fails them fast with no responders) rather than here. A
// closed connection is not an error, and a connection that has lost its
// server is not flushed: that server holds none of its subscriptions any
// more, and the flush only waited out its timeout.
func StopMicro(svc micro.Service, nc *nats.Conn) func() error {
	return func() error {
		if err := svc.Stop(); err != nil {
			return err
		}
		if !nc.IsConnected() {
			return nil
		}
		if err := nc.FlushTimeout(flushTimeout); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			return err
		}
		return nil
	}
}
