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
	"github.com/lanefleet/lanefleet/provider/internal/adapter"
	"github.com/lanefleet/lanefleet/provider/internal/wirecache"
)

// DefaultBaseURL is the OpenAI API base URL used when a model has none.
const DefaultBaseURL = "https://api.openai.com/v1"

// Config configures an adapter (the fields every adapter shares: see
// adapter.Config). The zero value is usable.
type Config = adapter.Config

// Route returns where a call of req goes and how it is authenticated: its
// base URL, path and headers (the body is the adapter's). path is the wire
// API's own, "chat/completions" or "responses"; a route may put it under
// another base (Azure's deployments) or add a query. An error fails the
// call; a *provider.Error fails it as it is.
type Route func(ctx context.Context, req *provider.Request, path string) (adapter.Call, error)

// openAIRoute is the route of OpenAI and every compatible endpoint: path
// under the model's base URL, its key as a bearer token.
func openAIRoute(_ context.Context, req *provider.Request, path string) (adapter.Call, error) {
	return call(req, path, nil), nil
}

// call is the request that sends body to path under the model's base URL,
// with its key as a bearer token.
func call(req *provider.Request, path string, body []byte) adapter.Call {
	base := req.Model.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	h := http.Header{}
	if k := req.APIKey.Reveal(); k != "" {
		h.Set("Authorization", "Bearer "+k)
	}
	return adapter.Call{Base: base, Path: path, Header: h, Body: body}
}

// routed builds the body of req with build and sends it where route says.
func routed[C any](ctx context.Context, req *provider.Request, route Route, path string, build func(*provider.Request, C) (wirecache.Parts, error), cache C) (adapter.Call, error) {
	body, err := build(req, cache)
	if err != nil {
		return adapter.Call{}, err
	}
	c, err := route(ctx, req, path)
	if err != nil {
		if body.Done != nil {
			body.Done() // nothing reads it
		}
		return adapter.Call{}, err
	}
	// The body build made for the call: its buffer is given back, or
	// the wire cache's JSON it sends in place freed, once nothing reads
	// it.
	c.Body, c.More, c.Done = body.Body, body.More, body.Done
	return c, nil
}
