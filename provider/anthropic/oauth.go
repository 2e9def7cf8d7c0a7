package anthropic

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/tokens"
)

// The OAuth client of Claude subscriptions: Claude Code's public client,
// whose refresh tokens ("sk-ant-ort…") a Claude login hands out. Its
// token endpoint moved from console.anthropic.com to platform.claude.com
// in 2026; both are configuration (OAuthConfig), for a proxy, another
// deployment or a test.
const (
	// OAuthTokenURLDefault is Anthropic's OAuth token endpoint.
	OAuthTokenURLDefault = "https://platform.claude.com/v1/oauth/token"
	// OAuthClientIDDefault is Claude Code's OAuth client id.
	OAuthClientIDDefault = "9d1c250a-e61b-44d9-88ed-5944d1962f5e"
)

// OAuth defaults.
const (
	// OAuthClaimTTLDefault is how long a worker's claim to refresh a
	// profile's tokens holds: past it, a worker that stopped mid-refresh
	// is taken to be gone and another refreshes.
	OAuthClaimTTLDefault = 2 * time.Minute
	// OAuthTimeoutDefault bounds one request to the token endpoint.
	OAuthTimeoutDefault = 30 * time.Second
	// oauthPollDefault spaces the looks at a record another worker is
	// refreshing.
	oauthPollDefault = 200 * time.Millisecond
	// minLeft is the least life a token this worker does not hold yet
	// must have to be handed out without a refresh first.
	minLeft = 30 * time.Second
	// maxSeeds bounds the seeds a record remembers.
	maxSeeds = 8
	// maxRecordBytes bounds a stored record read back.
	maxRecordBytes = 64 << 10
)

// OAuthStore holds the fleet's copy of each OAuth profile's tokens, one
// record per profile with a revision for compare-and-swap (package
// authstore keeps them in the auth bucket). The record's bytes are this
// package's; they hold secrets and must never be logged.
type OAuthStore interface {
	// LoadOAuth returns profile's record and its revision: nil and 0
	// when there is none.
	LoadOAuth(ctx context.Context, profile string) (data []byte, rev uint64, err error)
	// SwapOAuth writes profile's record if its revision is still rev (0:
	// if there is none); ok is false, and nothing written, when another
	// write came first.
	SwapOAuth(ctx context.Context, profile string, data []byte, rev uint64) (newRev uint64, ok bool, err error)
}

// OAuthConfig configures an OAuth.
type OAuthConfig struct {
	// Store holds the tokens; required.
	Store OAuthStore
	// TokenURL is the token endpoint; "" = OAuthTokenURLDefault.
	TokenURL string
	// ClientID is the OAuth client of profiles that name none; "" =
	// OAuthClientIDDefault.
	ClientID string
	// HTTPClient sends the token requests; nil = a client with
	// Timeout.
	HTTPClient *http.Client
	// Timeout bounds one token request; 0 = OAuthTimeoutDefault.
	Timeout time.Duration
	// RefreshBefore is how long before its expiry an access token is
	// refreshed, in the background; 0 = tokens.RefreshBeforeDefault.
	RefreshBefore time.Duration
	// ClaimTTL is how long a refresh's claim holds; 0 =
	// OAuthClaimTTLDefault. It must exceed Timeout.
	ClaimTTL time.Duration
	// Owner names this worker in claims and in the errors others report
	// ("" = a random name).
	Owner string
	// Now is the clock; nil = time.Now.
	Now func() time.Time
	// Poll spaces the looks at a record another worker is refreshing;
	// 0 = 200 ms.
	Poll time.Duration
}

// OAuthProfile is one auth profile of OAuth type: where its tokens start
// from, and what to tell the operator when they stop working.
type OAuthProfile struct {
	// ID is the profile's id ("anthropic:sub").
	ID string
	// ClientID is the profile's OAuth client; "" = OAuthConfig.ClientID.
	ClientID string
	// Refresh is the refresh token the profile was given (its "refresh"
	// or the value its "refreshRef" names): the seed of the fleet's
	// tokens. A seed the fleet has not seen before replaces them; one it
	// has seen (rotated since) is ignored.
	Refresh provider.Secret
	// Access and Expires are the access token given with the seed, if
	// any, and its expiry (zero: none given).
	Access  provider.Secret
	Expires time.Time
	// From says where the profile's refresh token comes from, for the
	// error that asks for a new one ("refreshRef file:/run/secrets/x").
	From string
}

// ErrOAuthNoRefresh reports an OAuth profile with no refresh token,
// neither given nor held by the fleet.
var ErrOAuthNoRefresh = errors.New("no refresh token")

// OAuth hands out the access tokens of Anthropic OAuth profiles whose
// tokens are fleet state: the refresh token rotates at each refresh (the
// old one stops working), so one worker refreshes and the others read
// its result from the store.
//
// A refresh is claimed first (compare-and-swap on the record's revision,
// the claim naming its worker and lasting OAuthConfig.ClaimTTL); only the
// claim's winner asks the token endpoint, and it stores the new pair
// (compare-and-swap again, retried, with a context the caller's end does
// not cut) before anyone uses it. The others wait for the record to
// change and use the winner's tokens; none refreshes with a refresh token
// the record no longer holds. A worker that stopped between the exchange
// and the store leaves its claim, which expires: the next refresh tells,
// if the endpoint refuses the old refresh token, whose refresh was cut
// off. A refusal (invalid_grant) is recorded, so the fleet stops asking
// until the profile gets a new refresh token.
//
// Within a worker, each profile's tokens are a tokens.Cache: concurrent
// calls share one token and one refresh in flight, started in the
// background RefreshBefore ahead of expiry.
type OAuth struct {
	cfg    OAuthConfig
	client *http.Client
	ctx    context.Context // the refreshes'; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	profiles map[string]*oauthEntry
}

// oauthEntry is one profile's tokens in this worker.
type oauthEntry struct {
	cache *tokens.Cache
	src   *fleetSource
}

// NewOAuth returns the access tokens of the fleet's Anthropic OAuth
// profiles, kept in cfg.Store. Close waits for the refreshes in flight.
func NewOAuth(cfg OAuthConfig) (*OAuth, error) {
	if cfg.Store == nil {
		return nil, errors.New("anthropic: OAuth: no store")
	}
	if cfg.TokenURL == "" {
		cfg.TokenURL = OAuthTokenURLDefault
	}
	if cfg.ClientID == "" {
		cfg.ClientID = OAuthClientIDDefault
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = OAuthTimeoutDefault
	}
	if cfg.RefreshBefore <= 0 {
		cfg.RefreshBefore = tokens.RefreshBeforeDefault
	}
	if cfg.ClaimTTL <= 0 {
		cfg.ClaimTTL = OAuthClaimTTLDefault
	}
	if cfg.ClaimTTL <= cfg.Timeout {
		return nil, fmt.Errorf("anthropic: OAuth: a claim (%s) must outlast a token request (%s)", cfg.ClaimTTL, cfg.Timeout)
	}
	if cfg.Poll <= 0 {
		cfg.Poll = oauthPollDefault
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Owner == "" {
		cfg.Owner = "worker-" + rand.Text()[:8]
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: cfg.Timeout}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &OAuth{cfg: cfg, client: client, ctx: ctx, cancel: cancel, profiles: map[string]*oauthEntry{}}, nil
}

// Close cancels the refreshes in flight and waits for them. A refresh
// whose exchange has succeeded still stores its tokens first.
func (o *OAuth) Close() {
	o.cancel()
	o.wg.Wait()
}

// entry returns p's tokens, made at first use, with p as the profile's
// current configuration.
func (o *OAuth) entry(p OAuthProfile) *oauthEntry {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.profiles[p.ID]
	if !ok {
		src := &fleetSource{o: o}
		e = &oauthEntry{src: src, cache: tokens.New(src, o.cfg.RefreshBefore, &o.wg)}
		o.profiles[p.ID] = e
	}
	e.src.set(p)
	return e
}

// Token returns p's access token: the one this worker holds while it is
// good, else the fleet's, refreshed by one worker when it nears expiry.
// It fails with a *provider.Error: auth_permanent when the token
// endpoint refuses the refresh token (the profile needs a new one),
// rate_limit or timeout when it could not be asked.
func (o *OAuth) Token(ctx context.Context, p OAuthProfile) (provider.Secret, error) {
	tok, err := o.entry(p).cache.Token(ctx)
	if err != nil {
		var pe *provider.Error
		if errors.As(err, &pe) {
			return "", pe
		}
		if ctx.Err() != nil {
			return "", err
		}
		return "", &provider.Error{Reason: provider.ReasonTimeout, Message: "Anthropic OAuth: " + err.Error(), Err: err}
	}
	return provider.Secret(tok), nil
}

// Rejected tells that the API refused tok, p's access token, before its
// expiry (an HTTP 401): the next Token gets a new one, refreshing unless
// the fleet already holds another.
func (o *OAuth) Rejected(p OAuthProfile, tok provider.Secret) {
	e := o.entry(p)
	e.src.reject(tok.Reveal())
	e.cache.Forget(tok.Reveal())
}

// fleetSource is the oauth2.TokenSource of one profile under the
// tokens.Cache: each Token runs the fleet's refresh protocol.
type fleetSource struct {
	o *OAuth

	mu       sync.Mutex
	p        OAuthProfile
	rejected string // an access token the API refused
	held     string // the access token last handed to the cache
}

func (s *fleetSource) set(p OAuthProfile) {
	s.mu.Lock()
	s.p = p
	s.mu.Unlock()
}

func (s *fleetSource) reject(tok string) {
	s.mu.Lock()
	s.rejected = tok
	s.mu.Unlock()
}

// Token runs the protocol in the OAuth's context, bounded by a claim's
// life and a request's (a wait for another worker's claim, then a
// refresh of this one's).
func (s *fleetSource) Token() (*oauth2.Token, error) {
	s.mu.Lock()
	p, rejected, held := s.p, s.rejected, s.held
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.o.ctx, s.o.cfg.ClaimTTL+2*s.o.cfg.Timeout)
	defer cancel()
	tok, err := s.o.fetch(ctx, p, rejected, held)
	if err == nil {
		s.mu.Lock()
		if s.rejected == rejected {
			s.rejected = ""
		}
		s.held = tok.AccessToken
		s.mu.Unlock()
	}
	return tok, err
}

// record is the fleet's copy of one profile's tokens, as stored (JSON).
// Its fields are plain strings: it is marshalled for the store only.
type record struct {
	Access  string `json:"access,omitempty"`
	Refresh string `json:"refresh"`
	// Expires is the access token's expiry in Unix milliseconds; 0 =
	// unknown (used until the API refuses it).
	Expires int64 `json:"expires,omitempty"`
	// Seeds are hashes (SHA-256, 128 bits) of the refresh tokens
	// operators gave the profile, newest last: a seed among them is not
	// applied again.
	Seeds []string `json:"seeds,omitempty"`
	// Claim is the refresh in flight.
	Claim *claim `json:"claim,omitempty"`
	// Cut is a refresh that ended without storing its outcome: its
	// worker stopped, or lost its claim, mid-refresh.
	Cut *claim `json:"cut,omitempty"`
	// Failed is the token endpoint's refusal of Refresh
	// ("invalid_grant: …"): nobody asks again with it.
	Failed string `json:"failed,omitempty"`
}

// claim is a worker's refresh: who, since when, until when.
type claim struct {
	By    string `json:"by"`
	At    int64  `json:"at"`
	Until int64  `json:"until,omitempty"`
}

// seedHash is the hash a record keeps of a seed.
func seedHash(refresh string) string {
	h := sha256.Sum256([]byte(refresh))
	return hex.EncodeToString(h[:16])
}

// token is r's access token for the cache (the refresh token stays in
// the store).
func (r *record) token() *oauth2.Token {
	t := &oauth2.Token{AccessToken: r.Access, TokenType: "Bearer"}
	if r.Expires > 0 {
		t.Expiry = time.UnixMilli(r.Expires)
	}
	return t
}

// usable reports whether r's access token can be handed out at now:
// present, not rejected, and good for more than before.
func (r *record) usable(now time.Time, before time.Duration, rejected string) bool {
	return r.Access != "" && r.Access != rejected && (r.Expires == 0 || now.Add(before).UnixMilli() < r.Expires)
}

// fetch is the fleet's refresh protocol for p: it returns the record's
// access token while it is good (for RefreshBefore; for minLeft when it
// is not held, the token this worker has, so that a worker starting, or
// coming after another's refresh, is not kept waiting by a refresh),
// waits out another worker's refresh, and otherwise claims the refresh
// and runs it.
func (o *OAuth) fetch(ctx context.Context, p OAuthProfile, rejected, held string) (*oauth2.Token, error) {
	for {
		rec, rev, err := o.load(ctx, p.ID)
		if err != nil {
			return nil, err
		}
		now := o.cfg.Now()
		if seed := p.Refresh.Reveal(); seed != "" && (rev == 0 || !slices.Contains(rec.Seeds, seedHash(seed))) {
			// A refresh token the fleet has not seen: the operator's new
			// login. It replaces what the record holds.
			next := record{Refresh: seed, Access: p.Access.Reveal(), Seeds: append(slices.Clone(rec.Seeds), seedHash(seed))}
			if len(next.Seeds) > maxSeeds {
				next.Seeds = next.Seeds[len(next.Seeds)-maxSeeds:]
			}
			if !p.Expires.IsZero() {
				next.Expires = p.Expires.UnixMilli()
			}
			if _, _, err := o.swap(ctx, p.ID, &next, rev); err != nil {
				return nil, err
			}
			continue // look again at what was written: this seed, or a write that came first
		}
		switch {
		case rev == 0 || rec.Refresh == "":
			return nil, &provider.Error{Reason: provider.ReasonAuthPermanent, Message: fmt.Sprintf("Anthropic OAuth: auth profile %q: %v: give it one (\"refresh\" or \"refreshRef\")", p.ID, ErrOAuthNoRefresh), Err: ErrOAuthNoRefresh}
		case rec.usable(now, o.cfg.RefreshBefore, rejected), rec.Access != held && rec.usable(now, minLeft, rejected):
			return rec.token(), nil
		case rec.Failed != "":
			return nil, o.refused(p, rec.Failed, rec.Cut)
		case rec.Claim != nil && rec.Claim.Until > now.UnixMilli():
			// Another worker is refreshing: go on with the token held
			// while it lasts, else wait for the record to change.
			if rec.usable(now, 0, rejected) {
				return rec.token(), nil
			}
			if err := o.waitChange(ctx, p.ID, rev); err != nil {
				return nil, err
			}
			continue
		}
		claimed := *rec
		if rec.Claim != nil {
			claimed.Cut = rec.Claim // it expired: its worker never stored a result
		}
		claimed.Claim = &claim{By: o.cfg.Owner, At: now.UnixMilli(), Until: now.Add(o.cfg.ClaimTTL).UnixMilli()}
		crev, ok, err := o.swap(ctx, p.ID, &claimed, rev)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // another write came first: look again
		}
		return o.refresh(ctx, p, &claimed, crev)
	}
}

// refresh asks the token endpoint for a new pair with rec's refresh
// token, under this worker's claim at revision rev, and stores the pair
// before returning it.
func (o *OAuth) refresh(ctx context.Context, p OAuthProfile, rec *record, rev uint64) (*oauth2.Token, error) {
	clientID := p.ClientID
	if clientID == "" {
		clientID = o.cfg.ClientID
	}
	conf := oauth2.Config{ClientID: clientID, Endpoint: oauth2.Endpoint{TokenURL: o.cfg.TokenURL, AuthStyle: oauth2.AuthStyleInParams}}
	seen := &answerSeen{next: o.client.Transport}
	if seen.next == nil {
		seen.next = http.DefaultTransport
	}
	client := *o.client
	client.Transport = seen
	xctx, cancel := context.WithTimeout(context.WithValue(ctx, oauth2.HTTPClient, &client), o.cfg.Timeout)
	tok, err := conf.TokenSource(xctx, &oauth2.Token{RefreshToken: rec.Refresh}).Token()
	cancel()
	// What follows is written whatever becomes of ctx: a new pair must
	// reach the store, and an ended refresh must release its claim.
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), o.cfg.Timeout)
	defer scancel()
	if err != nil {
		return nil, o.failed(sctx, p, rec, rev, err, seen.status())
	}
	if tok.AccessToken == "" {
		return nil, o.failed(sctx, p, rec, rev, errors.New("the token endpoint answered without an access token"), seen.status())
	}
	next := record{Access: tok.AccessToken, Refresh: tok.RefreshToken, Seeds: rec.Seeds}
	if next.Refresh == "" {
		next.Refresh = rec.Refresh // not rotated
	}
	if !tok.Expiry.IsZero() {
		next.Expires = tok.Expiry.UnixMilli()
	}
	for attempt := 0; ; attempt++ {
		_, ok, err := o.swap(sctx, p.ID, &next, rev)
		if err == nil && ok {
			return next.token(), nil
		}
		if err == nil {
			// Another write came first: a worker that took the claim
			// over, or an operator's new seed.
			cur, crev, lerr := o.load(sctx, p.ID)
			switch {
			case lerr != nil:
				err = lerr
			case cur.Refresh == rec.Refresh:
				rev = crev // still the pair this one replaces: store over it
				continue
			default:
				// The record moved on without this refresh: its tokens
				// stay unused, and the record's are the fleet's.
				return o.fetch(ctx, p, "", "")
			}
		}
		if attempt >= 3 || sctx.Err() != nil {
			return nil, &provider.Error{Reason: provider.ReasonTimeout, Message: fmt.Sprintf("Anthropic OAuth: auth profile %q: the new tokens could not be stored (%v); the refresh token they replace may no longer work", p.ID, err), Err: err}
		}
		select {
		case <-time.After(o.cfg.Poll):
		case <-sctx.Done():
		}
	}
}

// answerSeen is the token request's transport: it remembers the status
// of the answer, which tells a reply that came but could not be read
// (oauth2 reports it as a plain error) from one that never came.
type answerSeen struct {
	next http.RoundTripper
	code atomic.Int32
}

// RoundTrip sends r and notes the answer's status.
func (a *answerSeen) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := a.next.RoundTrip(r)
	if err == nil {
		a.code.Store(int32(resp.StatusCode))
	}
	return resp, err
}

// status is the status of the last answer; 0 = none came.
func (a *answerSeen) status() int { return int(a.code.Load()) }

// failed records a refresh that got no new pair and returns its error:
// a refusal of the refresh token (invalid_grant) is kept (nobody asks
// with it again), an answer that never came, or a successful one that
// could not be read, is kept as cut (its refresh token may be used up),
// and any other answer (another 4xx: the configuration's; a rate limit;
// a server error) only releases the claim. answered is the status of
// the endpoint's answer, 0 if none came.
func (o *OAuth) failed(ctx context.Context, p OAuthProfile, rec *record, rev uint64, err error, answered int) error {
	next := *rec
	next.Claim = nil
	var re *oauth2.RetrieveError
	status := 0
	if errors.As(err, &re) && re.Response != nil {
		status = re.Response.StatusCode
	}
	var out error
	switch {
	case re != nil && re.ErrorCode == "invalid_grant":
		next.Failed = refusal(re)
		out = o.refused(p, next.Failed, next.Cut)
	case status >= 400 && status < 500 && status != http.StatusTooManyRequests:
		// Not a verdict on the refresh token (a wrong client id or URL,
		// a proxy's refusal): it is kept for the next try.
		out = &provider.Error{Reason: provider.ReasonAuthPermanent, Status: status, Message: fmt.Sprintf("Anthropic OAuth refresh failed: auth profile %q: the token endpoint %s answered %s — check ANTHROPIC_OAUTH_TOKEN_URL and the OAuth client id (ANTHROPIC_OAUTH_CLIENT_ID, the profile's clientId)", p.ID, o.cfg.TokenURL, refusal(re)), Err: err}
	case status != 0:
		reason := provider.ReasonTimeout
		if status == http.StatusTooManyRequests {
			reason = provider.ReasonRateLimit
		}
		out = &provider.Error{Reason: reason, Status: status, Message: fmt.Sprintf("Anthropic OAuth: auth profile %q: the token endpoint answered %s", p.ID, refusal(re)), Err: err}
	case answered >= 200 && answered < 300:
		// A success that could not be read (not the grant's JSON, cut
		// off mid-body, no access token): the endpoint has likely
		// rotated the refresh token. Its text may hold tokens, so none
		// of it is quoted.
		next.Cut = &claim{By: o.cfg.Owner, At: o.cfg.Now().UnixMilli()}
		out = &provider.Error{Reason: provider.ReasonTimeout, Message: fmt.Sprintf("Anthropic OAuth: auth profile %q: the token endpoint answered %d %s but its reply could not be read; the refresh token may have been used up", p.ID, answered, http.StatusText(answered))}
	default:
		// No answer: the endpoint may have rotated the refresh token.
		next.Cut = &claim{By: o.cfg.Owner, At: o.cfg.Now().UnixMilli()}
		reason := provider.ReasonTimeout
		if errors.Is(err, context.Canceled) {
			reason = provider.ReasonAborted
		}
		out = &provider.Error{Reason: reason, Message: fmt.Sprintf("Anthropic OAuth: auth profile %q: refresh cut off before an answer: %s", p.ID, short(err.Error())), Err: err}
	}
	_, _, _ = o.swap(ctx, p.ID, &next, rev) // a lost swap: another worker's record stands
	return out
}

// refused is the error of a profile whose refresh token the endpoint
// refused: what the operator does next, and whose refresh may have used
// it up.
func (o *OAuth) refused(p OAuthProfile, why string, cut *claim) error {
	msg := fmt.Sprintf("Anthropic OAuth refresh failed: %s — log in again with Claude Code (/login) and give auth profile %q the new refresh token (claudeAiOauth.refreshToken of ~/.claude/.credentials.json)", why, p.ID)
	if p.From != "" {
		msg += " in its " + p.From
	}
	if cut != nil {
		msg += fmt.Sprintf("; a refresh by %s at %s was cut off before it stored its result, which may have used the refresh token up", cut.By, time.UnixMilli(cut.At).UTC().Format(time.DateTime+" UTC"))
	}
	return &provider.Error{Reason: provider.ReasonAuthPermanent, Message: msg}
}

// refusal is a token endpoint's refusal as "code: description", short.
func refusal(re *oauth2.RetrieveError) string {
	if re == nil {
		return "an error"
	}
	s := re.ErrorCode
	if re.ErrorDescription != "" {
		s += ": " + re.ErrorDescription
	}
	if s == "" && re.Response != nil {
		s = re.Response.Status
	}
	return short(s)
}

// short bounds a text quoted from outside.
func short(s string) string {
	s = strings.ToValidUTF8(strings.Join(strings.Fields(s), " "), "?")
	if len(s) > 300 {
		s = strings.ToValidUTF8(s[:300], "") + "…"
	}
	return s
}

// load reads p's record; a malformed one reads as empty (the next seed
// or refresh overwrites it).
func (o *OAuth) load(ctx context.Context, id string) (*record, uint64, error) {
	data, rev, err := o.cfg.Store.LoadOAuth(ctx, id)
	if err != nil {
		return nil, 0, &provider.Error{Reason: provider.ReasonTimeout, Message: fmt.Sprintf("Anthropic OAuth: auth profile %q: read the fleet's tokens: %v", id, err), Err: err}
	}
	rec := &record{}
	if len(data) > 0 && len(data) <= maxRecordBytes {
		if json.Unmarshal(data, rec) != nil {
			rec = &record{}
		}
	}
	return rec, rev, nil
}

// swap writes rec over revision rev.
func (o *OAuth) swap(ctx context.Context, id string, rec *record, rev uint64) (uint64, bool, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return 0, false, err
	}
	n, ok, err := o.cfg.Store.SwapOAuth(ctx, id, data, rev)
	if err != nil {
		return 0, false, &provider.Error{Reason: provider.ReasonTimeout, Message: fmt.Sprintf("Anthropic OAuth: auth profile %q: write the fleet's tokens: %v", id, err), Err: err}
	}
	return n, ok, nil
}

// waitChange waits until id's record is past revision rev, or its claim
// may have expired (a poll every OAuthConfig.Poll).
func (o *OAuth) waitChange(ctx context.Context, id string, rev uint64) error {
	t := time.NewTicker(o.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return &provider.Error{Reason: provider.ReasonTimeout, Message: fmt.Sprintf("Anthropic OAuth: auth profile %q: waiting for another worker's refresh: %v", id, context.Cause(ctx)), Err: context.Cause(ctx)}
		case <-t.C:
		}
		rec, n, err := o.load(ctx, id)
		if err != nil {
			return err
		}
		if n != rev || rec.Claim == nil || rec.Claim.Until <= o.cfg.Now().UnixMilli() {
			return nil
		}
	}
}
