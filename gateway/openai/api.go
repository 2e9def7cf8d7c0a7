package openai

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/gateway/route"
)

// Options configure the API.
type Options struct {
	// Aliases map model names a caller may use to fleet model refs
	// ("fast" → "anthropic/claude-haiku-4-5"); an alias to "" names the
	// fleet's default model. A name that is no alias is taken as a fleet
	// model ref, which the fleet checks against its own allowlist.
	Aliases map[string]string
	// Models are the fleet model refs GET /v1/models lists besides the
	// aliases (the fleet has no list to ask for).
	Models []string
	// MaxBodyBytes bounds a request body; default MaxBodyBytesDefault.
	MaxBodyBytes int64
	// WriteTimeout bounds each write of a stream: a client that stops
	// reading loses its stream (its run goes on); default
	// WriteTimeoutDefault.
	WriteTimeout time.Duration
	// KeepAlive is the interval of SSE comment lines on a quiet stream;
	// default KeepAliveDefault.
	KeepAlive time.Duration
	// PollWait is how long GET /v1/responses/{id} (not streaming) waits
	// for a response in progress to show more: it answers once no event
	// came for PollWait after one came (or after the fleet said the run
	// waits in its queue); default PollWaitDefault.
	PollWait time.Duration
	// Logger logs what a caller cannot be told; default zerolog.Nop().
	Logger zerolog.Logger
	// Now returns the time; default time.Now.
	Now func() time.Time
}

// Defaults of Options.
const (
	MaxBodyBytesDefault = 8 << 20
	KeepAliveDefault    = 15 * time.Second
	WriteTimeoutDefault = 30 * time.Second
	PollWaitDefault     = 250 * time.Millisecond
)

// API serves the OpenAI-compatible routes.
type API struct {
	c   *lanefleet.Client
	opt Options
}

// New returns the API over the fleet client c.
func New(c *lanefleet.Client, opt Options) *API {
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = MaxBodyBytesDefault
	}
	if opt.WriteTimeout <= 0 {
		opt.WriteTimeout = WriteTimeoutDefault
	}
	if opt.KeepAlive <= 0 {
		opt.KeepAlive = KeepAliveDefault
	}
	if opt.PollWait <= 0 {
		opt.PollWait = PollWaitDefault
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &API{c: c, opt: opt}
}

// Routes returns the API's routes.
func (a *API) Routes() []route.Route {
	return []route.Route{
		{Method: http.MethodPost, Pattern: "/v1/chat/completions", Reach: route.SessionWrite, Handler: a.caller(a.chat)},
		{Method: http.MethodPost, Pattern: "/v1/responses", Reach: route.SessionWrite, Handler: a.caller(a.createResponse)},
		{Method: http.MethodGet, Pattern: "/v1/responses/{id}", Reach: route.Session, Handler: a.caller(a.getResponse)},
		{Method: http.MethodPost, Pattern: "/v1/responses/{id}/cancel", Reach: route.SessionWrite, Handler: a.caller(a.cancelResponse)},
		{Method: http.MethodGet, Pattern: "/v1/models", Reach: route.Caller, Handler: a.caller(a.models)},
		{Method: http.MethodGet, Pattern: "/v1/models/{model...}", Reach: route.Caller, Handler: a.caller(a.retrieveModel)},
	}
}

// caller refuses a request without a principal.
func (a *API) caller(h func(http.ResponseWriter, *http.Request, *auth.Principal)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := auth.FromContext(r.Context())
		if p == nil || !p.CanRead() {
			writeError(w, &apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "invalid_api_key", msg: "no valid credentials were given"})
			return
		}
		h(w, r, p)
	})
}

// decodeBody reads a JSON request body into v, bounded.
func (a *API) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return &apiError{status: http.StatusUnsupportedMediaType, typ: "invalid_request_error", msg: "the body must be application/json"}
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.opt.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", msg: fmt.Sprintf("the body is larger than %d bytes", mbe.Limit)}
		}
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", msg: "the body could not be read"}
	}
	if err := json.Unmarshal(body, v); err != nil {
		msg := "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)"
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: te.Field, msg: fmt.Sprintf("invalid type for %s: expected %s", te.Field, te.Type)}
		}
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", msg: msg}
	}
	return nil
}

// resolveModel returns the fleet model ref of the name a request gives,
// refusing a name the caller may not use (404, as OpenAI answers a model
// that does not exist).
func (a *API) resolveModel(p *auth.Principal, name string) (string, error) {
	if len(name) > maxModelName {
		return "", &apiError{status: 400, typ: "invalid_request_error", param: "model", msg: "model is too long"}
	}
	ref, alias := a.opt.Aliases[name]
	if !alias {
		ref = name
	}
	if !p.AllowsModel(name) && !(alias && ref != "" && p.AllowsModel(ref)) {
		return "", modelNotFound(name)
	}
	return ref, nil
}

func modelNotFound(name string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "model", code: "model_not_found",
		msg: fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", name)}
}

// turn is one request's message to a session.
type turn struct {
	session  string
	fresh    bool
	model    string // the name the request gave
	ref      string // its fleet model ref
	items    []item // the request's conversation
	tools    []events.ClientTool
	thinking string
	follow   bool
	param    string // the request's conversation parameter: messages, input
}

// sendTimeout bounds a turn's check, import and send, which the caller's
// leaving does not cut short (as the native API's send): a publish
// cancelled halfway could leave the caller unsure whether its message
// went, and an import half-done.
const sendTimeout = 90 * time.Second

// send checks the request's earlier conversation against the session's
// transcript (importing it into a fresh session), then sends the new
// input and returns its run.
func (a *API) send(ctx context.Context, t *turn) (*lanefleet.Run, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sendTimeout)
	defer cancel()
	prior, input, err := split(t.items, t.param)
	if err != nil {
		return nil, err
	}
	in, err := newInput(input, t.param)
	if err != nil {
		return nil, err
	}
	if !t.fresh && len(prior) > 0 {
		// Only a request that repeats earlier messages needs the
		// transcript; one that sends the new input alone costs nothing.
		entries, err := a.c.History(ctx, t.session)
		if err != nil {
			return nil, err
		}
		stored := project(entries, clientCallIDs(t.items))
		if len(stored) == 0 {
			t.fresh = true // an empty session takes the conversation as a fresh one
		} else if err := matchTail(prior, stored); err != nil {
			return nil, err
		}
	}
	if t.fresh && len(prior) > 0 {
		file, err := importFile(prior, t.ref, t.param, a.opt.Now())
		if err != nil {
			return nil, err
		}
		if err := a.c.Import(ctx, t.session, bytes.NewReader(file)); err != nil {
			return nil, fmt.Errorf("openai: import the earlier conversation into %q: %w", t.session, err)
		}
	}
	opts := []lanefleet.SendOption{lanefleet.WithMode("followup")}
	if t.ref != "" {
		opts = append(opts, lanefleet.WithModel(t.ref))
	}
	if t.thinking != "" {
		opts = append(opts, lanefleet.WithThinking(t.thinking))
	}
	if len(t.tools) > 0 {
		opts = append(opts, lanefleet.WithTools(t.tools...))
	}
	if len(in.results) > 0 {
		opts = append(opts, lanefleet.WithToolResults(in.results...))
	}
	for _, img := range in.images {
		data, _ := base64.StdEncoding.DecodeString(img.Data) // checked by dataImage
		opts = append(opts, lanefleet.WithImage(img.MimeType, data))
	}
	if !t.follow {
		opts = append(opts, lanefleet.WithoutFollow())
	}
	return a.c.Send(ctx, t.session, in.text, opts...)
}

// toolOf converts a function tool; param names its parameters in the
// request, for the error.
func toolOf(param, name, desc string, params json.RawMessage) (events.ClientTool, error) {
	t := events.ClientTool{Name: name, Description: desc}
	if len(params) > 0 && string(params) != "null" {
		if err := json.Unmarshal(params, &t.Parameters); err != nil {
			return t, badParam(param, "tool %q: parameters must be a JSON Schema object", name)
		}
	}
	return t, nil
}

// modelNames are the names GET /v1/models lists for the caller, sorted:
// the aliases and listed models it may name, and the models its token
// names.
func (a *API) modelNames(p *auth.Principal) []string {
	seen := map[string]bool{}
	var names []string
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for alias, ref := range a.opt.Aliases {
		if p.AllowsModel(alias) || ref != "" && p.AllowsModel(ref) {
			add(alias)
		}
	}
	for _, m := range a.opt.Models {
		if p.AllowsModel(m) {
			add(m)
		}
	}
	for _, m := range p.Models {
		if _, alias := a.opt.Aliases[m]; !alias {
			add(m)
		}
	}
	sort.Strings(names)
	return names
}

// model is a model as OpenAI lists one.
type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func modelOf(name string) model { return model{ID: name, Object: "model", OwnedBy: "lanefleet"} }

// models serves GET /v1/models: the models the caller may name.
func (a *API) models(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, n := range a.modelNames(p) {
		list.Data = append(list.Data, modelOf(n))
	}
	writeJSON(w, http.StatusOK, list)
}

// retrieveModel serves GET /v1/models/{model}: one model the list shows
// the caller, else 404. A fleet ref's slash stays in the path
// (/v1/models/anthropic/claude-haiku-4-5).
func (a *API) retrieveModel(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	name := r.PathValue("model")
	if slices.Contains(a.modelNames(p), name) {
		writeJSON(w, http.StatusOK, modelOf(name))
		return
	}
	writeError(w, modelNotFound(name))
}

// ParseAliases reads model aliases as a command line gives them, each
// "NAME=REF" ("NAME=" names the fleet's default model).
func ParseAliases(specs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range specs {
		name, ref, ok := strings.Cut(s, "=")
		name, ref = strings.TrimSpace(name), strings.TrimSpace(ref)
		if !ok || name == "" || len(name) > maxModelName || len(ref) > maxModelName {
			return nil, fmt.Errorf("model alias %q: want NAME=REF, e.g. fast=anthropic/claude-haiku-4-5", s)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("model alias %q given twice", name)
		}
		out[name] = ref
	}
	return out, nil
}
