// Package catalog is the model catalog: the models shipped with the binary
// (embedded JSON: id, api, provider, base URL, context window, max output
// tokens, reasoning, input kinds, price), the known providers with their
// default API, base URL and credential variables, user model files that add
// or override entries, and the conservative defaults for a "provider/model"
// the catalog does not know.
package catalog

import (
	"cmp"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/lanefleet/lanefleet/provider"
)

// Wire APIs an adapter exists for.
const (
	APIAnthropicMessages  = "anthropic-messages"
	APIOpenAICompletions  = "openai-completions"
	APIOpenAIResponses    = "openai-responses"
	APIGoogleGenerativeAI = "google-generative-ai"
	APIGoogleVertex       = "google-vertex"            // Gemini on Vertex AI
	APIAnthropicVertex    = "anthropic-vertex"         // Claude on Vertex AI (rawPredict)
	APIBedrockConverse    = "bedrock-converse-stream"  // Amazon Bedrock's Converse
	APIAzureCompletions   = "azure-openai-completions" // Chat Completions on Azure OpenAI
	APIAzureResponses     = "azure-openai-responses"   // Responses on Azure OpenAI
)

// Conservative defaults for a model the catalog does not know.
const (
	UnknownContextWindow = 128000
	UnknownMaxTokens     = 8192
)

// ErrUnknownProvider is returned for a model reference whose provider is
// neither known nor named by any catalog entry.
var ErrUnknownProvider = errors.New("catalog: unknown provider")

//go:embed models.json
var builtin []byte

// ProviderInfo describes a known provider: its default wire API and base
// URL, the environment variables that may hold its API key (first non-empty
// wins) and override its base URL, whether it runs without a key (local
// servers), and when its adapter finds credentials itself when given
// none (a cloud's default credential chain).
type ProviderInfo struct {
	Name       string
	API        string
	BaseURL    string
	KeyEnv     []string
	BaseURLEnv []string
	NoKey      bool
	// AmbientEnv, when set, says the adapter looks for the cloud's
	// default credentials itself when it is given no key (Google's
	// metadata server; AWS's chain: environment, shared config and
	// profile, web identity, container and instance roles), so a call
	// needs none; any of these variables set says a worker is meant to
	// call it without one (GOOGLE_CLOUD_PROJECT; AWS_PROFILE, AWS_REGION).
	AmbientEnv []string
}

var providers = []ProviderInfo{
	// Anthropic: an API key, or a Claude subscription's OAuth token
	// (sk-ant-oat…, from `claude setup-token`), sent as a bearer.
	{Name: "anthropic", API: APIAnthropicMessages, BaseURL: "https://api.anthropic.com", KeyEnv: []string{"ANTHROPIC_API_KEY", "ANTHROPIC_OAUTH_TOKEN"}, BaseURLEnv: []string{"ANTHROPIC_BASE_URL"}},
	{Name: "openai", API: APIOpenAIResponses, BaseURL: "https://api.openai.com/v1", KeyEnv: []string{"OPENAI_API_KEY"}, BaseURLEnv: []string{"OPENAI_BASE_URL"}},
	{Name: "google", API: APIGoogleGenerativeAI, BaseURL: "https://generativelanguage.googleapis.com/v1beta", KeyEnv: []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"}, BaseURLEnv: []string{"GOOGLE_GEMINI_BASE_URL", "GEMINI_BASE_URL"}},
	// Amazon Bedrock ("bedrock/…" is the same: see registry) authenticates
	// with the AWS credential chain (or an Amazon Bedrock API key); its
	// base URL's {region} is the AWS region.
	{Name: "amazon-bedrock", API: APIBedrockConverse, BaseURL: "https://bedrock-runtime.{region}.amazonaws.com", KeyEnv: []string{"AWS_BEARER_TOKEN_BEDROCK"}, BaseURLEnv: []string{"BEDROCK_BASE_URL"},
		AmbientEnv: []string{"AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"}},
	// Azure OpenAI: a model id is a deployment's name; the base URL is
	// the resource's endpoint ({resource}: AZURE_OPENAI_RESOURCE), or its
	// v1 API (…/openai/v1). A key goes in the api-key header, an Entra ID
	// token (AZURE_OPENAI_AD_TOKEN) as a bearer; with neither, a service
	// principal's client credentials (AZURE_CLIENT_SECRET with
	// AZURE_TENANT_ID and AZURE_CLIENT_ID) get tokens.
	{Name: "azure", API: APIAzureCompletions, BaseURL: "https://{resource}.openai.azure.com", KeyEnv: []string{"AZURE_OPENAI_API_KEY", "AZURE_OPENAI_AD_TOKEN"},
		BaseURLEnv: []string{"AZURE_OPENAI_BASE_URL", "AZURE_OPENAI_ENDPOINT"}, AmbientEnv: []string{"AZURE_CLIENT_SECRET"}},
	{Name: "openrouter", API: APIOpenAICompletions, BaseURL: "https://openrouter.ai/api/v1", KeyEnv: []string{"OPENROUTER_API_KEY"}, BaseURLEnv: []string{"OPENROUTER_BASE_URL"}},
	{Name: "mistral", API: APIOpenAICompletions, BaseURL: "https://api.mistral.ai/v1", KeyEnv: []string{"MISTRAL_API_KEY"}, BaseURLEnv: []string{"MISTRAL_BASE_URL"}},
	{Name: "groq", API: APIOpenAICompletions, BaseURL: "https://api.groq.com/openai/v1", KeyEnv: []string{"GROQ_API_KEY"}, BaseURLEnv: []string{"GROQ_BASE_URL"}},
	{Name: "xai", API: APIOpenAICompletions, BaseURL: "https://api.x.ai/v1", KeyEnv: []string{"XAI_API_KEY"}, BaseURLEnv: []string{"XAI_BASE_URL"}},
	{Name: "cerebras", API: APIOpenAICompletions, BaseURL: "https://api.cerebras.ai/v1", KeyEnv: []string{"CEREBRAS_API_KEY"}, BaseURLEnv: []string{"CEREBRAS_BASE_URL"}},
	{Name: "deepseek", API: APIOpenAICompletions, BaseURL: "https://api.deepseek.com/v1", KeyEnv: []string{"DEEPSEEK_API_KEY"}, BaseURLEnv: []string{"DEEPSEEK_BASE_URL"}},
	{Name: "zai", API: APIOpenAICompletions, BaseURL: "https://api.z.ai/api/coding/paas/v4", KeyEnv: []string{"ZAI_API_KEY"}, BaseURLEnv: []string{"ZAI_BASE_URL"}},
	{Name: "together", API: APIOpenAICompletions, BaseURL: "https://api.together.xyz/v1", KeyEnv: []string{"TOGETHER_API_KEY"}, BaseURLEnv: []string{"TOGETHER_BASE_URL"}},
	{Name: "fireworks", API: APIOpenAICompletions, BaseURL: "https://api.fireworks.ai/inference/v1", KeyEnv: []string{"FIREWORKS_API_KEY"}, BaseURLEnv: []string{"FIREWORKS_BASE_URL"}},
	{Name: "moonshot", API: APIOpenAICompletions, BaseURL: "https://api.moonshot.ai/v1", KeyEnv: []string{"MOONSHOT_API_KEY"}, BaseURLEnv: []string{"MOONSHOT_BASE_URL"}},
	{Name: "vertex", API: APIGoogleVertex, BaseURL: "https://aiplatform.googleapis.com", KeyEnv: []string{"GOOGLE_APPLICATION_CREDENTIALS"}, BaseURLEnv: []string{"VERTEX_BASE_URL"}, AmbientEnv: []string{"GOOGLE_CLOUD_PROJECT"}},
	{Name: "vertex-anthropic", API: APIAnthropicVertex, BaseURL: "https://aiplatform.googleapis.com", KeyEnv: []string{"GOOGLE_APPLICATION_CREDENTIALS"}, BaseURLEnv: []string{"VERTEX_ANTHROPIC_BASE_URL", "VERTEX_BASE_URL"}, AmbientEnv: []string{"GOOGLE_CLOUD_PROJECT"}},
	{Name: "ollama", API: APIOpenAICompletions, BaseURL: "http://localhost:11434/v1", BaseURLEnv: []string{"OLLAMA_BASE_URL"}, NoKey: true},
	{Name: "vllm", API: APIOpenAICompletions, BaseURL: "http://localhost:8000/v1", KeyEnv: []string{"VLLM_API_KEY"}, BaseURLEnv: []string{"VLLM_BASE_URL"}, NoKey: true},
	{Name: "lmstudio", API: APIOpenAICompletions, BaseURL: "http://localhost:1234/v1", BaseURLEnv: []string{"LMSTUDIO_BASE_URL"}, NoKey: true},
}

// Providers returns the known providers.
func Providers() []ProviderInfo {
	out := make([]ProviderInfo, len(providers))
	copy(out, providers)
	return out
}

// Provider returns the known provider name.
func Provider(name string) (ProviderInfo, bool) {
	for _, p := range providers {
		if p.Name == name {
			return p, true
		}
	}
	return ProviderInfo{}, false
}

// KnownAPI reports whether an adapter exists for api.
func KnownAPI(api string) bool { return slices.Contains(apis, api) }

// Catalog is an immutable set of models keyed by "provider/id".
type Catalog struct {
	models map[string]provider.Model
}

// Builtin returns the catalog shipped with the binary.
func Builtin() *Catalog {
	ms, err := Parse(builtin)
	if err != nil {
		panic("catalog: embedded models.json: " + err.Error()) // a build defect, caught by tests
	}
	return New(ms...)
}

// New returns a catalog of models; later entries override earlier ones.
func New(models ...provider.Model) *Catalog {
	c := &Catalog{models: make(map[string]provider.Model, len(models))}
	for _, m := range models {
		c.models[m.Ref()] = m
	}
	return c
}

// With returns a copy of c with models added; a model whose provider/id is
// already present is merged field by field (non-zero fields of the new entry
// win), so a user file may change just a base URL or a price.
func (c *Catalog) With(models ...provider.Model) *Catalog {
	out := &Catalog{models: make(map[string]provider.Model, len(c.models)+len(models))}
	for k, v := range c.models {
		out.models[k] = v
	}
	for _, m := range models {
		if old, ok := out.models[m.Ref()]; ok {
			m = merge(old, m)
		}
		out.models[m.Ref()] = m
	}
	return out
}

func merge(old, m provider.Model) provider.Model {
	if m.API == "" {
		m.API = old.API
	}
	if m.BaseURL == "" {
		m.BaseURL = old.BaseURL
	}
	if m.ContextWindow == 0 {
		m.ContextWindow = old.ContextWindow
	}
	if m.MaxTokens == 0 {
		m.MaxTokens = old.MaxTokens
	}
	if !m.Reasoning {
		m.Reasoning = old.Reasoning
	}
	if len(m.Input) == 0 {
		m.Input = old.Input
	}
	if m.Cost == (provider.ModelCost{}) {
		m.Cost = old.Cost
	}
	return m
}

// Models returns every model, sorted by provider/id.
func (c *Catalog) Models() []provider.Model {
	out := make([]provider.Model, 0, len(c.models))
	for _, m := range c.models {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref() < out[j].Ref() })
	return out
}

// Lookup returns the model with reference "provider/id".
func (c *Catalog) Lookup(ref string) (provider.Model, bool) {
	m, ok := c.models[ref]
	if ok {
		m.Input = slices.Clone(m.Input)
	}
	return m, ok
}

// Resolved is a model reference resolved against the catalog. Warning is
// non-empty when the model was not in the catalog and conservative defaults
// were used.
type Resolved struct {
	Model   provider.Model
	Warning string
}

// Resolve returns the model for "provider/model-id" (the id may itself hold
// slashes: "openrouter/anthropic/claude-sonnet-4.5"). A model not in the
// catalog is still usable when its provider is known (or named by another
// entry): it gets that provider's API and base URL, a 128,000-token context
// window, 8,192 output tokens, text input, no reasoning, no price, and a
// warning. It returns an error wrapping ErrUnknownProvider otherwise.
func (c *Catalog) Resolve(ref string) (Resolved, error) {
	if m, ok := c.Lookup(ref); ok {
		return Resolved{Model: m}, nil
	}
	prov, id, ok := strings.Cut(ref, "/")
	if !ok || prov == "" || id == "" {
		return Resolved{}, fmt.Errorf("catalog: model %q: want provider/model-id", ref)
	}
	m := provider.Model{
		ID: id, Provider: prov, ContextWindow: UnknownContextWindow, MaxTokens: UnknownMaxTokens,
		Input: []string{"text"},
	}
	if p, ok := Provider(prov); ok {
		m.API, m.BaseURL = p.API, p.BaseURL
	} else {
		for _, e := range c.Models() {
			if e.Provider == prov {
				m.API, m.BaseURL = e.API, e.BaseURL
				break
			}
		}
	}
	if m.API == "" {
		return Resolved{}, fmt.Errorf("%w %q (model %q)", ErrUnknownProvider, prov, ref)
	}
	return Resolved{Model: m, Warning: UnknownModelWarning(m)}, nil
}

// UnknownModelWarning is the warning for a model resolved with the
// defaults of an unknown model: it names what will be used, so a caller
// that changes the base URL afterwards says the new one.
func UnknownModelWarning(m provider.Model) string {
	return fmt.Sprintf("model %s is not in the catalog; using %s at %s with a %d-token context window and %d output tokens",
		m.Ref(), m.API, m.BaseURL, m.ContextWindow, m.MaxTokens)
}

type fileProvider struct {
	BaseURL string           `json:"baseUrl"`
	API     string           `json:"api"`
	Models  []provider.Model `json:"models"`
}

// Parse reads a models file. Three shapes are accepted: a JSON array of
// models; {"models": [...]}; and pi's {"providers": {"<name>": {"baseUrl",
// "api", "models": [...]}}}, whose models inherit provider, baseUrl and api.
// Every model needs an id and a provider; api, when set (or inherited), must
// be one an adapter exists for. A model of a built-in provider gets that
// provider's api and base URL where it sets none; other fields may stay unset where the entry only
// changes a model already in the catalog (LoadFile checks the merged
// result). Unknown fields are ignored.
func Parse(data []byte) ([]provider.Model, error) {
	var out []provider.Model
	trimmed := strings.TrimSpace(string(data))
	switch {
	case strings.HasPrefix(trimmed, "["):
		if err := json.Unmarshal(data, &out); err != nil {
			return nil, fmt.Errorf("catalog: parse models: %w", err)
		}
	default:
		var f struct {
			Models    []provider.Model        `json:"models"`
			Providers map[string]fileProvider `json:"providers"`
		}
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, fmt.Errorf("catalog: parse models: %w", err)
		}
		out = f.Models
		names := make([]string, 0, len(f.Providers))
		for n := range f.Providers {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			p := f.Providers[n]
			for _, m := range p.Models {
				if m.Provider == "" {
					m.Provider = n
				}
				if m.BaseURL == "" {
					m.BaseURL = p.BaseURL
				}
				if m.API == "" {
					m.API = p.API
				}
				out = append(out, m)
			}
		}
	}
	for i, m := range out {
		if m.ID == "" || m.Provider == "" {
			return nil, fmt.Errorf("catalog: model %d: id and provider are required", i)
		}
		if p, ok := Provider(m.Provider); ok {
			out[i].API = cmp.Or(m.API, p.API)
			out[i].BaseURL = cmp.Or(m.BaseURL, p.BaseURL)
		}
		if out[i].API != "" && !KnownAPI(out[i].API) {
			return nil, fmt.Errorf("catalog: model %s: unsupported api %q (one of %s)", m.Ref(), out[i].API, strings.Join(apis, ", "))
		}
	}
	return out, nil
}

// MaxFileBytes bounds a user models file.
const MaxFileBytes = 16 << 20

// LoadFile reads a user models file (see Parse) and returns c with its models
// added or merged, then checked (see Check): an entry that is still
// missing its api or base URL after the merge, such as one of a provider
// the catalog does not know that names no "api", is an error naming it. A
// missing file is an error wrapping fs.ErrNotExist.
func (c *Catalog) LoadFile(path string) (*Catalog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("catalog: models file %s is larger than %d bytes", path, MaxFileBytes)
	}
	ms, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	out := c.With(ms...)
	if err := out.Check(); err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return out, nil
}

// Check reports the first model (by provider/id) that no adapter could
// call: one without an api an adapter exists for, or without an http(s)
// base URL (which may hold a placeholder its adapter fills in, such as
// Bedrock's {region}).
func (c *Catalog) Check() error {
	for _, m := range c.Models() {
		if err := checkModel(m); err != nil {
			return err
		}
	}
	return nil
}

// placeholder is a part of a base URL its adapter fills in ("{region}"
// in Bedrock's: the AWS region; "{resource}" in Azure's).
var placeholder = regexp.MustCompile(`\{[a-z]+\}`)

func checkModel(m provider.Model) error {
	if m.API == "" {
		why := ""
		if _, known := Provider(m.Provider); !known {
			why = fmt.Sprintf(" (provider %q is not built in, so nothing says which API it speaks)", m.Provider)
		}
		return fmt.Errorf("catalog: model %s has no \"api\"%s: set it on the model or its provider, one of %s",
			m.Ref(), why, strings.Join(apis, ", "))
	}
	if !KnownAPI(m.API) {
		return fmt.Errorf("catalog: model %s: unsupported api %q (one of %s)", m.Ref(), m.API, strings.Join(apis, ", "))
	}
	u, err := url.Parse(placeholder.ReplaceAllString(m.BaseURL, "x"))
	if m.BaseURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("catalog: model %s: \"baseUrl\" %q is not an http(s) URL: set it on the model or its provider", m.Ref(), m.BaseURL)
	}
	return nil
}

// apis are the wire APIs an adapter exists for, as error messages list them.
var apis = []string{APIOpenAICompletions, APIOpenAIResponses, APIAnthropicMessages, APIGoogleGenerativeAI, APIGoogleVertex, APIAnthropicVertex, APIBedrockConverse, APIAzureCompletions, APIAzureResponses}
