package remote

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
)

// Discovery and call defaults.
const (
	// WindowDefault is how long discovery collects $SRV.INFO replies.
	WindowDefault = 250 * time.Millisecond
	// CallTimeoutDefault bounds one remote call.
	CallTimeoutDefault = 60 * time.Second
	// RefreshIntervalDefault is how often Registry.Run refreshes.
	RefreshIntervalDefault = 30 * time.Second
)

// DiscoverConfig configures Discover and NewRegistry.
type DiscoverConfig struct {
	// Services are the micro service names whose endpoints are tools;
	// [ServiceNameDefault] when empty.
	Services []string
	// Window is how long discovery waits for $SRV.INFO replies;
	// WindowDefault when 0. It ends early when no service answers at all.
	Window time.Duration
	// CallTimeout bounds each call (the call's context may end it
	// sooner); CallTimeoutDefault when 0.
	CallTimeout time.Duration
	// MaxResultChars caps the text of each result in UTF-16 units;
	// MaxResultCharsDefault when 0.
	MaxResultChars int
	// Heartbeat is how often a call asks to hear from the process running
	// it; HeartbeatDefault when 0, HeartbeatMin at least. A call that had
	// a heartbeat and then hears nothing for HeartbeatMisses intervals
	// fails with ErrLost: the process was killed or cut off.
	Heartbeat time.Duration
	// RefreshInterval is how often Registry.Run refreshes;
	// RefreshIntervalDefault when 0.
	RefreshInterval time.Duration
	// Allow lists the tool names that may be used, each a name or a glob
	// with '*' ("github__*" allows every tool an MCP bridge serves for
	// its server github): an endpoint of another name is ignored, whoever
	// serves it. nil means every tool found — the fleet always passes the
	// operator's list, since any client that can answer $SRV.INFO could
	// otherwise offer tools to every run.
	Allow []string
	// Reserved are names no remote tool may take (the built-in tools): an
	// endpoint with such a name is ignored with a warning.
	Reserved []string
	// Logger receives skipped endpoints and failed background refreshes.
	// Silent when zero.
	Logger zerolog.Logger
}

func (c DiscoverConfig) withDefaults() DiscoverConfig {
	if len(c.Services) == 0 {
		c.Services = []string{ServiceNameDefault}
	}
	if c.Window <= 0 {
		c.Window = WindowDefault
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = CallTimeoutDefault
	}
	if c.MaxResultChars <= 0 {
		c.MaxResultChars = MaxResultCharsDefault
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = RefreshIntervalDefault
	}
	switch {
	case c.Heartbeat == 0:
		c.Heartbeat = HeartbeatDefault
	default:
		c.Heartbeat = min(max(c.Heartbeat, HeartbeatMin), heartbeatMax)
	}
	return c
}

// serviceNameRE is what micro accepts as a service name.
var serviceNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (c DiscoverConfig) validate() error {
	for _, s := range c.Services {
		if !serviceNameRE.MatchString(s) {
			return fmt.Errorf("remote: service name %q must match %s", s, serviceNameRE)
		}
	}
	for _, n := range c.Allow {
		if n == "*" || !ValidName(strings.ReplaceAll(n, "*", "")) {
			return fmt.Errorf("remote: allowed tool %q is not a tool name (1-64 of A-Z a-z 0-9 _ -) or a glob of one with '*' (a lone '*' is not taken)", n)
		}
		if slices.Contains(c.Reserved, n) {
			return fmt.Errorf("remote: tool %q is built in; a remote tool cannot take its name", n)
		}
	}
	return nil
}

// Discover asks the services named in cfg for their endpoints and returns
// one remote tool per distinct endpoint name, sorted by name. It waits
// cfg.Window for replies (less when nothing serves any of the services).
// It returns an error when cfg is invalid, the request cannot be sent or
// ctx ends first; no services means an empty list and no error.
func Discover(ctx context.Context, nc *nats.Conn, cfg DiscoverConfig) (tools.List, error) {
	r, err := NewRegistry(nc, cfg)
	if err != nil {
		return nil, err
	}
	if err := r.Refresh(ctx); err != nil {
		return nil, err
	}
	return r.Tools(), nil
}

// Registry keeps the remote tools found by the last Refresh. It is a
// tools.Set, safe for concurrent use; the run loop reads it while Run
// refreshes it in the background.
type Registry struct {
	nc    *nats.Conn
	cfg   DiscoverConfig
	log   zerolog.Logger
	mux   *updateMux
	tools atomic.Pointer[tools.List]
}

// NewRegistry returns an empty Registry; call Refresh or Run to fill it.
// It returns an error when a service name in cfg is not valid.
func NewRegistry(nc *nats.Conn, cfg DiscoverConfig) (*Registry, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Registry{nc: nc, cfg: cfg, log: cfg.Logger, mux: &updateMux{nc: nc}}
	r.tools.Store(&tools.List{})
	return r, nil
}

// Tools returns the tools of the last successful Refresh, sorted by name.
// The caller must not modify the list.
func (r *Registry) Tools() tools.List { return *r.tools.Load() }

// Specs implements tools.Set.
func (r *Registry) Specs() []provider.Tool { return r.Tools().Specs() }

// Lookup implements tools.Set.
func (r *Registry) Lookup(name string) (tools.Tool, bool) { return r.Tools().Lookup(name) }

// Run refreshes the registry at once and then every cfg.RefreshInterval
// until ctx ends, and returns ctx's cause. A failed refresh is logged and
// keeps the previous tools.
func (r *Registry) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.RefreshInterval)
	defer t.Stop()
	for {
		if err := r.Refresh(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn().Err(err).Msg("remote tools: refresh failed; keeping the previous tools")
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// Refresh discovers the tools again and replaces the registry's set. On
// error (the request could not be sent, ctx ended) the set is unchanged.
func (r *Registry) Refresh(ctx context.Context) error {
	infos, err := r.collect(ctx)
	if err != nil {
		return err
	}
	list := r.build(infos)
	r.tools.Store(&list)
	return nil
}

// collect sends one $SRV.INFO request per service name to a fresh inbox and
// gathers replies until the window ends.
func (r *Registry) collect(ctx context.Context) ([]micro.Info, error) {
	inbox := r.nc.NewInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("remote: discover: %w", err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // nothing to do about it; the inbox is never reused
	for _, name := range r.cfg.Services {
		subj, _ := micro.ControlSubject(micro.InfoVerb, name, "") // validated by NewRegistry
		if err := r.nc.PublishRequest(subj, inbox, nil); err != nil {
			return nil, fmt.Errorf("remote: discover: %w", err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.Window)
	defer cancel()
	var infos []micro.Info
	absent := 0
	for {
		msg, err := sub.NextMsgWithContext(wctx)
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			// No instance of one service exists; when none of them
			// does, nothing more can come.
			if absent++; absent == len(r.cfg.Services) && len(infos) == 0 {
				return nil, nil
			}
			continue
		case err != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("remote: discover: %w", context.Cause(ctx))
		case err != nil && wctx.Err() != nil:
			return infos, nil
		case err != nil:
			return nil, fmt.Errorf("remote: discover: %w", err)
		}
		var info micro.Info
		if err := json.Unmarshal(msg.Data, &info); err != nil || info.Type != micro.InfoResponseType {
			r.log.Debug().Str("subject", msg.Subject).Msg("remote tools: skipped a reply that is not a service info")
			continue
		}
		infos = append(infos, info)
	}
}

// candidate is one instance's view of a tool.
type candidate struct {
	spec    provider.Tool
	subject string
	version string
	id      string
	// idempotent: the endpoint declares the tool safe to call again.
	idempotent bool
}

// build turns service infos into one tool per endpoint name. When
// instances disagree, the spec of the highest version wins (ties: the
// lowest instance id, so one refresh is deterministic).
func (r *Registry) build(infos []micro.Info) tools.List {
	best := map[string]candidate{}
	for _, info := range infos {
		for _, ep := range info.Endpoints {
			c, err := parseEndpoint(ep)
			if err != nil {
				r.log.Debug().Str("service", info.Name).Str("id", info.ID).Str("endpoint", ep.Name).Err(err).Msg("remote tools: skipped endpoint")
				continue
			}
			if err := r.admit(c); errors.Is(err, errNotAllowed) {
				r.log.Debug().Str("service", info.Name).Str("endpoint", ep.Name).Msg("remote tools: not in the allowed list")
				continue
			} else if err != nil {
				r.log.Warn().Str("service", info.Name).Str("id", info.ID).Str("endpoint", ep.Name).Str("subject", ep.Subject).Err(err).Msg("remote tools: refused endpoint")
				continue
			}
			c.version, c.id = info.Version, info.ID
			if old, ok := best[c.spec.Name]; !ok || better(c, old) {
				best[c.spec.Name] = c
			}
		}
	}
	names := make([]string, 0, len(best))
	for n := range best {
		names = append(names, n)
	}
	slices.Sort(names)
	list := make(tools.List, 0, len(names))
	for _, n := range names {
		c := best[n]
		list = append(list, &remoteTool{nc: r.nc, spec: c.spec, subject: c.subject, idempotent: c.idempotent, timeout: r.cfg.CallTimeout, maxChars: r.cfg.MaxResultChars, mux: r.mux, heartbeat: r.cfg.Heartbeat})
	}
	return list
}

// errNotAllowed refuses a tool the operator did not list.
var errNotAllowed = errors.New("not an allowed remote tool")

// admit applies the operator's policy to an endpoint: a reserved name is
// refused, a name not allowed is refused, and the tool must be served on
// its own subject (agent.tool.<name>): a responder advertising another
// subject could otherwise make the worker send the model's arguments
// anywhere its permissions reach.
func (r *Registry) admit(c candidate) error {
	name := c.spec.Name
	switch {
	case slices.Contains(r.cfg.Reserved, name):
		return fmt.Errorf("tool %q is built in", name)
	case r.cfg.Allow != nil && !allowed(r.cfg.Allow, name):
		return errNotAllowed
	case c.subject != Subject(name):
		return fmt.Errorf("tool %q is served on %q, not %q", name, c.subject, Subject(name))
	}
	return nil
}

func parseEndpoint(ep micro.EndpointInfo) (candidate, error) {
	if !ValidName(ep.Name) {
		return candidate{}, errors.New("invalid tool name")
	}
	if ep.Subject == "" || strings.ContainsAny(ep.Subject, "*> \t\r\n") {
		return candidate{}, fmt.Errorf("subject %q cannot be called", ep.Subject)
	}
	pj, ok := ep.Metadata[MetaParameters]
	if !ok {
		return candidate{}, errors.New("no parameters metadata: not a tool")
	}
	var params map[string]any
	if err := json.Unmarshal([]byte(pj), &params); err != nil || params == nil {
		return candidate{}, fmt.Errorf("parameters metadata is not a JSON object: %v", err)
	}
	return candidate{
		spec:       provider.Tool{Name: ep.Name, Description: ep.Metadata[MetaDescription], Parameters: params},
		subject:    ep.Subject,
		idempotent: ep.Metadata[MetaIdempotent] == "true",
	}, nil
}

func better(a, b candidate) bool {
	if c := compareVersions(a.version, b.version); c != 0 {
		return c > 0
	}
	return a.id < b.id
}

// compareVersions orders SemVer strings by their major.minor.patch numbers,
// a release above its pre-releases; anything unparsable sorts lowest.
func compareVersions(a, b string) int {
	pa, oka := parseVersion(a)
	pb, okb := parseVersion(b)
	switch {
	case !oka || !okb:
		return cmp.Compare(boolInt(oka), boolInt(okb))
	}
	for i := range pa {
		if c := cmp.Compare(pa[i], pb[i]); c != 0 {
			return c
		}
	}
	return 0
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parseVersion returns major, minor, patch and 1 for a release or 0 for a
// pre-release.
func parseVersion(v string) ([4]int, bool) {
	var out [4]int
	v, _, _ = strings.Cut(v, "+")
	core, pre, hasPre := strings.Cut(v, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	if !hasPre || pre == "" {
		out[3] = 1
	}
	return out, true
}

var _ tools.Set = (*Registry)(nil)

// allowed reports whether name is in allow, as a name or matched by a glob
// ('*' matches any run of name characters; Validate has checked the
// patterns, which hold no other metacharacter).
func allowed(allow []string, name string) bool {
	for _, pat := range allow {
		if pat == name {
			return true
		}
		if strings.Contains(pat, "*") {
			if ok, _ := path.Match(pat, name); ok {
				return true
			}
		}
	}
	return false
}
