// Package local lists the models of a self-hosted OpenAI-compatible server
// (llama.cpp's llama-server, vLLM, Ollama, LM Studio, …, on this machine or
// another) from GET <base URL>/models, as catalog entries of one provider,
// "local", served over Chat Completions.
package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/catalog"
)

// ProviderName is the provider of a server's models: local/<id>.
const ProviderName = "local"

// Bounds on what a server may send.
const (
	MaxListBytes = 4 << 20 // a /models response body
	MaxModels    = 1000    // models in it
	MaxIDBytes   = 256     // one model id
)

// DefaultMaxTokens is a model's output limit when the server does not say
// (at most a quarter of a window it reports).
const DefaultMaxTokens = catalog.UnknownMaxTokens

// ErrNotOpenAI means the server's answer is not an OpenAI model list.
var ErrNotOpenAI = errors.New("local: not an OpenAI model list")

// StatusError is a /models answer other than 200.
type StatusError struct {
	URL    string
	Status int
	Body   string // the start of the body, printable characters only
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("local: GET %s: HTTP %d", e.URL, e.Status)
	if e.Body != "" {
		msg += ": " + e.Body
	}
	switch e.Status {
	case http.StatusUnauthorized, http.StatusForbidden:
		msg += " (the server wants an API key)"
	case http.StatusNotFound:
		msg += " (is this the server's OpenAI base URL, the one ending in /v1?)"
	case http.StatusServiceUnavailable:
		msg += " (the server may still be loading a model)"
	}
	return msg
}

// BaseURL checks a server's base URL and returns it without a trailing
// slash: http or https, a host, no credentials, query or fragment. A bare
// origin (http://127.0.0.1:8080) gets the /v1 every such server serves the
// OpenAI API under.
func BaseURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	switch {
	case err != nil:
		return "", fmt.Errorf("local: base URL: %w", err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return "", fmt.Errorf("local: base URL %q: want http(s)://host[:port][/v1]", raw)
	case u.User != nil:
		return "", fmt.Errorf("local: base URL %q: no credentials in the URL (give the key on its own)", u.Redacted())
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("local: base URL %q: no query or fragment", raw)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	if u.Path == "" {
		u.Path = "/v1"
	}
	return u.String(), nil
}

// Server is an OpenAI-compatible server.
type Server struct {
	BaseURL string          // as BaseURL returns it
	Key     provider.Secret // sent as a bearer token when set
	// Client sends the request; nil = a client of its own, closed after.
	Client *http.Client
}

// Models lists the server's models (GET <BaseURL>/models) as catalog
// entries (see Decode). A server that does not answer is an error
// wrapping the connection's (connection refused, a timeout); an answer
// other than 200 is a *StatusError; a body that is not a model list wraps
// ErrNotOpenAI.
func (s Server) Models(ctx context.Context) ([]provider.Model, error) {
	u := s.BaseURL + "/models"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if s.Key != "" {
		req.Header.Set("Authorization", "Bearer "+s.Key.Reveal())
	}
	c := s.Client
	if c == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		defer tr.CloseIdleConnections()
		c = &http.Client{Transport: tr}
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("local: GET %s: %w", u, unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxListBytes+1))
	if err != nil {
		return nil, fmt.Errorf("local: GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{URL: u, Status: resp.StatusCode, Body: printable(body, 200)}
	}
	if len(body) > MaxListBytes {
		return nil, fmt.Errorf("local: GET %s: the model list is larger than %d bytes", u, MaxListBytes)
	}
	ms, err := Decode(body, s.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("local: GET %s: %w", u, err)
	}
	return ms, nil
}

// unwrapURLError drops *url.Error's repetition of the method and URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Decode reads an OpenAI model list ({"object": "list", "data": [{"id":
// …}, …]}) into catalog entries of ProviderName at baseURL, in the
// server's order, each id once: Chat Completions, text input, no
// reasoning, the window the server reports (vLLM's max_model_len) or
// catalog.UnknownContextWindow, and DefaultMaxTokens (at most a quarter of
// a reported window). A models file may change any of these for
// local/<id>. An id must be 1 to MaxIDBytes bytes of printable UTF-8
// without spaces, glob characters (*?[]\) or empty path segments; a list
// without models, with more than MaxModels, or with a bad id is an error.
func Decode(body []byte, baseURL string) ([]provider.Model, error) {
	var list struct {
		Data *[]struct {
			ID          string `json:"id"`
			MaxModelLen int64  `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil || list.Data == nil {
		return nil, fmt.Errorf("%w (want {\"data\": [{\"id\": …}]}): %s", ErrNotOpenAI, printable(body, 120))
	}
	data := *list.Data
	if len(data) == 0 {
		return nil, errors.New("local: the server lists no models (has it loaded one?)")
	}
	if len(data) > MaxModels {
		return nil, fmt.Errorf("local: the server lists %d models, more than %d", len(data), MaxModels)
	}
	out := make([]provider.Model, 0, len(data))
	seen := make(map[string]bool, len(data))
	for i, d := range data {
		if err := checkID(d.ID); err != nil {
			return nil, fmt.Errorf("local: model %d: %w", i, err)
		}
		if seen[d.ID] {
			continue
		}
		seen[d.ID] = true
		m := provider.Model{ID: d.ID, Provider: ProviderName, API: catalog.APIOpenAICompletions, BaseURL: baseURL,
			ContextWindow: catalog.UnknownContextWindow, MaxTokens: DefaultMaxTokens, Input: []string{"text"}}
		if d.MaxModelLen > 0 && d.MaxModelLen <= 1<<30 {
			m.ContextWindow = int(d.MaxModelLen)
			m.MaxTokens = max(1, min(DefaultMaxTokens, m.ContextWindow/4))
		}
		out = append(out, m)
	}
	return out, nil
}

func checkID(id string) error {
	switch {
	case id == "":
		return errors.New("no id")
	case len(id) > MaxIDBytes:
		return fmt.Errorf("id of %d bytes, more than %d", len(id), MaxIDBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("id %q is not UTF-8", id)
	case strings.HasPrefix(id, "/") || strings.HasSuffix(id, "/") || strings.Contains(id, "//"):
		return fmt.Errorf("id %q has an empty path segment", id)
	case strings.ContainsAny(id, `*?[]\`):
		return fmt.Errorf("id %q holds a glob character", id)
	}
	for _, r := range id {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("id %q holds a space or control character", id)
		}
	}
	return nil
}

// DefaultModel picks the model a worker serves when none is named: the
// first that is not an embedding model (LM Studio lists those beside chat
// models), else the first.
func DefaultModel(ms []provider.Model) (provider.Model, bool) {
	for _, m := range ms {
		if !strings.Contains(strings.ToLower(m.ID), "embed") {
			return m, true
		}
	}
	if len(ms) > 0 {
		return ms[0], true
	}
	return provider.Model{}, false
}

// printable returns up to n bytes of b as one line of printable text.
func printable(b []byte, n int) string {
	s := strings.ToValidUTF8(string(b[:min(len(b), n)]), "?")
	s = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(b) > n {
		s += "…"
	}
	return s
}
