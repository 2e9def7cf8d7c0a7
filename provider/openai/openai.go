// Package openai adapts the OpenAI wire APIs to provider.Provider:
// Chat Completions ("openai-completions", also every OpenAI-compatible
// endpoint: OpenRouter, Mistral, Groq, xAI, Ollama, vLLM, LM Studio, any
// base URL) and Responses ("openai-responses"). Requests go out over
// net/http — POST {base}/chat/completions or {base}/responses with a bearer
// key when there is one — without retries (the run loop owns them) and
// with nothing read from the environment; the SSE body is decoded here so
// every failure — an HTTP error, an error event, a malformed or truncated
// stream, a connection reset, a stall — ends as a classified
// *provider.Error.
package openai

import (
	"context"
	"net/http"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/send"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// DefaultBaseURL is the OpenAI API base URL used when a model has none.
const DefaultBaseURL = "https://api.openai.com/v1"

// Config configures an adapter (the fields every adapter shares: see
// send.Config). The zero value is usable.
type Config = send.Config

// poster sends an adapter's requests.
type poster struct {
	cfg  Config
	pool *send.Pool
}

func newPoster(cfg Config) poster {
	cfg = cfg.WithDefaults()
	return poster{cfg: cfg, pool: send.NewPool(cfg.HTTPClient)}
}

// post sends body to path under the model's base URL and returns the open
// streaming response, or a classified error.
func (p poster) post(ctx context.Context, w *stream.Watch, req *provider.Request, path string, body []byte) (*http.Response, *provider.Error) {
	base := req.Model.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := send.JoinURL(base, path)
	if err != nil {
		return nil, &provider.Error{Reason: provider.ReasonFormat, Message: "openai: " + err.Error(), Err: err}
	}
	h := http.Header{}
	if k := req.APIKey.Reveal(); k != "" {
		h.Set("Authorization", "Bearer "+k)
	}
	for k, v := range p.cfg.Headers {
		h.Set(k, v)
	}
	return p.pool.Post(ctx, w, send.Request{Name: "openai", URL: u, Header: h, Body: body, Key: req.APIKey, Now: p.cfg.Now})
}
