package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/authstore"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// claudeServer is Anthropic's OAuth token endpoint (form-encoded
// refresh_token grant, rotating refresh tokens, invalid_grant) and the
// Messages API, which takes only the access tokens it issued.
type claudeServer struct {
	*httptest.Server
	mu       sync.Mutex
	refresh  string
	issued   map[string]bool
	requests int
}

func newClaudeServer(t *testing.T, refresh string) *claudeServer {
	cs := &claudeServer{refresh: refresh, issued: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/oauth/token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		cs.mu.Lock()
		defer cs.mu.Unlock()
		cs.requests++
		w.Header().Set("Content-Type", "application/json")
		if rt := r.PostForm.Get("refresh_token"); r.PostForm.Get("grant_type") != "refresh_token" || rt == "" || rt != cs.refresh {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_grant","error_description":"Refresh token not found or invalid"}`))
			return
		}
		access := fmt.Sprintf("sk-ant-oat01-fleet-%d", cs.requests)
		cs.refresh = fmt.Sprintf("sk-ant-ort01-fleet-%d", cs.requests)
		cs.issued[access] = true
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": access, "refresh_token": cs.refresh, "expires_in": 28800})
	})
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		cs.mu.Lock()
		ok := cs.issued[tok]
		cs.mu.Unlock()
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"type":"error","error":{"type":"authentication_error","message":"OAuth token has expired."}}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n" +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi from claude\"}}\n\n" +
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":4}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"))
	})
	cs.Server = httptest.NewServer(mux)
	t.Cleanup(cs.Close)
	return cs
}

// TestAnthropicOAuthProfile: a worker whose auth profile holds only a
// refresh token (by reference) gets an access token from the token
// endpoint and answers; when the API then refuses that token and the
// endpoint refuses the refresh token, the turn ends with an error that
// says so and what to do.
func TestAnthropicOAuthProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	cs := newClaudeServer(t, "sk-ant-ort01-login")
	dir := t.TempDir()
	refresh, profiles := filepath.Join(dir, "refresh"), filepath.Join(dir, "auth-profiles.json")
	if err := os.WriteFile(refresh, []byte("sk-ant-ort01-login\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := fmt.Sprintf(`{"profiles":{"anthropic:sub":{"type":"oauth","provider":"anthropic","refreshRef":"file:%s"}}}`, refresh)
	if err := os.WriteFile(profiles, []byte(p), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ANTHROPIC_BASE_URL": cs.URL, "ANTHROPIC_OAUTH_TOKEN_URL": cs.URL + "/v1/oauth/token"}
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", AuthProfiles: profiles, DefaultModel: "anthropic/claude-sonnet-4-6",
		Env: envMap(env)})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	run, err := c.Send(ctx, "oauth:1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Wait(ctx)
	if err != nil || len(res.Payloads) == 0 || res.Payloads[0].Text != "hi from claude" {
		t.Fatalf("first turn: %+v, %v", res, err)
	}

	// The API refuses the token early and the login is gone.
	cs.mu.Lock()
	clear(cs.issued)
	cs.refresh = "sk-ant-ort01-elsewhere"
	cs.mu.Unlock()
	run, err = c.Send(ctx, "oauth:1", "again")
	if err != nil {
		t.Fatal(err)
	}
	res, err = run.Wait(ctx)
	var re *lanefleet.RunError
	if !errors.As(err, &re) {
		t.Fatalf("second turn: %+v, %v", res, err)
	}
	want := `Anthropic OAuth refresh failed: invalid_grant: Refresh token not found or invalid — log in again with Claude Code (/login) and give auth profile "anthropic:sub" the new refresh token`
	if text := res.ErrorText(); !strings.HasPrefix(text, want) || !strings.Contains(text, "refreshRef file:"+refresh) {
		t.Errorf("error text %q, want it to start with %q and name the reference", text, want)
	}
	t.Logf("error text: %s", res.ErrorText())
	if strings.Contains(res.ErrorText(), "sk-ant-ort01") {
		t.Error("a refresh token reached the event")
	}
	cs.mu.Lock()
	n := cs.requests
	cs.mu.Unlock()
	if n != 2 {
		t.Errorf("%d token requests, want 2: the first turn's, and one after the 401", n)
	}
	// The refused profile cools down across the fleet.
	js := newJS(t, natstest.Connect(t, srv.URL))
	st, err := authstore.Open(ctx, js, authstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if s, _ := st.State("anthropic:sub"); s.DisabledUntil < time.Now().UnixMilli() || s.DisabledReason != "auth_permanent" {
		t.Errorf("profile state %+v, want disabled for auth_permanent", s)
	}
}
