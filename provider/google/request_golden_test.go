package google_test

import (
	"bytes"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/google"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// TestRequestGolden pins the request bodies, byte for byte, for every
// thinking level on each model family, with tools: the golden file was
// written by the adapter when genai's ThinkingConfig and
// FunctionDeclaration built these parts, so the adapter's own wire types
// must marshal to the same bytes.
func TestRequestGolden(t *testing.T) {
	t.Parallel()
	srv := wiretest.ServeBody(t, http.StatusOK, "text/event-stream", nil, 0)
	var got bytes.Buffer
	for _, id := range []string{"gemini-3-pro-preview", "gemini-3-flash", "gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.0", "claude-x"} {
		for _, level := range []provider.ThinkingLevel{"", provider.ThinkingOff, provider.ThinkingMinimal, provider.ThinkingLow, provider.ThinkingMedium, provider.ThinkingHigh, provider.ThinkingXHigh} {
			temp := 0.5
			req := &provider.Request{
				Model:    provider.Model{ID: id, API: "google-generative-ai", Provider: "google", BaseURL: srv.URL, Reasoning: true},
				Thinking: level, Temperature: &temp, APIKey: "k",
				Tools: []provider.Tool{
					{Name: "read", Description: "r <&>", Parameters: map[string]any{"type": "object", "properties": map[string]any{"p": map[string]any{"type": "string"}}}},
					{Name: "noparams"},
				},
				Messages: []message.Message{message.User("hi <b>", 1)},
			}
			_, _ = google.New(google.Config{}).Stream(t.Context(), req, nil)
			got.Write(srv.Last(t).Body)
			got.WriteByte('\n')
		}
	}
	file := filepath.Join("testdata", "request-thinking-tools.golden")
	if *update {
		if err := os.WriteFile(file, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		gl, wl := bytes.Split(got.Bytes(), []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := range min(len(gl), len(wl)) {
			if !bytes.Equal(gl[i], wl[i]) {
				t.Fatalf("request %d:\n got %s\nwant %s", i, gl[i], wl[i])
			}
		}
		t.Fatalf("%d requests, want %d", len(gl), len(wl))
	}
}
