package send_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/provider/internal/send"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// TestPostBodyInParts: a body in parts (Body, then each of More, empty
// ones too) arrives as one, with its whole length as its Content-Length,
// and again whole from its start when a same-origin redirect sends it a
// second time; a body in parts without a Done is sent the same way.
func TestPostBodyInParts(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("0123456789abcdef", 5000) // past one read of the transport
	parts := [][]byte{[]byte(`{"a":[`), nil, []byte(big), []byte(`]`), {}, []byte(`,"b":1}`)}
	want := `{"a":[` + big + `],"b":1}`
	var mu sync.Mutex
	var got []string
	var lengths []int64
	// Every request's body is recorded, then /v1/x is redirected to
	// /v2/x, which answers.
	recorded := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			got, lengths = append(got, string(b)), append(lengths, r.ContentLength)
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/x", recorded(http.RedirectHandler("/v2/x", http.StatusTemporaryRedirect)))
	mux.Handle("/v2/x", recorded(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	u, err := send.JoinURL(srv.URL, "v1/x")
	if err != nil {
		t.Fatal(err)
	}
	for _, withDone := range []bool{true, false} {
		got, lengths = nil, nil
		called := make(chan struct{})
		var done func()
		if withDone {
			done = func() { close(called) }
		}
		w := stream.NewWatch(t.Context(), 0)
		resp, perr := send.NewPool(nil).Post(t.Context(), w, send.Request{Name: "test", URL: u, Body: parts[0], More: parts[1:], Now: time.Now, Done: done})
		if perr != nil {
			t.Fatal(perr)
		}
		_ = resp.Body.Close()
		w.Stop()
		if withDone {
			<-called
		}
		mu.Lock()
		if len(got) != 2 {
			t.Fatalf("done %v: %d requests, want 2 (one redirected)", withDone, len(got))
		}
		for i := range got {
			if got[i] != want || lengths[i] != int64(len(want)) {
				t.Errorf("done %v: request %d: %d bytes of Content-Length %d, want the %d bytes of the parts joined", withDone, i, len(got[i]), lengths[i], len(want))
			}
		}
		mu.Unlock()
	}
}
