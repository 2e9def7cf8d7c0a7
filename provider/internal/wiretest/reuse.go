package wiretest

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

// CallFunc makes one call of the adapter under test against the server at
// url; for Reuse, every call goes through the same adapter value.
type CallFunc func(ctx context.Context, url string) (message.Message, error)

// Reuse checks that an adapter gives its connections back to its pool: call
// runs in rounds of slots concurrent calls against a server replaying body
// (an SSE body, in 7-byte flushed pieces, chunked as on the wire) that
// serves each round once all of it has arrived, so every round needs slots
// connections at once. Every call must succeed, and all rounds together
// must open at most slots connections (and the few net/http drops under
// load, see below).
func Reuse(t *testing.T, body []byte, call CallFunc) {
	t.Helper()
	const slots, rounds = 4, 10
	var dialed atomic.Int32
	srv := httptest.NewUnstartedServer(Rounds(slots, func(w http.ResponseWriter, r *http.Request) {
		Reply(w, http.StatusOK, map[string]string{"Content-Type": "text/event-stream"}, body, 7)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	for range rounds {
		var wg sync.WaitGroup
		for range slots {
			wg.Go(func() {
				if msg, err := call(t.Context(), srv.URL); err != nil {
					t.Errorf("%v %+v", err, msg)
				}
			})
		}
		wg.Wait()
	}
	// A few more are net/http's, not the adapter's: it keeps a connection
	// only once its writer reported the request written, and waits 50 ms
	// for that after the response's end; a writer goroutine starved that
	// long (a loaded machine) costs the connection, seldom. A connection
	// the adapter fails to give back (a body not read to its end or not
	// closed, a pool that keeps too few) is lost on every call or every
	// round: slots+rounds-1 connections and more.
	if n := dialed.Load(); n > slots+rounds/2 {
		t.Errorf("%d connections for %d concurrent calls in %d rounds", n, slots, rounds)
	}
}

// Rounds returns a handler that serves requests in rounds of n: each
// request's body is read (as an API reads it before it answers), then the
// request is held until the n requests of its round have arrived (or its
// client gave up), then served by h. An answer that came before the
// client's transport had written the whole request would cost the
// connection under load: net/http keeps a connection only once its write
// of the request is done, and waits 50 ms for that after the response.
func Rounds(n int, h http.HandlerFunc) http.HandlerFunc {
	var mu sync.Mutex
	arrived := 0
	var rounds []chan struct{}
	return func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		mu.Lock()
		round := arrived / n
		for len(rounds) <= round {
			rounds = append(rounds, make(chan struct{}))
		}
		full := rounds[round]
		if arrived++; arrived%n == 0 {
			close(full)
		}
		mu.Unlock()
		select {
		case <-full:
		case <-r.Context().Done():
			return
		}
		h(w, r)
	}
}

// Held checks that a stream whose server keeps the response open after the
// terminal event still ends the call, successfully: the server sends body
// and then nothing until the client leaves.
func Held(t *testing.T, body []byte, call CallFunc) {
	t.Helper()
	srv := Stall(t, body)
	if msg, err := call(t.Context(), srv.URL); err != nil {
		t.Errorf("%v %+v", err, msg)
	}
}
