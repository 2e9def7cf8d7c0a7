// Package azure adapts Azure OpenAI (and Azure AI Foundry's OpenAI
// endpoint) to provider.Provider: Chat Completions ("azure-openai-completions")
// and Responses ("azure-openai-responses"), the OpenAI wire APIs served by
// an Azure resource, with Azure's URLs and credentials. The body and the
// stream are package openai's; this package says where a call goes and
// how it is authenticated:
//
//   - the model id is the deployment's name; a resource's base URL
//     (https://{resource}.openai.azure.com) sends Chat Completions to
//     /openai/deployments/{deployment}/chat/completions and Responses to
//     /openai/responses, both with ?api-version= (AZURE_OPENAI_API_VERSION,
//     default DefaultAPIVersion); a base URL ending in /openai/v1 is the v1
//     API (chat/completions and responses under it, the deployment named in
//     the body, no api-version);
//   - an API key goes in the api-key header; an Entra ID access token (a
//     JWT: AZURE_OPENAI_AD_TOKEN, or an auth profile's token) as a bearer
//     token; with neither, a service principal's client credentials
//     (AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET) get tokens
//     from Entra ID (AZURE_AUTHORITY_HOST, default
//     https://login.microsoftonline.com), cached, shared by concurrent
//     calls and refreshed in the background before they expire.
//
// Azure's error bodies, its content filter's refusals and its rate-limit
// headers are classified by package failover like OpenAI's.
package azure

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/provider/internal/adapter"
	"github.com/lanefleet/lanefleet/provider/internal/tokens"
	"github.com/lanefleet/lanefleet/provider/openai"
)

// DefaultAPIVersion is the api-version of a resource's deployment URLs
// when AZURE_OPENAI_API_VERSION is unset: the first that serves both Chat
// Completions with every parameter the adapter sends (developer role,
// max_completion_tokens, stream_options) and the Responses API.
const DefaultAPIVersion = "2025-04-01-preview"

// Entra ID defaults.
const (
	// DefaultAuthorityHost is Entra ID's public cloud.
	DefaultAuthorityHost = "https://login.microsoftonline.com"
	// Scope is the scope of a token for Azure OpenAI.
	Scope = "https://cognitiveservices.azure.com/.default"
	// TokenTimeoutDefault bounds one token fetch.
	TokenTimeoutDefault = 30 * time.Second
)

// ErrNoCredentials reports a call with neither a key nor Entra ID client
// credentials.
var ErrNoCredentials = errors.New("azure: no credentials (set AZURE_OPENAI_API_KEY, AZURE_OPENAI_AD_TOKEN, or AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET for Entra ID)")

// Config configures the adapter.
type Config struct {
	adapter.Config
	// Env looks up AZURE_OPENAI_API_VERSION and Entra ID's AZURE_TENANT_ID,
	// AZURE_CLIENT_ID, AZURE_CLIENT_SECRET and AZURE_AUTHORITY_HOST; nil
	// is an empty environment.
	Env func(string) string
	// TokenClient fetches Entra ID tokens; nil is a client with a
	// TokenTimeoutDefault timeout.
	TokenClient *http.Client
	// RefreshBefore is how long before its expiry a token is refreshed in
	// the background; 0 is tokens.RefreshBeforeDefault.
	RefreshBefore time.Duration
}

// Adapter streams Azure OpenAI's Chat Completions and Responses. It is
// safe for concurrent use; Close waits for the token refreshes in flight.
type Adapter struct {
	env        func(string) string
	completion *openai.Completions
	responses  *openai.Responses

	tokenClient *http.Client
	before      time.Duration
	wg          sync.WaitGroup
	once        sync.Once
	entra       *tokens.Cache // nil when no client credentials are set
}

// New returns an Azure OpenAI adapter.
func New(cfg Config) *Adapter {
	if cfg.Env == nil {
		cfg.Env = func(string) string { return "" }
	}
	if cfg.TokenClient == nil {
		cfg.TokenClient = &http.Client{Timeout: TokenTimeoutDefault}
	}
	a := &Adapter{env: cfg.Env, tokenClient: cfg.TokenClient, before: cfg.RefreshBefore}
	a.completion = openai.NewCompletionsRouted("azure", cfg.Config, a.route)
	a.responses = openai.NewResponsesRouted("azure", cfg.Config, a.route)
	return a
}

var _ provider.Provider = (*Adapter)(nil)

// Stream sends req to its deployment over the model's wire API (see
// provider.Provider).
func (a *Adapter) Stream(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
	if req.Model.API == catalog.APIAzureResponses {
		return a.responses.Stream(ctx, req, emit)
	}
	return a.completion.Stream(ctx, req, emit)
}

// Close waits for the token refreshes in flight.
func (a *Adapter) Close() { a.wg.Wait() }

// route says where a call goes and authenticates it.
func (a *Adapter) route(ctx context.Context, req *provider.Request, path string) (adapter.Call, error) {
	base := req.Model.BaseURL
	if strings.Contains(base, "{resource}") {
		// The registry fills it from AZURE_OPENAI_RESOURCE.
		return adapter.Call{}, &provider.Error{Reason: provider.ReasonFormat,
			Message: "azure: no Azure OpenAI endpoint: set AZURE_OPENAI_ENDPOINT (https://<resource>.openai.azure.com) or AZURE_OPENAI_RESOURCE"}
	}
	version := strings.TrimSpace(a.env("AZURE_OPENAI_API_VERSION"))
	if version == "" {
		version = DefaultAPIVersion
	}
	callBase, callPath, err := Endpoint(base, req.Model.ID, path, version)
	if err != nil {
		return adapter.Call{}, &provider.Error{Reason: provider.ReasonFormat, Message: "azure: " + err.Error(), Err: err}
	}
	h := http.Header{}
	switch key := req.APIKey.Reveal(); {
	case IsBearer(key):
		h.Set("Authorization", "Bearer "+key)
	case key != "":
		h.Set("api-key", key)
	default:
		c, err := a.entraTokens()
		if err != nil {
			return adapter.Call{}, &provider.Error{Reason: provider.ReasonAuth, Message: err.Error(), Err: err}
		}
		tok, err := c.Token(ctx)
		if err != nil {
			return adapter.Call{}, tokens.Error("azure", err)
		}
		h.Set("Authorization", "Bearer "+tok)
	}
	return adapter.Call{Base: callBase, Path: callPath, Header: h}, nil
}

// entraTokens returns the token cache of the environment's service
// principal, made on first use; ErrNoCredentials when none is set.
func (a *Adapter) entraTokens() (*tokens.Cache, error) {
	tenant, id, secret := strings.TrimSpace(a.env("AZURE_TENANT_ID")), strings.TrimSpace(a.env("AZURE_CLIENT_ID")), a.env("AZURE_CLIENT_SECRET")
	if tenant == "" || id == "" || secret == "" {
		return nil, ErrNoCredentials
	}
	if !validName(tenant) {
		return nil, fmt.Errorf("azure: AZURE_TENANT_ID %q is not a tenant id or domain", tenant)
	}
	tokenURL, err := TokenURL(a.env("AZURE_AUTHORITY_HOST"), tenant)
	if err != nil {
		return nil, err
	}
	a.once.Do(func() {
		cc := clientcredentials.Config{ClientID: id, ClientSecret: secret, TokenURL: tokenURL, Scopes: []string{Scope}, AuthStyle: oauth2.AuthStyleInParams}
		ctx := context.WithValue(context.Background(), oauth2.HTTPClient, a.tokenClient)
		a.entra = tokens.New(cc.TokenSource(ctx), a.before, &a.wg)
	})
	return a.entra, nil
}

// TokenURL is Entra ID's token endpoint for tenant under authority (empty:
// DefaultAuthorityHost).
func TokenURL(authority, tenant string) (string, error) {
	authority = strings.TrimRight(strings.TrimSpace(authority), "/")
	if authority == "" {
		authority = DefaultAuthorityHost
	}
	u, err := url.Parse(authority)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("azure: AZURE_AUTHORITY_HOST %q is not an http(s) URL", authority)
	}
	return authority + "/" + url.PathEscape(tenant) + "/oauth2/v2.0/token", nil
}

// Endpoint returns where a call of the wire API path ("chat/completions"
// or "responses") for deployment goes, as a base URL and a path (with its
// query) joined under it:
//
//   - a base ending in /openai/v1 is the v1 API: path under it, no
//     api-version (the body names the deployment);
//   - a base that already names a deployment (…/openai/deployments/{name})
//     gets path with ?api-version=version;
//   - a resource's base gets /openai/deployments/{deployment} for Chat
//     Completions and /openai for Responses (whose body names the
//     deployment), with ?api-version=version.
func Endpoint(base, deployment, path, version string) (callBase, callPath string, err error) {
	u, err := url.Parse(strings.TrimSpace(base))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", "", errors.New("the base URL is not an http(s) URL: set AZURE_OPENAI_ENDPOINT to https://<resource>.openai.azure.com")
	}
	if !validDeployment(deployment) {
		return "", "", fmt.Errorf("deployment name %q: want 1 to 64 letters, digits, '-', '_' or '.'", deployment)
	}
	u.RawQuery, u.Fragment = "", ""
	p := strings.TrimRight(u.Path, "/")
	q := "?api-version=" + url.QueryEscape(version)
	switch {
	case strings.HasSuffix(p, "/openai/v1"):
		u.Path = p
		return u.String(), path, nil
	case strings.Contains(p, "/openai/deployments/"):
		u.Path = p
		return u.String(), path + q, nil
	case path == "responses":
		u.Path = strings.TrimSuffix(p, "/openai") + "/openai"
		return u.String(), path + q, nil
	}
	u.Path = strings.TrimSuffix(p, "/openai") + "/openai/deployments/" + deployment
	return u.String(), path + q, nil
}

// IsBearer reports whether key is an Entra ID access token (a JWT:
// three base64url parts, a JSON header) rather than an API key, which is
// hexadecimal or base62 and has no dots.
func IsBearer(key string) bool {
	return strings.HasPrefix(key, "eyJ") && strings.Count(key, ".") == 2
}

// validName reports a resource name, tenant id or tenant domain: letters,
// digits, '-' and '.', 1 to 253 of them.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// validDeployment reports a deployment name as Azure allows them.
func validDeployment(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return s != "." && s != ".."
}
