package registry

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/provider/local"
	"github.com/lanefleet/lanefleet/provider/scripted"
)

// Resolver maps "provider/model-id" to a model and the provider that serves
// it: scripted models from the built-in scripted provider, everything else
// through the registry (catalog, API keys and base URLs from the worker's
// environment). It implements runner.Resolver and decides which models a
// worker runs (Policy).
type Resolver struct {
	env      func(string) string
	scripted *scripted.Provider
	served   []provider.Model
	registry *Registry
	log      zerolog.Logger
}

// ResolverConfig configures a Resolver.
type ResolverConfig struct {
	Env      func(string) string
	Scripted *scripted.Provider // serves the scripted test models; nil turns them off
	Catalog  *catalog.Catalog   // nil = catalog.Builtin()
	// Served are the --openai-compatible server's models, in its order
	// (also in Catalog).
	Served []provider.Model
	Keys   map[string]provider.Secret // API keys by provider besides Env's
	Logger zerolog.Logger
}

// NewResolver returns a worker's model resolver.
func NewResolver(cfg ResolverConfig) *Resolver {
	return &Resolver{env: cfg.Env, scripted: cfg.Scripted, served: cfg.Served, log: cfg.Logger,
		registry: New(Config{Env: cfg.Env, Catalog: cfg.Catalog, Keys: cfg.Keys})}
}

// defaultModels is the default model per provider key, in the order keys are
// looked for.
var defaultModels = []struct{ env, ref string }{
	{"ANTHROPIC_API_KEY", "anthropic/claude-sonnet-4-6"},
	{"ANTHROPIC_OAUTH_TOKEN", "anthropic/claude-sonnet-4-6"},
	{"OPENAI_API_KEY", "openai/gpt-5-mini"},
	{"GEMINI_API_KEY", "google/gemini-2.5-flash"},
	{"GOOGLE_API_KEY", "google/gemini-2.5-flash"},
	{"GOOGLE_APPLICATION_CREDENTIALS", "vertex/gemini-2.5-flash"},
	// Azure OpenAI: a deployment named gpt-5-mini (--model azure/<deployment>
	// names another), by key, Entra ID token or service principal.
	{"AZURE_OPENAI_API_KEY", AzureDefault},
	{"AZURE_OPENAI_AD_TOKEN", AzureDefault},
	{"AZURE_CLIENT_SECRET", AzureDefault},
	{"OPENROUTER_API_KEY", "openrouter/anthropic/claude-sonnet-4.5"},
	{"MISTRAL_API_KEY", "mistral/devstral-medium-latest"},
	{"GROQ_API_KEY", "groq/llama-3.3-70b-versatile"},
	{"XAI_API_KEY", "xai/grok-4"},
	{"DEEPSEEK_API_KEY", "deepseek/deepseek-chat"},
	{"TOGETHER_API_KEY", "together/meta-llama/Llama-3.3-70B-Instruct-Turbo"},
	{"FIREWORKS_API_KEY", "fireworks/accounts/fireworks/models/gpt-oss-120b"},
	{"CEREBRAS_API_KEY", "cerebras/gpt-oss-120b"},
	{"MOONSHOT_API_KEY", "moonshot/kimi-k2-0905-preview"},
	{"ZAI_API_KEY", "zai/glm-4.6"},
	// The AWS chain: a profile, a region (an instance or container role
	// supplies the credentials), keys, web identity, a Bedrock API key.
	{"AWS_PROFILE", BedrockDefault},
	{"AWS_REGION", BedrockDefault},
	{"AWS_DEFAULT_REGION", BedrockDefault},
	{"AWS_ACCESS_KEY_ID", BedrockDefault},
	{"AWS_WEB_IDENTITY_TOKEN_FILE", BedrockDefault},
	{"AWS_BEARER_TOKEN_BEDROCK", BedrockDefault},
}

// AzureDefault is the default model when only Azure OpenAI is configured:
// the deployment named gpt-5-mini.
const AzureDefault = "azure/gpt-5-mini"

// BedrockDefault is the default model when only AWS is configured: Claude
// Sonnet through the global cross-region inference profile (served from
// any region, at the list price).
const BedrockDefault = "amazon-bedrock/global.anthropic.claude-sonnet-4-6"

// DefaultModel is the --openai-compatible server's first chat model, else
// the model of the first provider with an API key in the environment, else
// scripted/echo when the scripted models are on, else "".
func (r *Resolver) DefaultModel() string {
	if m, ok := local.DefaultModel(r.served); ok {
		return m.Ref()
	}
	for _, d := range defaultModels {
		if r.env(d.env) != "" {
			return d.ref
		}
	}
	if r.scripted != nil {
		return "scripted/echo"
	}
	return ""
}

// Check reports whether ref names a model the worker can serve at all: a
// known provider and wire API with an adapter, a context window the run
// guard accepts, and for the --openai-compatible server's provider a model
// it lists (keys are not checked: they may come from the auth profiles).
func (r *Resolver) Check(ref string) error {
	p, id, ok := strings.Cut(ref, "/")
	switch {
	case !ok:
		return fmt.Errorf("%q is not provider/model-id", ref)
	case p == scripted.ProviderName && r.scripted == nil:
		return fmt.Errorf("%q: the scripted test models are off (start the worker with --scripted)", ref)
	case p == scripted.ProviderName:
		return nil
	case p == local.ProviderName && len(r.served) > 0 && !servedLists(r.served, id):
		return fmt.Errorf("%q: the --openai-compatible server does not list %q; it lists %s", ref, id, servedIDs(r.served))
	}
	res, _, err := r.registry.ProviderFor(ref)
	if err != nil {
		return err
	}
	if strings.Contains(res.Model.BaseURL, "{resource}") {
		return fmt.Errorf("%q: no Azure OpenAI endpoint (set AZURE_OPENAI_ENDPOINT to https://<resource>.openai.azure.com, or AZURE_OPENAI_RESOURCE)", ref)
	}
	if err := guard.ResolveWindow(p, id, float64(res.Model.ContextWindow), guard.WindowConfig{}).Err(); err != nil {
		return fmt.Errorf("%q: %w (raise the model's contextWindow, and the server's context size, to at least that)", ref, err)
	}
	return nil
}

// runnable reports whether the worker can run ref beyond Check: a
// scripted model the scripted provider plays, a provider with a key (in
// the environment, the auth profiles or Config's keys) unless it needs
// none.
func (r *Resolver) runnable(ref string, creds *authprofile.Store) error {
	p, id, _ := strings.Cut(CanonicalRef(ref), "/")
	if p == scripted.ProviderName {
		if r.scripted == nil || !r.scripted.Serves(id) {
			return fmt.Errorf("%q: no such scripted model (echo, script, or a configured script)", ref)
		}
		return nil
	}
	res, err := r.registry.Resolve(ref)
	if err != nil {
		return err
	}
	if !NeedsKey(res.Model) || r.hasKey(p, creds) || r.ambientSet(p) {
		return nil
	}
	hint := "add an auth profile for " + p + " to --auth-profiles"
	if cp, ok := catalog.Provider(p); ok && len(cp.KeyEnv) > 0 {
		hint = "set " + strings.Join(cp.KeyEnv, " or ") + ", or " + hint
		if len(cp.AmbientEnv) > 0 {
			hint += ", or set " + strings.Join(cp.AmbientEnv, " or ") + " to use the default credentials of the machine"
		}
	}
	return fmt.Errorf("%q: no API key for provider %q (%s)", ref, p, hint)
}

// ambientSet reports whether p's adapter finds a cloud's default
// credentials and the environment says they are meant
// (GOOGLE_CLOUD_PROJECT set for Vertex AI on Google Cloud).
func (r *Resolver) ambientSet(p string) bool {
	cp, _ := catalog.Provider(authprofile.NormalizeProvider(p))
	for _, name := range cp.AmbientEnv {
		if strings.TrimSpace(r.env(name)) != "" {
			return true
		}
	}
	return false
}

// hasKey reports whether the worker holds a key for provider p.
func (r *Resolver) hasKey(p string, creds *authprofile.Store) bool {
	p = authprofile.NormalizeProvider(p)
	if _, ok := r.registry.APIKey(p); ok {
		return true
	}
	if creds != nil {
		for _, pr := range creds.Profiles {
			if authprofile.NormalizeProvider(pr.Provider) == p {
				return true
			}
		}
	}
	return false
}

// Canonical returns ref as the model's calls name it (provider/id of the
// resolved model), or ref itself when it does not resolve.
func (r *Resolver) Canonical(ref string) string {
	if p, _, _ := strings.Cut(ref, "/"); p == scripted.ProviderName {
		return ref
	}
	res, err := r.registry.Resolve(ref)
	if err != nil {
		return ref
	}
	return res.Model.Provider + "/" + res.Model.ID
}

// usable is Check and runnable: the worker can serve ref and call it.
func (r *Resolver) usable(ref string, creds *authprofile.Store) error {
	if err := r.Check(ref); err != nil {
		return err
	}
	return r.runnable(ref, creds)
}

// Policy checks that the default model and the fallbacks can run (a
// worker whose default model cannot logged ready while every turn
// failed), and returns the worker's model policy: allow (--allow-models),
// or by default the default model, the fallbacks, the catalog's models
// (with the models file) it has a key for and, when on, the scripted
// models. creds are the worker's auth profiles (keys besides the
// environment's).
func (r *Resolver) Policy(defaultModel string, fallbacks, allow []string, creds *authprofile.Store) (ModelPolicy, error) {
	if err := r.usable(defaultModel, creds); err != nil {
		return ModelPolicy{}, fmt.Errorf("default model: %w", err)
	}
	for _, f := range fallbacks {
		if err := r.usable(f, creds); err != nil {
			return ModelPolicy{}, fmt.Errorf("fallback model: %w", err)
		}
	}
	patterns := allow
	if len(patterns) == 0 {
		patterns = append([]string{defaultModel}, fallbacks...)
		for _, m := range r.registry.Catalog().Models() {
			if r.runnable(m.Ref(), creds) == nil {
				patterns = append(patterns, m.Ref())
			}
		}
		if r.scripted != nil {
			patterns = append(patterns, scripted.ProviderName+"/*")
		}
	}
	a, err := catalog.NewAllowlist(patterns...)
	if err != nil {
		return ModelPolicy{}, fmt.Errorf("--allow-models: %w", err)
	}
	// What a refusal lists: the allowed patterns of providers it can call.
	var offered []string
	for _, p := range a.Patterns() {
		if prov, _, _ := strings.Cut(p, "/"); r.mayCall(prov, creds) {
			offered = append(offered, p)
		}
	}
	o, err := catalog.NewAllowlist(offered...)
	if err != nil {
		return ModelPolicy{}, fmt.Errorf("--allow-models: %w", err)
	}
	return ModelPolicy{allowed: a, offered: o, usable: func(ref string) error { return r.usable(ref, creds) }}, nil
}

// mayCall reports whether some model of provider p (a name or a glob) may
// run: the scripted models when on, a provider with a key, one that needs
// none, or one the catalog does not know (a models file's or the
// --openai-compatible server's, which may need none).
func (r *Resolver) mayCall(p string, creds *authprofile.Store) bool {
	if p == scripted.ProviderName {
		return r.scripted != nil
	}
	cp, known := catalog.Provider(authprofile.NormalizeProvider(p))
	return !known || cp.NoKey || r.hasKey(p, creds) || r.ambientSet(p)
}

// ModelPolicy decides whether a worker runs a model a message or a
// session's settings name.
type ModelPolicy struct {
	allowed catalog.Allowlist      // --allow-models, or the default list
	offered catalog.Allowlist      // the allowed ones it can call: what a refusal lists
	usable  func(ref string) error // the worker can serve and call ref
}

// Refuse returns why the worker does not run model ref ("" when it
// does); from says where ref came from (" (the session's setting)").
func (p ModelPolicy) Refuse(ref, from string) string {
	if !p.allowed.Allows(ref) {
		return fmt.Sprintf("model %q%s is not allowed on this fleet; allowed: %s", ref, from, p.offered.Describe(12))
	}
	if p.usable != nil {
		if err := p.usable(ref); err != nil {
			why := strings.TrimPrefix(err.Error(), strconv.Quote(ref)+": ")
			return fmt.Sprintf("model %q%s cannot run on this fleet: %s; it runs: %s", ref, from, why, p.offered.Describe(12))
		}
	}
	return ""
}

// Resolve implements runner.Resolver.
func (r *Resolver) Resolve(ref string) (provider.Model, provider.Provider, error) {
	p, id, ok := strings.Cut(ref, "/")
	if !ok || p == "" || id == "" {
		return provider.Model{}, nil, fmt.Errorf("%q is not provider/model-id", ref)
	}
	if p == scripted.ProviderName {
		if r.scripted == nil {
			return provider.Model{ID: id, Provider: p}, nil, errors.New("the scripted test models are off on this worker")
		}
		return scripted.Model(id), r.scripted, nil
	}
	res, prov, err := r.registry.ProviderFor(ref)
	if err != nil {
		return provider.Model{ID: id, Provider: p}, nil, err
	}
	if res.Warning != "" {
		r.log.Warn().Str("model", ref).Msg(res.Warning)
	}
	return res.Model, prov, nil
}

// servedLists reports whether the server lists id, or id:latest (Ollama
// answers to a name without its tag).
func servedLists(served []provider.Model, id string) bool {
	for _, m := range served {
		if m.ID == id || m.ID == id+":latest" {
			return true
		}
	}
	return false
}

// servedIDs lists the server's model ids for a message.
func servedIDs(served []provider.Model) string {
	ids := make([]string, 0, min(len(served), 10))
	for _, m := range served[:min(len(served), 10)] {
		ids = append(ids, m.ID)
	}
	s := strings.Join(ids, ", ")
	if len(served) > 10 {
		s += fmt.Sprintf(" and %d more", len(served)-10)
	}
	return s
}
