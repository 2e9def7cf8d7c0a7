package runner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
	"github.com/lanefleet/lanefleet/replytext"
)

// User-facing texts of the run loop (runtime spec §3.2).
const (
	TextRetryLimit      = "Request failed after repeated internal retries. Please try again, or use /new to start a fresh session."
	TextContextOverflow = "Context overflow: prompt too large for the model. Try /reset (or /new) to start a fresh session, or use a larger-context model."
	TextRoleOrdering    = "Message ordering conflict - please try again. If this persists, use /new to start a fresh session."
	TextTimedOut        = "Request timed out before a response was generated. Please try again, or increase `agents.defaults.timeoutSeconds` in your config."
	// TextToolLoopLimit (with the number of model calls) ends a turn
	// stopped by the tool-loop limit, a Lanefleet safety net the reference
	// does not have.
	TextToolLoopLimit = "Stopped after %d model calls in this turn (the tool-loop limit). Send another message to let the agent continue, or raise the limit."
)

// KindToolLoopLimit is the meta error kind of a turn stopped by the
// tool-loop limit.
const KindToolLoopLimit = "tool_loop_limit"

// TextToolLoop (with the tool, the number of calls and the error) ends a
// turn stopped by the loop detector (Config.MaxToolRepeats), a Lanefleet
// safety net the reference does not have; KindToolLoop is its meta error
// kind.
const (
	TextToolLoop = "Stopped: the model called %s %d times with the same arguments and got the same error each time (%s). Send another message to let the agent continue, or change what you ask of it."
	KindToolLoop = "tool_loop"
)

// Run-loop constants.
const (
	// MaxOverflowCompactions is how many times one run compacts on overflow.
	MaxOverflowCompactions = 3
)

// IterationCap is the run loop's iteration cap for a number of profile
// candidates: min(160, max(32, 24 + 8*max(1, n))).
func IterationCap(profiles int) int {
	return min(160, max(32, 24+8*max(1, profiles)))
}

// attemptReq is what one attempt runs with.
type attemptReq struct {
	// model is the loop's (loopReq.model): not a copy, which made an
	// outcome 128 bytes larger for the whole wait.
	model    *provider.Model
	prov     provider.Provider
	profile  string // "" = the provider's environment or config key
	key      provider.Secret
	thinking provider.ThinkingLevel
	// canRotate reports that another profile is ready should this one
	// fail (a rate limit then rotates instead of retrying the key).
	canRotate bool
	// alternates are the profiles the Admission may move the attempt's
	// calls to (AdmitCall.Alternates).
	alternates []string
	// hop is the model's place in the model chain; after is why the
	// attempt before this one ended ("" for the run's first): both for
	// the attempt event.
	hop   int
	after provider.Reason
}

// attemptOut is what one attempt reports (runtime spec §4 step 15).
type attemptOut struct {
	aborted, timedOut, timedOutDuringCompaction bool
	// promptErr is a failure outside the model's reply (the request could
	// not be made); provider failures end the reply instead (last.StopReason
	// error, with lastErr the classified error).
	promptErr error
	lastErr   error
	last      *message.Message
	texts     []string // answer texts streamed by this attempt
	// compactions counts compactions this attempt made itself (threshold).
	compactions int
	snapshot    []message.Message
	pending     []events.PendingCall // client tool calls that ended the attempt
	// toolErrors remembers the attempt's failing tools (its last standing
	// failure ends the reply with a warning).
	toolErrors replytext.ToolErrors
	// usage sums the usage of the attempt's model calls.
	usage message.Usage
	// toolLoopLimit is set to the number of model calls when the
	// attempt stopped at the run's tool-loop limit.
	toolLoopLimit int
	// toolLoop is set when the loop detector stopped the attempt.
	toolLoop *toolLoopStop
	// refused is set when the Admission refused the attempt's next call;
	// moved when it moved it to another auth profile.
	refused *AdmitRefusal
	// yielded is set when a call of a tool that ends the turn
	// (tools.TurnEnder: sessions_yield) succeeded: the attempt made no
	// model call after its reply's results.
	yielded bool
	moved   *AdmitMove
}

// toolLoopStop is a call the loop detector stopped a turn on: its tool,
// its error and how many times it failed that way.
type toolLoopStop struct {
	name, err string
	times     int
}

// attempter runs attempts and the overflow recovery for the loop.
type attempter interface {
	attempt(ctx context.Context, req *attemptReq, out *attemptOut)
	// compact compacts the session (trigger "overflow"); false = it failed.
	compact(ctx context.Context, req attemptReq, trigger string) bool
	// truncate shortens oversized tool results in the session; it returns
	// how many it shortened.
	truncate(ctx context.Context, contextWindow int) int
	// pause waits d before a call, showing the wait (lifecycle retrying,
	// attempt n, because of why); it returns ctx's cause when ctx ends
	// first.
	pause(ctx context.Context, d time.Duration, n int, why string) error
}

// loopReq configures one model's run loop.
type loopReq struct {
	runID string
	// model is the candidate's, held by the run (Runner.Run's model),
	// not a copy: a loop is held for as long as its model answers.
	model         *provider.Model
	prov          provider.Provider
	contextWindow int
	thinking      provider.ThinkingLevel
	auth          Auth
	// locked is a profile the user pinned: used even when cooling, never
	// rotated away from.
	locked             string
	preferred          string
	fallbackConfigured bool
	// lastResort is set when no other model follows this one: with the
	// fleet policy on (authprofile.Fleet.LastResort), a run whose every
	// profile is cooling then waits out the pending Retry-After of the
	// one that frees up first (at most maxWait) and uses it.
	lastResort bool
	maxWait    time.Duration
	// hop is the model's place in the model chain (fallback.Step.Index);
	// after is why the model before it failed over ("" for the first).
	hop   int
	after provider.Reason
	now   func() time.Time
	// stateErr receives each auth-profile state write that failed (the
	// run goes on without it); nil = drop them.
	stateErr func(error)
}

// loopOut is a finished model run.
type loopOut struct {
	payloads    []events.Payload
	runErr      *events.RunError
	aborted     bool
	last        *message.Message
	compactions int
	pending     []events.PendingCall
	thinkLevels []provider.ThinkingLevel
	usage       usageAcc
	// profile is the auth profile that answered ("" = none or the
	// provider's own key): recorded good and used.
	profile string
	// finalProfile is the profile of the last attempt ("" = none).
	finalProfile string
	// overflowTries counts the overflow recoveries the run made;
	// maxIter is its iteration cap.
	overflowTries, maxIter int
	// yielded: the run ended at a sessions_yield call (its stop reason
	// is events.StopYielded).
	yielded bool
}

// profileError is an auth-profile failure that is not a provider error (a
// locked profile missing from the order, no usable key).
type profileError struct{ msg string }

func (e *profileError) Error() string { return e.msg }

// modelLoop is the per-iteration decision order of runtime spec §3.2 for one
// model: run is the loop, each step of an iteration is a method.
type modelLoop struct {
	req      loopReq
	at       attempter
	profiles []string // candidates; [""] = no profiles
	idx      int
	// maxIter is the iteration cap (IterationCap of the candidates).
	maxIter int
	// thinkLevel is the level the next attempt asks for; attempted holds
	// the levels tried since the profile was activated, each once (a
	// slice, not a map: a run tries one or two, and a map's table was
	// 256 bytes a turn held while the model answered).
	thinkLevel provider.ThinkingLevel
	attempted  []provider.ThinkingLevel
	// overflowTries counts overflow recoveries (at most
	// MaxOverflowCompactions); truncated is set once tool results were
	// truncated (once per run).
	overflowTries int
	truncated     bool
	// why is the failover reason class of the last attempt that was
	// retried: the next attempt's attemptReq.after.
	why provider.Reason
	// reauthed holds the profiles whose refused OAuth access token was
	// renewed in this run (once each).
	reauthed map[string]bool
	out      loopOut
}

// next is what a step of an iteration decided.
type next int

const (
	goOn  next = iota // the step does not apply: the next step decides
	retry             // run another attempt
	stop              // the run ends: with l.out, or with the step's error
)

// runModel runs the loop for one model that setupModel accepted. The auth
// profiles are resolved first, and throw without an attempt (§3.1 steps
// 4-5: a locked profile not configured for the provider, every profile
// unavailable).
func runModel(ctx context.Context, req loopReq, at attempter) (*loopOut, error) {
	return runLoop(ctx, newModelLoop(req, at))
}

// newModelLoop returns the loop of one model, before its auth profiles
// are resolved.
func newModelLoop(req loopReq, at attempter) *modelLoop {
	return &modelLoop{req: req, at: at, why: req.after}
}

// runLoop is runModel on a new loop.
func runLoop(ctx context.Context, l *modelLoop) (*loopOut, error) {
	l.resetThinking()
	if err := l.resolveProfiles(ctx); err != nil {
		return nil, err
	}
	n := len(l.profiles)
	if l.profiles[0] == "" {
		n = 0
	}
	l.maxIter = IterationCap(n)
	l.out.maxIter = l.maxIter
	err := l.run(ctx)
	l.out.overflowTries = l.overflowTries
	// A run that throws has an out too: what it did before.
	return &l.out, err
}

// run is the loop: until a step ends the run, check the iteration cap
// (§3.2 step 1), run an attempt (step 2) and decide on its outcome. It
// ends with l.out, or with the error the run throws.
func (l *modelLoop) run(ctx context.Context) error {
	for iter := 0; ; iter++ {
		if iter >= l.maxIter {
			l.reply(TextRetryLimit, "retry_limit", fmt.Sprintf("Exceeded retry limit after %d attempts (max=%d).", iter, l.maxIter))
			return nil
		}
		a, err := l.attempt(ctx)
		if err != nil {
			return err
		}
		if n, err := l.decide(ctx, a); err != nil || n != retry {
			return err
		}
		l.why = reasonClass(a)
	}
}

// decide runs the steps after an attempt in the reference's order: the
// first that retries or ends the run decides; when none does, the attempt's
// reply is the run's.
func (l *modelLoop) decide(ctx context.Context, a *outcome) (next, error) {
	steps := []func(context.Context, *outcome) (next, error){
		l.moved, l.refused, l.toolLoopLimit, l.toolLoop, l.contextOverflow, l.reauth, l.promptError, l.thinkingFallback, l.rotation,
	}
	for _, step := range steps {
		if n, err := step(ctx, a); err != nil || n != goOn {
			return n, err
		}
	}
	l.payloads(ctx, a)
	return stop, nil
}

// outcome is what one attempt ran with and reported, with its error text:
// the trimmed error message of a reply that ended in error ("" otherwise).
type outcome struct {
	attemptOut
	req         attemptReq
	lastErrText string
}

// attempt runs one attempt with the active profile's key at the current
// thinking level and merges its usage (§3.2 steps 2-3).
func (l *modelLoop) attempt(ctx context.Context) (*outcome, error) {
	key, err := l.key(ctx)
	if err != nil {
		return nil, err
	}
	a := l.newOutcome(key)
	l.at.attempt(ctx, &a.req, &a.attemptOut)
	return l.attemptEnded(ctx, a)
}

// newOutcome starts an attempt with key at the current thinking level.
// It and attemptEnded are not inlined in attempt: that frame stays on the
// turn's stack while the model answers (see docs/scaling.md, "What a turn
// in flight holds").
//
//go:noinline
func (l *modelLoop) newOutcome(key provider.Secret) *outcome {
	if !slices.Contains(l.attempted, l.thinkLevel) {
		l.attempted = append(l.attempted, l.thinkLevel)
	}
	l.out.thinkLevels = append(l.out.thinkLevels, l.thinkLevel)
	return &outcome{req: attemptReq{model: l.req.model, prov: l.req.prov, profile: l.current(), key: key, thinking: l.thinkLevel,
		canRotate: l.canRotate(), alternates: l.alternates(), hop: l.req.hop, after: l.why}}
}

// attemptEnded merges an attempt's outcome into the run's.
//
//go:noinline
func (l *modelLoop) attemptEnded(ctx context.Context, a *outcome) (*outcome, error) {
	l.out.compactions += a.compactions
	l.out.last, l.out.pending, l.out.finalProfile = a.last, a.pending, a.req.profile
	var lastUsage message.Usage
	if a.last != nil && a.last.Usage != nil {
		lastUsage = *a.last.Usage
	}
	l.out.usage.merge(a.usage, lastUsage)
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	if a.last != nil && a.last.StopReason == message.StopError {
		a.lastErrText = strings.TrimSpace(a.last.ErrorMessage)
		if a.lastErrText == "" && a.lastErr != nil {
			a.lastErrText = errText(a.lastErr)
		}
	}
	return a, nil
}

// reply ends the run with one error payload and its meta error.
func (l *modelLoop) reply(text, kind, msg string) {
	l.out.payloads = []events.Payload{{Text: text, IsError: true}}
	l.out.runErr = &events.RunError{Kind: kind, Message: msg}
}

// moved activates the auth profile the Admission moved the attempt's
// next call to (it has room where the current one has none) and retries
// on it; the profile it leaves is not marked failed.
func (l *modelLoop) moved(_ context.Context, a *outcome) (next, error) {
	if a.moved == nil {
		return goOn, nil
	}
	i := slices.Index(l.profiles, a.moved.Profile)
	if i < 0 {
		return stop, fmt.Errorf("runner: admission moved the call to auth profile %q, not a candidate", a.moved.Profile)
	}
	l.idx = i
	l.resetThinking()
	return retry, nil
}

// alternates are the profiles an attempt's calls may move to: with no
// profile pinned, the candidates other than the current one that are not
// cooling down for the model (the rotation's rules; a probe is not
// claimed for a move).
func (l *modelLoop) alternates() []string {
	if l.req.locked != "" || l.req.auth == nil || len(l.profiles) < 2 {
		return nil
	}
	s, _ := l.req.auth.Snapshot()
	now := l.req.now()
	var out []string
	for i, id := range l.profiles {
		if i == l.idx || id == "" {
			continue
		}
		if p, ok := s.Profile(id); ok && !authprofile.InCooldown(p.Provider, s.Usage[id], l.req.model.ID, now) {
			out = append(out, id)
		}
	}
	return out
}

// refused ends a run whose next model call the Admission refused (a budget
// reached) with the refusal's reply. The turn is complete: what it did
// before stays, and the next message continues from it.
func (l *modelLoop) refused(_ context.Context, a *outcome) (next, error) {
	if a.refused == nil {
		return goOn, nil
	}
	l.reply(a.refused.Text, a.refused.Kind, a.refused.Text)
	return stop, nil
}

// toolLoopLimit ends a run whose attempt stopped at the run's tool-loop
// limit with its own reply (not the retry-limit one: nothing was retried).
// The turn is complete: its calls and results are stored, and the next
// message continues from them.
func (l *modelLoop) toolLoopLimit(_ context.Context, a *outcome) (next, error) {
	if a.toolLoopLimit == 0 {
		return goOn, nil
	}
	l.reply(fmt.Sprintf(TextToolLoopLimit, a.toolLoopLimit), KindToolLoopLimit,
		fmt.Sprintf("Tool loop stopped after %d model calls (max=%d).", a.toolLoopLimit, a.toolLoopLimit))
	return stop, nil
}

// toolLoop ends a run whose attempt the loop detector stopped: its model
// made the same call and got the same error too many times. Like the
// tool-loop limit it is a complete turn.
func (l *modelLoop) toolLoop(_ context.Context, a *outcome) (next, error) {
	s := a.toolLoop
	if s == nil {
		return goOn, nil
	}
	name, why := clipQuote(s.name, 64), clipQuote(firstLine(s.err), 200)
	l.reply(fmt.Sprintf(TextToolLoop, name, s.times, why), KindToolLoop,
		fmt.Sprintf("Tool loop: %s failed %d times with the same arguments and the same error: %s", name, s.times, why))
	return stop, nil
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(line)
}

// clipQuote quotes s, bounded to n UTF-16 units.
func clipQuote(s string, n int) string {
	if ecmatext.Len(s) > n {
		s = ecmatext.Prefix(s, n) + "…"
	}
	return strconv.Quote(s)
}

// contextOverflow detects an overflow and recovers from it (§3.2 steps
// 4-5): retry after the attempt's own compaction, else compact and retry,
// else truncate oversized tool results once and retry, else give up with
// the overflow reply.
func (l *modelLoop) contextOverflow(ctx context.Context, a *outcome) (next, error) {
	text := overflowText(a)
	if text == "" {
		return goOn, nil
	}
	compactionFailure := failover.IsCompactionFailure(text)
	if !compactionFailure && l.overflowTries < MaxOverflowCompactions {
		l.overflowTries++
		if a.compactions > 0 {
			return retry, nil
		}
		if l.at.compact(ctx, a.req, "overflow") {
			l.out.compactions++
			return retry, nil
		}
		if ctx.Err() != nil {
			return stop, context.Cause(ctx)
		}
	}
	if !l.truncated && guard.HasOversizedToolResult(a.snapshot, l.req.contextWindow) {
		l.truncated = true
		if l.at.truncate(ctx, l.req.contextWindow) > 0 {
			return retry, nil
		}
	}
	kind := "context_overflow"
	if compactionFailure {
		kind = "compaction_failure"
	}
	l.reply(TextContextOverflow, kind, text)
	return stop, nil
}

// overflowText is the error text of an attempt that overflowed the
// context, "" when it did not (§3.2 step 4): the prompt error's when there
// is one (a different prompt error stops the detection), else the reply's.
func overflowText(a *outcome) string {
	switch {
	case a.aborted:
		return ""
	case a.promptErr != nil:
		if t := errText(a.promptErr); failover.IsLikelyContextOverflow(t) {
			return t
		}
		return ""
	case a.lastErrText != "" && (failover.IsLikelyContextOverflow(a.lastErrText) || provider.ReasonOf(a.lastErr) == provider.ReasonContextOverflow):
		return a.lastErrText
	}
	return ""
}

// reauth retries, once per profile and run, an attempt whose OAuth access
// token the API refused as unauthorized (HTTP 401) before its expiry, with
// a new one (OAuthTokens.Rejected): a token revoked early is renewed
// instead of cooling its profile. A second refusal, or a renewal that
// fails, cools the profile as any other failure.
func (l *modelLoop) reauth(_ context.Context, a *outcome) (next, error) {
	err := a.promptErr
	if err == nil && a.lastErrText != "" {
		err = a.lastErr
	}
	var pe *provider.Error
	if a.aborted || !errors.As(err, &pe) || pe.Status != http.StatusUnauthorized {
		return goOn, nil
	}
	o, ok := l.req.auth.(OAuthTokens)
	id := l.current()
	if !ok || id == "" || l.reauthed[id] {
		return goOn, nil
	}
	s, _ := l.req.auth.Snapshot()
	p, found := s.Profile(id)
	if !found || p.Type != authprofile.TypeOAuth || !o.Rejected(p, a.req.key) {
		return goOn, nil
	}
	if l.reauthed == nil {
		l.reauthed = map[string]bool{}
	}
	l.reauthed[id] = true
	return retry, nil
}

// promptError handles a failure outside the model's reply (§3.2 step 6):
// role ordering and image size end the run with their replies; otherwise
// the profile is marked failed and rotated away from, or the thinking level
// lowered, or the error thrown (as a failover error when fallbacks are
// configured).
func (l *modelLoop) promptError(ctx context.Context, a *outcome) (next, error) {
	if a.promptErr == nil || a.aborted {
		return goOn, nil
	}
	text := errText(a.promptErr)
	switch {
	case failover.IsRoleOrdering(text):
		l.reply(TextRoleOrdering, "role_ordering", text)
		return stop, nil
	case failover.IsImageSize(text):
		msg := "Image too large for the model. Please compress or resize the image and try again."
		if mb, ok := failover.ParseImageSize(text); ok {
			msg = fmt.Sprintf("Image too large for the model (max %sMB). Please compress or resize the image and try again.", trimFloat(mb))
		}
		l.reply(msg, "image_size", text)
		return stop, nil
	}
	reason := failoverReason(a.promptErr, text)
	l.markFailed(ctx, reason, retryAfter(a.promptErr))
	if reason != "" && reason != provider.ReasonTimeout && l.rotate(ctx) {
		return retry, nil
	}
	if lvl, ok := failover.ThinkingFallback(text, l.attemptedList()); ok {
		l.thinkLevel = lvl
		return retry, nil
	}
	if l.req.fallbackConfigured && reason != "" {
		return stop, &provider.Error{Reason: reason, Status: failover.StatusOf(reason), Message: text, Err: a.promptErr}
	}
	return stop, a.promptErr
}

// thinkingFallback retries at a lower thinking level when the reply's error
// lists the supported ones (§3.2 step 7).
func (l *modelLoop) thinkingFallback(_ context.Context, a *outcome) (next, error) {
	if a.aborted || a.lastErrText == "" {
		return goOn, nil
	}
	lvl, ok := failover.ThinkingFallback(a.lastErrText, l.attemptedList())
	if !ok {
		return goOn, nil
	}
	l.thinkLevel = lvl
	return retry, nil
}

// rotation moves to the next profile after a reply that failed with a
// failover reason or an attempt that timed out (§3.2 step 8), marking the
// profile failed; with none left it throws a failover error when fallbacks
// are configured, and otherwise lets the failed reply through.
func (l *modelLoop) rotation(ctx context.Context, a *outcome) (next, error) {
	var reason provider.Reason
	if a.lastErrText != "" {
		reason = failoverReason(a.lastErr, a.lastErrText)
	}
	if (a.aborted || reason == "") && (!a.timedOut || a.timedOutDuringCompaction) {
		return goOn, nil
	}
	mark := reason
	switch {
	case a.timedOut || reason == provider.ReasonTimeout:
		mark = provider.ReasonTimeout
	case mark == "":
		mark = provider.ReasonUnknown
	}
	l.markFailed(ctx, mark, retryAfter(a.lastErr))
	if l.rotate(ctx) {
		return retry, nil
	}
	if !l.req.fallbackConfigured {
		return goOn, nil
	}
	msg := ""
	if a.lastErrText != "" {
		msg = failover.UserText(a.lastErrText, l.req.model.Provider, l.req.model.ID)
	}
	if msg == "" {
		msg = timeoutOr(a.timedOut, reason)
	}
	if reason == "" {
		reason = provider.ReasonUnknown
	}
	st := failover.StatusOf(reason)
	if st == 0 && (a.timedOut || failover.IsTimeout(msg)) {
		st = 408
	}
	return stop, &provider.Error{Reason: reason, Status: st, Message: msg, Err: a.lastErr}
}

// payloads builds the reply of a finished attempt (§3.2 step 9, §23) and,
// unless it timed out, records the profile as good and used (step 10).
func (l *modelLoop) payloads(ctx context.Context, a *outcome) {
	in := replytext.PayloadInput{AssistantTexts: a.texts, LastAssistant: a.last, LastToolError: a.toolErrors.Last()}
	if a.lastErrText != "" {
		in.ErrorText = failover.UserText(a.lastErrText, l.req.model.Provider, l.req.model.ID)
		in.FormattedRawError = a.lastErrText
	}
	for _, p := range replytext.BuildPayloads(in) {
		l.out.payloads = append(l.out.payloads, events.Payload{Text: p.Text, IsError: p.IsError})
	}
	if a.timedOut && !a.timedOutDuringCompaction && len(l.out.payloads) == 0 {
		l.out.payloads = []events.Payload{{Text: TextTimedOut, IsError: true}}
		l.out.aborted = true
		return
	}
	l.out.aborted, l.out.yielded = a.aborted, a.yielded
	if a.lastErrText != "" {
		l.out.runErr = &events.RunError{Kind: "provider_error", Message: failover.Label(orText(a.lastErr, a.lastErrText)) + ": " + a.lastErrText}
	}
	if id := l.current(); id != "" && l.req.auth != nil && !a.timedOut {
		l.out.profile = id
		l.stateErr(l.req.auth.MarkGood(ctx, l.req.model.Provider, id))
		l.stateErr(l.req.auth.Apply(ctx, id, authprofile.Event{Kind: authprofile.EventUsed, Provider: l.req.model.Provider, Model: l.req.model.ID, RunID: l.req.runID}))
	}
}

// stateErr hands a failed auth-profile state write to the run (nil is
// ignored).
func (l *modelLoop) stateErr(err error) {
	if err != nil && l.req.stateErr != nil {
		l.req.stateErr(err)
	}
}

// resolveProfiles builds the candidates and activates the first usable one
// (§3.1 steps 4-5).
func (l *modelLoop) resolveProfiles(ctx context.Context) error {
	l.profiles = []string{""}
	if l.req.auth == nil {
		return nil
	}
	s, c := l.req.auth.Snapshot()
	now := l.req.now()
	order := authprofile.Order(s, c, authprofile.OrderRequest{Provider: l.req.model.Provider, Model: l.req.model.ID, Preferred: l.req.preferred}, now)
	if l.req.locked != "" {
		if p, ok := s.Profile(l.req.locked); ok && authprofile.NormalizeProvider(p.Provider) == authprofile.NormalizeProvider(l.req.model.Provider) {
			found := false
			for _, id := range order {
				found = found || id == l.req.locked
			}
			if !found {
				return &profileError{fmt.Sprintf("Auth profile %q is not configured for %s.", l.req.locked, l.req.model.Provider)}
			}
			l.profiles = []string{l.req.locked}
			return nil
		}
	}
	if len(order) == 0 {
		return nil
	}
	l.profiles = order
	l.idx = -1
	if l.advance(ctx, s, c, now) {
		return nil
	}
	if ok, err := l.useLastResort(ctx, s, c, now); ok || err != nil {
		return err
	}
	return l.profileFailover(s, c, now, "")
}

// useLastResort activates, when every profile is cooling and no other
// model can serve the run, the profile the server lets back first, after
// waiting out its pending Retry-After (authprofile.Config.LastResort). It
// reports false when there is none, or when the wait would exceed maxWait.
func (l *modelLoop) useLastResort(ctx context.Context, s authprofile.Store, c authprofile.Config, now time.Time) (bool, error) {
	if !l.req.lastResort {
		return false, nil
	}
	id, at, ok := c.LastResort(s, l.profiles, l.req.model.ID, now)
	if !ok {
		return false, nil
	}
	wait := at.Sub(now)
	if l.req.maxWait > 0 && wait >= l.req.maxWait {
		return false, nil
	}
	if wait > 0 {
		why := fmt.Sprintf("every auth profile of %s is cooling down; %s may be used again in %s", l.req.model.Provider, id, wait.Round(time.Millisecond))
		if err := l.at.pause(ctx, wait, 0, why); err != nil {
			return false, err
		}
	}
	l.idx = slices.Index(l.profiles, id)
	l.resetThinking()
	return true, nil
}

// ProbeClaimer is implemented by an Auth that lets one worker at a time
// probe a cooling profile (authstore claims it under compare-and-swap).
type ProbeClaimer interface {
	ClaimProbe(ctx context.Context, profileID, prov, model string) (won bool, err error)
}

// advance activates the next usable profile after the current one.
func (l *modelLoop) advance(ctx context.Context, s authprofile.Store, c authprofile.Config, now time.Time) bool {
	for i := l.idx + 1; i < len(l.profiles); i++ {
		if l.usable(ctx, s, c, l.profiles[i], now) {
			l.idx = i
			l.resetThinking()
			return true
		}
	}
	return false
}

// usable reports whether a profile can be activated now: the locked one
// always; another when it is not cooling for the model, or when it is due
// for a probe and this run wins the probe claim.
func (l *modelLoop) usable(ctx context.Context, s authprofile.Store, c authprofile.Config, id string, now time.Time) bool {
	if id == l.req.locked {
		return true
	}
	p, ok := s.Profile(id)
	if !ok {
		return false
	}
	st, model := s.Usage[id], l.req.model.ID
	if !authprofile.InCooldown(p.Provider, st, model, now) {
		return true
	}
	pc, ok := l.req.auth.(ProbeClaimer)
	if !ok || !c.CanProbe(p.Provider, st, model, now) {
		return false
	}
	won, err := pc.ClaimProbe(ctx, id, p.Provider, model)
	if err != nil {
		l.stateErr(fmt.Errorf("runner: claim a probe of %s: %w", id, err))
		return false
	}
	return won
}

// resetThinking starts over from the run's thinking level (a newly
// activated profile may support what the last one rejected).
func (l *modelLoop) resetThinking() {
	l.thinkLevel = l.req.thinking
	if l.thinkLevel == "" {
		l.thinkLevel = provider.ThinkingOff
	}
	l.attempted = l.attempted[:0]
}

// profileFailover is the reference's auth-profile failover: every profile is
// cooling (or none could be loaded).
func (l *modelLoop) profileFailover(s authprofile.Store, c authprofile.Config, now time.Time, msg string) error {
	prov := l.req.model.Provider
	allCooling := msg == ""
	if msg == "" {
		msg = fmt.Sprintf("No available auth profile for %s (all in cooldown or unavailable).", prov)
	}
	var reason provider.Reason
	if allCooling {
		reason = authprofile.UnavailableReason(s.Usage, l.profiles, l.req.model.ID, now)
		if reason == "" {
			reason = provider.ReasonRateLimit
		}
	} else if reason = failover.FailoverReason(msg); reason == "" {
		reason = provider.ReasonAuth
	}
	if l.req.fallbackConfigured {
		return &provider.Error{Reason: reason, Status: failover.StatusOf(reason), Message: msg}
	}
	return &profileError{msg}
}

func (l *modelLoop) current() string {
	if l.idx < 0 || l.idx >= len(l.profiles) {
		return ""
	}
	return l.profiles[l.idx]
}

// key loads the active profile's secret, advancing past profiles whose
// secret cannot be loaded.
func (l *modelLoop) key(ctx context.Context) (provider.Secret, error) {
	for {
		id := l.current()
		if id == "" || l.req.auth == nil {
			return "", nil
		}
		s, c := l.req.auth.Snapshot()
		p, _ := s.Profile(id)
		k, err := profileKey(ctx, l.req.auth, p)
		if err == nil {
			return k, nil
		}
		if ctx.Err() != nil {
			return "", context.Cause(ctx)
		}
		// A secret that exists but cannot be used now (an OAuth refresh
		// token the endpoint refused) cools its profile like a failed
		// call, and its message is what the run says.
		msg := err.Error()
		var pe *provider.Error
		if errors.As(err, &pe) {
			l.markFailed(ctx, failoverReason(pe, pe.Message), pe.RetryAfter)
			s, c = l.req.auth.Snapshot()
			msg = pe.Message
		}
		if id == l.req.locked || !l.advance(ctx, s, c, l.req.now()) {
			return "", l.profileFailover(s, c, l.req.now(), msg)
		}
	}
}

// markFailed records a failure of the active profile, except for timeouts
// (never a profile problem) and errors with no failover reason.
func (l *modelLoop) markFailed(ctx context.Context, reason provider.Reason, retryAfter time.Duration) {
	id := l.current()
	if id == "" || l.req.auth == nil || reason == "" || reason == provider.ReasonTimeout {
		return
	}
	l.stateErr(l.req.auth.Apply(ctx, id, authprofile.Event{Kind: authprofile.EventFailure, Provider: l.req.model.Provider,
		Reason: reason, Model: l.req.model.ID, RetryAfter: retryAfter, RunID: l.req.runID}))
}

// canRotate reports whether a profile after the active one is out of
// cooldown (a probe-due one does not count: its claim is not made here).
func (l *modelLoop) canRotate() bool {
	if l.req.auth == nil || l.current() == "" || l.current() == l.req.locked || l.idx+1 >= len(l.profiles) {
		return false
	}
	s, _ := l.req.auth.Snapshot()
	now := l.req.now()
	for _, id := range l.profiles[l.idx+1:] {
		if p, ok := s.Profile(id); ok && !authprofile.InCooldown(p.Provider, s.Usage[id], l.req.model.ID, now) {
			return true
		}
	}
	return false
}

// rotate activates the next usable profile (never away from a locked one).
func (l *modelLoop) rotate(ctx context.Context) bool {
	if l.req.auth == nil || l.current() == "" || l.current() == l.req.locked {
		return false
	}
	s, c := l.req.auth.Snapshot()
	return l.advance(ctx, s, c, l.req.now())
}

func (l *modelLoop) attemptedList() []provider.ThinkingLevel {
	return slices.Clone(l.attempted)
}

// reasonClass is the failover reason class of an attempt that is
// retried (what the next attempt event says it follows): a timeout, a
// context overflow, the failover reason of its error, else unknown.
func reasonClass(a *outcome) provider.Reason {
	switch {
	case a.moved != nil:
		return a.moved.Reason
	case a.timedOut:
		return provider.ReasonTimeout
	case overflowText(a) != "":
		return provider.ReasonContextOverflow
	case a.promptErr != nil:
		if r := failoverReason(a.promptErr, errText(a.promptErr)); r != "" {
			return r
		}
	case a.lastErrText != "":
		if r := failoverReason(a.lastErr, a.lastErrText); r != "" {
			return r
		}
	}
	return provider.ReasonUnknown
}

// failoverReason is the failover reason of an error: a classified provider
// error's reason when it is a failover reason, else the reference's text
// classification; "" when it is not a failover error.
func failoverReason(err error, text string) provider.Reason {
	var pe *provider.Error
	if errors.As(err, &pe) && failover.IsFailover(pe.Reason) {
		return pe.Reason
	}
	return failover.FailoverReason(text)
}

func retryAfter(err error) time.Duration {
	var pe *provider.Error
	if errors.As(err, &pe) {
		return pe.RetryAfter
	}
	return 0
}

func timeoutOr(timedOut bool, r provider.Reason) string {
	switch {
	case timedOut || r == provider.ReasonTimeout:
		return "LLM request timed out."
	case r == provider.ReasonRateLimit:
		return "LLM request rate limited."
	case r == provider.ReasonBilling:
		return failover.BillingText("", "")
	case r == provider.ReasonAuth || r == provider.ReasonAuthPermanent:
		return "LLM request unauthorized."
	}
	return "LLM request failed."
}

func orText(err error, text string) error {
	if err != nil {
		return err
	}
	return errors.New(text)
}

func trimFloat(f float64) string {
	s := fmt.Sprintf("%.2f", f)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}
