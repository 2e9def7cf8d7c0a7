// Package openai adapts the OpenAI wire APIs to provider.Provider:
// Chat Completions ("openai-completions", also every OpenAI-compatible
// endpoint: OpenRouter, Mistral, Groq, xAI, Ollama, vLLM, LM Studio, any
// base URL) and Responses ("openai-responses"). Requests go out through
// openai-go with its retries off (the run loop owns retries) and no
// environment defaults; the SSE body is decoded here so every failure —
// an HTTP error, an error event, a malformed or truncated stream, a
// connection reset, a stall — ends as a classified *provider.Error.
package openai

import (
	"context"
	"errors"
	"net/http"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// DefaultBaseURL is the OpenAI API base URL used when a model has none.
const DefaultBaseURL = "https://api.openai.com/v1"

// Config configures an adapter. The zero value is usable.
type Config struct {
	// HTTPClient sends requests; nil uses a client without an overall
	// timeout (streams are bounded by IdleTimeout and the context).
	HTTPClient *http.Client
	// IdleTimeout abandons a stream that sends nothing for this long;
	// 0 means stream.IdleTimeoutDefault (5 min).
	IdleTimeout time.Duration
	// Headers are added to every request.
	Headers map[string]string
	// Now is the clock for message timestamps; nil = time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// post sends body to path under the model's base URL and returns the open
// streaming response, or a classified error.
func (c Config) post(ctx context.Context, w *stream.Watch, req *provider.Request, path string, body []byte) (*http.Response, *provider.Error) {
	base := req.Model.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	opts := []option.RequestOption{
		option.WithHTTPClient(c.HTTPClient),
		option.WithBaseURL(base),
		option.WithMaxRetries(0),
		option.WithHeader("Accept", "text/event-stream"),
	}
	if k := req.APIKey.Reveal(); k != "" {
		opts = append(opts, option.WithAPIKey(k))
	}
	for k, v := range c.Headers {
		opts = append(opts, option.WithHeader(k, v))
	}
	client := sdk.Client{Options: opts}
	var resp *http.Response
	err := client.Post(w.Context(), path, body, &resp)
	if err != nil {
		var apiErr *sdk.Error
		if errors.As(err, &apiErr) && apiErr.Response != nil {
			return nil, stream.HTTPError(apiErr.StatusCode, apiErr.Response.Header, apiErr.Response.Body, errors.New(http.StatusText(apiErr.StatusCode)), c.Now())
		}
		if resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
		return nil, stream.Scrub(stream.Classify(ctx, w, "openai: send request", err), req.APIKey)
	}
	if pe := stream.NotAStream(resp); pe != nil {
		return nil, pe
	}
	return resp, nil
}
