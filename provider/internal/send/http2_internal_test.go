package send

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// TestPoolHTTP2: against a server that offers HTTP/2 (by ALPN), the pooled
// transport speaks it and carries concurrent requests on one connection.
func TestPoolHTTP2(t *testing.T) {
	t.Parallel()
	var dialed atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "want HTTP/2, got "+r.Proto, http.StatusHTTPVersionNotSupported)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {}\n\n")
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialed.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	p := NewPool(nil)
	p.transport = func() *http.Transport {
		tr := NewTransport()
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
		return tr
	}
	u, err := JoinURL(srv.URL, "v1/x")
	if err != nil {
		t.Fatal(err)
	}
	// One request first, so the concurrent ones find the connection made.
	do := func() {
		w := stream.NewWatch(t.Context(), 0)
		defer w.Stop()
		resp, perr := p.Post(t.Context(), w, Request{Name: "test", URL: u, Body: []byte("{}"), Now: time.Now})
		if perr != nil {
			t.Error(perr)
			return
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Errorf("proto %s", resp.Proto)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	do()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 5 {
				do()
			}
		})
	}
	wg.Wait()
	if n := dialed.Load(); n != 1 {
		t.Errorf("%d connections", n)
	}
}
