// Package registry is what the worker calls to get a Provider for a model:
// it resolves "provider/model-id" against the catalog, applies base URL
// overrides and API keys from an explicit environment (never the process
// environment implicitly), and dispatches by the model's wire API to the
// adapter for it.
package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/provider/local"
	"github.com/lanefleet/lanefleet/provider/openai"
)

// ErrUnsupportedAPI is returned for a model whose wire API has no adapter.
var ErrUnsupportedAPI = errors.New("registry: unsupported api")

// Config configures a Registry. The zero value has no environment (no keys
// configured) and the built-in catalog.
type Config struct {
	// Env looks up environment variables (os.Getenv in the worker, a map in
	// tests). nil means an empty environment.
	Env func(string) string
	// Catalog resolves model references; nil = catalog.Builtin().
	Catalog *catalog.Catalog
	// Keys are API keys by provider name given otherwise than in Env (a
	// flag); they win over Env.
	Keys map[string]provider.Secret
	// HTTPClient, when set, sends every adapter's requests as it is; nil
	// gives each adapter a pooled client per origin (keep-alive sized for
	// many concurrent turns, HTTP/2 where offered, no overall timeout).
	HTTPClient *http.Client
	// IdleTimeout abandons a silent stream; 0 = 5 minutes.
	IdleTimeout time.Duration
	// Now is the clock for message timestamps; nil = time.Now.
	Now func() time.Time
	// WireCacheBytes bounds, for each adapter (Chat Completions, Responses,
	// Anthropic, Gemini), what it keeps of its sessions' last requests to
	// encode only each request's new messages; 0 = the adapters' default
	// (16 MiB each), < 0 keeps none.
	WireCacheBytes int
}

// Registry hands out providers. It is safe for concurrent use and keeps no
// per-run state.
type Registry struct {
	env      func(string) string
	keys     map[string]provider.Secret
	catalog  *catalog.Catalog
	adapters map[string]provider.Provider
}

// New returns a registry for cfg.
func New(cfg Config) *Registry {
	if cfg.Env == nil {
		cfg.Env = func(string) string { return "" }
	}
	if cfg.Catalog == nil {
		cfg.Catalog = catalog.Builtin()
	}
	oc := openai.Config{HTTPClient: cfg.HTTPClient, IdleTimeout: cfg.IdleTimeout, Now: cfg.Now, WireCacheBytes: cfg.WireCacheBytes}
	r := &Registry{env: cfg.Env, keys: cfg.Keys, catalog: cfg.Catalog}
	r.adapters = map[string]provider.Provider{
		catalog.APIOpenAICompletions: openai.NewCompletions(oc),
	}
	addAdapters(r.adapters, cfg)
	return r
}

// FromEnv returns a registry over env with the built-in catalog.
func FromEnv(env func(string) string) *Registry { return New(Config{Env: env}) }

// Catalog returns the registry's catalog.
func (r *Registry) Catalog() *catalog.Catalog { return r.catalog }

// Resolve returns the model for "provider/model-id" with its base URL
// overridden from the provider's base URL variable (ANTHROPIC_BASE_URL,
// OPENAI_BASE_URL, …) when the model uses the provider's default URL. The
// variable of a local server (OLLAMA_BASE_URL, VLLM_BASE_URL,
// LMSTUDIO_BASE_URL) may be a bare origin, which gets /v1 (see
// local.BaseURL); one that is not an http(s) URL is an error. A model not
// in the catalog resolves with conservative defaults and a warning naming
// the URL it will use (see catalog.Resolve).
func (r *Registry) Resolve(ref string) (catalog.Resolved, error) {
	res, err := r.catalog.Resolve(CanonicalRef(ref))
	if err != nil {
		return res, err
	}
	if res.Model, err = r.applyBaseURL(res.Model); err != nil {
		return res, err
	}
	if res.Warning != "" {
		res.Warning = catalog.UnknownModelWarning(res.Model)
	}
	return res, nil
}

func (r *Registry) applyBaseURL(m provider.Model) (provider.Model, error) {
	p, ok := catalog.Provider(m.Provider)
	if ok && strings.Contains(m.BaseURL, "{resource}") {
		// Azure OpenAI's resource name, when its endpoint is not given.
		// A name with anything but letters, digits and '-' is left out
		// (it could move the host), and the model does not resolve.
		if res := strings.TrimSpace(r.env("AZURE_OPENAI_RESOURCE")); res != "" && len(res) <= 64 && strings.Trim(strings.ToLower(res), "abcdefghijklmnopqrstuvwxyz0123456789-") == "" {
			m.BaseURL = strings.ReplaceAll(m.BaseURL, "{resource}", res)
		}
	}
	if !ok || (m.BaseURL != "" && m.BaseURL != p.BaseURL) {
		return m, nil
	}
	for _, name := range p.BaseURLEnv {
		v := strings.TrimSpace(r.env(name))
		if v == "" {
			continue
		}
		if p.NoKey {
			u, err := local.BaseURL(v)
			if err != nil {
				return m, fmt.Errorf("registry: %s: %w", name, err)
			}
			v = u
		}
		m.BaseURL = v
		return m, nil
	}
	return m, nil
}

// CanonicalRef returns ref with its provider named canonically
// (authprofile.NormalizeProvider: lower case, aliases resolved, so
// "bedrock/…" is "amazon-bedrock/…"), as the run loop names it.
func CanonicalRef(ref string) string {
	p, id, ok := strings.Cut(ref, "/")
	if !ok {
		return ref
	}
	if c := authprofile.NormalizeProvider(p); c != p {
		return c + "/" + id
	}
	return ref
}

// APIKey returns the API key configured for a provider: its key in
// Config.Keys, else the first non-empty of its key variables (ANTHROPIC_API_KEY; OPENAI_API_KEY; GEMINI_API_KEY
// then GOOGLE_API_KEY; OPENROUTER_API_KEY; MISTRAL_API_KEY; …), or for a
// provider the catalog does not know (one from a user models file)
// <PROVIDER>_API_KEY with the name upper-cased and non-alphanumerics as
// "_". ok is false when none is set.
func (r *Registry) APIKey(providerName string) (key provider.Secret, ok bool) {
	providerName = authprofile.NormalizeProvider(providerName)
	if k := r.keys[providerName]; k != "" {
		return k, true
	}
	p, known := catalog.Provider(providerName)
	if !known {
		// A provider from a user models file: <NAME>_API_KEY.
		p.KeyEnv = []string{envName(providerName) + "_API_KEY"}
	}
	for _, name := range p.KeyEnv {
		if v := strings.TrimSpace(r.env(name)); v != "" {
			return provider.Secret(v), true
		}
	}
	return "", false
}

// HasAPIKey reports whether any real provider API key is configured, i.e.
// whether the worker can talk to a hosted model at all (otherwise it falls
// back to the scripted provider). Keyless local servers do not count.
func (r *Registry) HasAPIKey() bool { return HasAPIKey(r.env) }

// HasAPIKey reports whether env holds an API key for any known provider.
func HasAPIKey(env func(string) string) bool {
	if env == nil {
		return false
	}
	for _, p := range catalog.Providers() {
		for _, name := range p.KeyEnv {
			if p.NoKey {
				continue
			}
			if strings.TrimSpace(env(name)) != "" {
				return true
			}
		}
	}
	return false
}

// Provider returns the provider that serves m, dispatching on m.API. The
// returned provider fills Request.APIKey from the environment when the
// request has none, and fails with an auth error ("No API key found for
// provider …") when a known hosted provider has no key configured (local
// servers, custom providers and providers whose adapter finds a cloud's
// default credentials are called without one). It
// returns an error wrapping ErrUnsupportedAPI for an API without adapter.
func (r *Registry) Provider(m provider.Model) (provider.Provider, error) {
	a, ok := r.adapters[m.API]
	if !ok {
		return nil, fmt.Errorf("%w %q (model %s)", ErrUnsupportedAPI, m.API, m.Ref())
	}
	return &keyed{r: r, next: a}, nil
}

// ProviderFor resolves ref and returns its model and provider.
func (r *Registry) ProviderFor(ref string) (catalog.Resolved, provider.Provider, error) {
	res, err := r.Resolve(ref)
	if err != nil {
		return res, nil, err
	}
	p, err := r.Provider(res.Model)
	return res, p, err
}

type keyed struct {
	r    *Registry
	next provider.Provider
}

// Stream fills the API key from the environment and calls the adapter.
// The failure without a key is in noKey, not inlined here: this frame
// stays on the turn's stack while the model answers.
func (k *keyed) Stream(ctx context.Context, req *provider.Request, emit func(provider.Event)) (am message.Message, err error) {
	if req.APIKey == "" {
		key, ok := k.r.APIKey(req.Model.Provider)
		if !ok && NeedsKey(req.Model) && !ambient(req.Model.Provider) {
			return noKey(req, emit)
		}
		if ok {
			req = withKey(req, key)
		}
	}
	am, err = k.next.Stream(ctx, req, emit)
	return am, err
}

// noKey fails a call of a provider with no API key.
//
//go:noinline
func noKey(req *provider.Request, emit func(provider.Event)) (message.Message, error) {
	err := &provider.Error{Reason: provider.ReasonAuth, Message: fmt.Sprintf("No API key found for provider %q.", req.Model.Provider)}
	msg := message.Message{Role: message.RoleAssistant, API: req.Model.API, Provider: req.Model.Provider, Model: req.Model.ID,
		StopReason: message.StopError, ErrorMessage: err.Message, Usage: &message.Usage{}}
	if emit != nil {
		out := msg.Clone()
		emit(provider.Event{Type: provider.EventError, Reason: message.StopError, Message: &out})
	}
	return msg, err
}

// withKey is a copy of req with key.
//
//go:noinline
func withKey(req *provider.Request, key provider.Secret) *provider.Request {
	r := *req
	r.APIKey = key
	return &r
}

// NeedsKey reports whether a call of m needs an API key: m's provider is a
// known hosted one (not keyless) and its endpoint is not on this machine.
// A custom endpoint may not need a key and answers 401 if it does.
func NeedsKey(m provider.Model) bool {
	p, known := catalog.Provider(m.Provider)
	return known && !p.NoKey && needsKey(m)
}

// ambient reports a provider whose adapter looks for the cloud's default
// credentials when it is given no key (catalog.ProviderInfo.AmbientEnv).
func ambient(name string) bool {
	p, ok := catalog.Provider(name)
	return ok && len(p.AmbientEnv) > 0
}

// envName upper-cases a provider name for an environment variable.
func envName(provider string) string {
	b := []byte(strings.ToUpper(provider))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// needsKey reports whether a model's endpoint needs a key: local servers
// (localhost, 127.0.0.1) and providers marked keyless do not.
func needsKey(m provider.Model) bool {
	u := strings.ToLower(m.BaseURL)
	return !strings.Contains(u, "://localhost") && !strings.Contains(u, "://127.0.0.1") && !strings.Contains(u, "://[::1]")
}
