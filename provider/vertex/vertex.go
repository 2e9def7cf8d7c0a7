// Package vertex adapts Google Vertex AI to provider.Provider: Gemini
// through generateContent ("google-vertex", streamGenerateContent with
// alt=sse) and Anthropic's Claude through rawPredict ("anthropic-vertex",
// streamRawPredict, anthropic_version vertex-2023-10-16), both on
// https://{location}-aiplatform.googleapis.com (aiplatform.googleapis.com
// for location global) under
// /v1/projects/{project}/locations/{location}/publishers/{google,anthropic}/models/{model}.
// The bodies and streams are the Gemini API's and the Messages API's: the
// google and anthropic adapters build and read them, routed here (their
// NewRouted); this package adds the URL, the project and location, and
// the bearer token.
//
// Calls authenticate with OAuth access tokens from Google credentials
// (golang.org/x/oauth2/google): a request's key is a credentials JSON
// document or the path of one (a service-account key, gcloud user
// credentials, a workload identity federation configuration); without one
// Application Default Credentials are looked for (GOOGLE_APPLICATION_CREDENTIALS,
// gcloud's file, the metadata server). Each credential's token is cached,
// shared by concurrent calls and refreshed in the background before it
// expires (token.go); a failure to get one is a classified
// *provider.Error like any other.
//
// vertex.go holds the adapter and its routes, auth.go the credentials,
// token.go the token cache.
package vertex

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/anthropic"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/provider/google"
	"github.com/lanefleet/lanefleet/provider/internal/adapter"
	"github.com/lanefleet/lanefleet/provider/internal/tokens"
)

// DefaultBaseURL is the global endpoint, the catalog's base URL of the
// Vertex providers: a model with it goes to its location's endpoint.
const DefaultBaseURL = "https://aiplatform.googleapis.com"

// AnthropicVersion is the anthropic_version of every rawPredict body.
const AnthropicVersion = "vertex-2023-10-16"

// LocationDefault is the location when GOOGLE_CLOUD_LOCATION is unset:
// the global endpoint, which serves current Gemini and Claude models.
const LocationDefault = "global"

// vertexBetas are the Anthropic beta features sent to Vertex AI (as the
// anthropic-beta header); the Messages API's others are not offered there.
var vertexBetas = map[string]bool{"interleaved-thinking-2025-05-14": true}

// Config configures the adapter.
type Config struct {
	// Config holds what every adapter shares (HTTPClient, IdleTimeout,
	// Headers, Now, WireCacheBytes).
	adapter.Config
	// Env looks up GOOGLE_CLOUD_PROJECT (or GCLOUD_PROJECT),
	// GOOGLE_CLOUD_LOCATION (or CLOUD_ML_REGION), and for Application
	// Default Credentials GOOGLE_APPLICATION_CREDENTIALS, CLOUDSDK_CONFIG
	// and HOME; nil is an empty environment.
	Env func(string) string
	// TokenClient fetches tokens; nil is a client with a
	// TokenTimeoutDefault timeout.
	TokenClient *http.Client
	// RefreshBefore is how long before its expiry a token is refreshed in
	// the background; 0 is tokens.RefreshBeforeDefault (5 minutes).
	RefreshBefore time.Duration
}

// Adapter streams Gemini and Claude on Vertex AI. It is safe for
// concurrent use; Close waits for the token refreshes in flight.
type Adapter struct {
	env    func(string) string
	creds  *credentials
	gemini *google.Adapter
	claude *anthropic.Adapter
}

// New returns a Vertex AI adapter.
func New(cfg Config) *Adapter {
	if cfg.Env == nil {
		cfg.Env = func(string) string { return "" }
	}
	if cfg.TokenClient == nil {
		cfg.TokenClient = &http.Client{Timeout: TokenTimeoutDefault}
	}
	if cfg.RefreshBefore <= 0 {
		cfg.RefreshBefore = tokens.RefreshBeforeDefault
	}
	a := &Adapter{env: cfg.Env, creds: newCredentials(cfg.Env, cfg.TokenClient, cfg.RefreshBefore)}
	a.gemini = google.NewRouted("vertex", cfg.Config, a.geminiRoute)
	a.claude = anthropic.NewRouted("vertex-anthropic", cfg.Config, anthropic.Route{Version: AnthropicVersion, Target: a.claudeRoute})
	return a
}

var _ provider.Provider = (*Adapter)(nil)

// Stream sends req to the model's publisher, by its wire API:
// catalog.APIGoogleVertex (Gemini) or catalog.APIAnthropicVertex
// (Claude). Failures, credentials' included, return the partial message
// and a *provider.Error.
func (a *Adapter) Stream(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
	if req.Model.API == catalog.APIAnthropicVertex {
		return a.claude.Stream(ctx, req, emit)
	}
	return a.gemini.Stream(ctx, req, emit)
}

// Close waits for the token refreshes in flight (each bounded by the
// token client's timeout).
func (a *Adapter) Close() { a.creds.wg.Wait() }

// geminiRoute sends a call to the model's streamGenerateContent.
func (a *Adapter) geminiRoute(ctx context.Context, req *provider.Request) (adapter.Call, error) {
	return a.route(ctx, req, "google", "streamGenerateContent?alt=sse")
}

// claudeRoute sends a call to the model's streamRawPredict, with the
// betas Vertex AI takes.
func (a *Adapter) claudeRoute(ctx context.Context, req *provider.Request, betas []string) (adapter.Call, error) {
	call, err := a.route(ctx, req, "anthropic", "streamRawPredict")
	if err != nil {
		return call, err
	}
	var keep []string
	for _, b := range betas {
		if vertexBetas[b] {
			keep = append(keep, b)
		}
	}
	if len(keep) > 0 {
		call.Header.Set("anthropic-beta", strings.Join(keep, ","))
	}
	return call, nil
}

var (
	locationRe = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	projectRe  = regexp.MustCompile(`^[a-z0-9][a-z0-9.:-]{0,127}$`)
)

// route returns the call of req to method of the model under publisher:
// its credential's token as a bearer, its project and location in the
// path, and the location's endpoint unless the model has a base URL of
// its own (VERTEX_BASE_URL).
func (a *Adapter) route(ctx context.Context, req *provider.Request, publisher, method string) (adapter.Call, error) {
	cred, err := a.creds.get(req.APIKey)
	if err != nil {
		return adapter.Call{}, &provider.Error{Reason: provider.ReasonAuthPermanent, Message: err.Error(), Err: err}
	}
	project := firstEnv(a.env, "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT")
	if project == "" {
		project = cred.project
	}
	if project == "" {
		return adapter.Call{}, &provider.Error{Reason: provider.ReasonAuthPermanent, Message: "vertex: no project: set GOOGLE_CLOUD_PROJECT (the credential names none)"}
	}
	if !projectRe.MatchString(project) {
		return adapter.Call{}, &provider.Error{Reason: provider.ReasonFormat, Message: fmt.Sprintf("vertex: project %q is not a Google Cloud project id", project)}
	}
	location := firstEnv(a.env, "GOOGLE_CLOUD_LOCATION", "CLOUD_ML_REGION")
	if location == "" {
		location = LocationDefault
	}
	if !locationRe.MatchString(location) {
		return adapter.Call{}, &provider.Error{Reason: provider.ReasonFormat, Message: fmt.Sprintf("vertex: location %q is not a Google Cloud location", location)}
	}
	tok, err := cred.tokens.Token(ctx)
	if err != nil {
		return adapter.Call{}, tokens.Error("vertex", err)
	}
	base := req.Model.BaseURL
	if base == "" || strings.TrimRight(base, "/") == DefaultBaseURL {
		base = Endpoint(location)
	}
	path := "projects/" + url.PathEscape(project) + "/locations/" + location + "/publishers/" + publisher +
		"/models/" + url.PathEscape(req.Model.ID) + ":" + method
	if b := strings.TrimRight(base, "/"); !strings.HasSuffix(b, "/v1") && !strings.HasSuffix(b, "/v1beta1") {
		path = "v1/" + path
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+tok)
	return adapter.Call{Base: base, Path: path, Header: h}, nil
}

// Endpoint returns the Vertex AI endpoint of a location:
// https://{location}-aiplatform.googleapis.com, or the global endpoint
// for "global".
func Endpoint(location string) string {
	if location == LocationDefault {
		return DefaultBaseURL
	}
	return "https://" + location + "-aiplatform.googleapis.com"
}

func firstEnv(env func(string) string, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(env(n)); v != "" {
			return v
		}
	}
	return ""
}
