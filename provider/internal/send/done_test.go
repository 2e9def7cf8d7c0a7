package send_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/provider/internal/send"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// TestPostDoneAfterTheBodyIsSent: a server that answers before it reads
// the request (the stream's headers first, then, once Post has returned,
// the body, in full duplex) leaves the transport writing a body of 8 MiB
// after Post returns. Done, which overwrites the body's buffer as its
// next user would, comes only once the transport closed its reader: the
// server reads every byte as sent. It fails when Done comes when Post
// returns.
func TestPostDoneAfterTheBodyIsSent(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("0123456789abcdef"), 8<<20/16)
	want := bytes.Clone(body)
	intact := make(chan bool, 1)
	posted := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		<-posted
		got, err := io.ReadAll(r.Body)
		intact <- err == nil && bytes.Equal(got, want)
		_, _ = io.WriteString(w, "data: {}\n\n")
	}))
	t.Cleanup(srv.Close)
	u, err := send.JoinURL(srv.URL, "v1/x")
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Int32
	reused := make(chan struct{})
	w := stream.NewWatch(t.Context(), 0)
	t.Cleanup(w.Stop)
	resp, perr := send.NewPool(nil).Post(t.Context(), w, send.Request{Name: "test", URL: u, Body: body, Now: time.Now, Done: func() {
		if done.Add(1) == 1 {
			// The next request's body, written over this one's.
			for i := range body {
				body[i] = 'X'
			}
			close(reused)
		}
	}})
	close(posted)
	if perr != nil {
		t.Fatal(perr)
	}
	if !<-intact {
		t.Error("the server read a body overwritten while it was being sent")
	}
	if b := string(must(io.ReadAll(resp.Body))); b != "data: {}\n\n" {
		t.Errorf("stream %q", b)
	}
	_ = resp.Body.Close()
	<-reused
	if n := done.Load(); n != 1 {
		t.Errorf("Done called %d times", n)
	}
}

// TestPostDoneAfterRedirect: a same-origin redirect sends the body again
// (a second reader of it); Done comes once, after both.
func TestPostDoneAfterRedirect(t *testing.T) {
	t.Parallel()
	var bodies atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if string(must(io.ReadAll(r.Body))) == `{"a":1}` {
			bodies.Add(1)
		}
		if r.URL.Path == "/v1/x" {
			http.Redirect(w, r, "/v2/x", http.StatusTemporaryRedirect)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
	}))
	t.Cleanup(srv.Close)
	u, err := send.JoinURL(srv.URL, "v1/x")
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Int32
	called := make(chan struct{})
	w := stream.NewWatch(t.Context(), 0)
	t.Cleanup(w.Stop)
	resp, perr := send.NewPool(nil).Post(t.Context(), w, send.Request{Name: "test", URL: u, Body: []byte(`{"a":1}`), Now: time.Now, Done: func() {
		if done.Add(1) == 1 {
			close(called)
		}
	}})
	if perr != nil {
		t.Fatal(perr)
	}
	_ = resp.Body.Close()
	<-called
	if n, b := done.Load(), bodies.Load(); n != 1 || b != 2 {
		t.Errorf("Done called %d times, the body arrived whole %d times; want 1 and 2", n, b)
	}
}
