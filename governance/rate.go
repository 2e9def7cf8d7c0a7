package governance

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A provider rate limit is a budget (a State in the same bucket, admitted
// through the same per-worker leases) whose Limits.Rate is set: requests
// count as Turns and tokens as Tokens, over RateWindow, and a call that
// does not fit waits for the window to move on (ExceededError.Free)
// instead of pausing anything.

// RateWindow is a rate limit's window: rolling, RollingSlots slots of
// 62 s / 60 ≈ 1.03 s. What it counts is the last 59 whole slots and the
// current one, at least 60 s back from any call, so a call is admitted only
// when the limit holds for every 60-second span that ends with it: at
// most RPM requests (and TPM tokens) in any minute, wherever it starts.
var RateWindow = Window{Kind: WindowRolling, Rolling: 62 * time.Second}

// CapID is the reservation by which a provider's rate-limit headers lower
// a rate limit's room until they say it resets (State.Cap).
const CapID = "provider-headers"

// MaxPatternLen bounds a rate rule's pattern.
const MaxPatternLen = 200

// ErrBadRate is returned for a rate rule ParseRateRule does not accept.
var ErrBadRate = errors.New("governance: bad rate limit")

// RateLimit is requests and tokens per minute (0 = that one is not
// limited).
type RateLimit struct {
	RPM, TPM int64
}

// Limits is l as a budget's limits.
func (l RateLimit) Limits() Limits {
	return Limits{Max: Amount{Turns: l.RPM, Tokens: l.TPM}, Window: RateWindow, Rate: true}
}

// String is "rpm:500,tpm:200000".
func (l RateLimit) String() string {
	var parts []string
	if l.RPM > 0 {
		parts = append(parts, "rpm:"+strconv.FormatInt(l.RPM, 10))
	}
	if l.TPM > 0 {
		parts = append(parts, "tpm:"+strconv.FormatInt(l.TPM, 10))
	}
	return strings.Join(parts, ",")
}

// RateRule is one operator-declared rate limit: the calls its Pattern
// matches share Limit across the fleet.
//
// A pattern is "PROVIDER/MODEL" (matched against the call's provider and
// model id; '*' matches any run of characters, so "openai/*" is every
// OpenAI model and "*" every call) or "profile:ID" (matched against the
// auth profile the call is made with, '*' as well).
type RateRule struct {
	Pattern string
	Limit   RateLimit
}

// ParseRateRule reads "PATTERN=rpm:N,tpm:N" (either or both).
func ParseRateRule(s string) (RateRule, error) {
	pat, lim, ok := strings.Cut(s, "=")
	if !ok || len(s) > MaxPatternLen+64 {
		return RateRule{}, fmt.Errorf("%w: %.80q (PATTERN=rpm:N,tpm:N)", ErrBadRate, s)
	}
	r := RateRule{Pattern: pat}
	if err := validPattern(pat); err != nil {
		return RateRule{}, err
	}
	for f := range strings.SplitSeq(lim, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), ":")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n > MaxCount {
			return RateRule{}, fmt.Errorf("%w: %.80q: %q is not rpm:N or tpm:N with N from 1 to %d", ErrBadRate, s, f, int64(MaxCount))
		}
		switch k {
		case "rpm":
			r.Limit.RPM = n
		case "tpm":
			r.Limit.TPM = n
		default:
			return RateRule{}, fmt.Errorf("%w: %.80q: %q is not rpm:N or tpm:N", ErrBadRate, s, f)
		}
	}
	return r, nil
}

// validPattern reports what is wrong with a rule's pattern: 1 to
// MaxPatternLen printable ASCII characters, no spaces, '=' or ','.
func validPattern(p string) error {
	if p == "" || len(p) > MaxPatternLen {
		return fmt.Errorf("%w: pattern %.80q is 1-%d characters", ErrBadRate, p, MaxPatternLen)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c > '~' || c == '=' || c == ',' {
			return fmt.Errorf("%w: pattern %.80q: printable ASCII without spaces, '=' or ','", ErrBadRate, p)
		}
	}
	return nil
}

// Scope is the rule's budget scope.
func (r RateRule) Scope() Scope { return Scope{Kind: ScopeRate, Name: r.Pattern} }

// String is the rule as ParseRateRule reads it.
func (r RateRule) String() string { return r.Pattern + "=" + r.Limit.String() }

// Matches reports whether a call of model on provider, made with the auth
// profile profile ("" = none), falls under r.
func (r RateRule) Matches(provider, model, profile string) bool {
	if p, ok := strings.CutPrefix(r.Pattern, "profile:"); ok {
		return profile != "" && glob(p, profile)
	}
	return glob(r.Pattern, provider+"/"+model)
}

// glob matches s against p, '*' matching any run of characters.
func glob(p, s string) bool {
	head, rest, star := strings.Cut(p, "*")
	if !star {
		return p == s
	}
	if !strings.HasPrefix(s, head) {
		return false
	}
	s = s[len(head):]
	for {
		if glob(rest, s) {
			return true
		}
		if s == "" {
			return false
		}
		s = s[1:]
	}
}

// RateNeed is what a call may take of a rate limit: one request, and its
// input (as estimated) and max output tokens.
func RateNeed(input, maxOutput int64) Amount {
	return Amount{Turns: 1, Tokens: max(input, 0) + max(maxOutput, 0)}
}

// RateReal is what a call took of a rate limit: one request and the
// tokens its usage reports (a call that failed before its provider
// answered still counts its request).
func RateReal(tokens int64) Amount { return Amount{Turns: 1, Tokens: max(tokens, 0)} }

// Cap lowers the room a rate limit has left until until (unix ms) to at
// most requests and tokens more (a negative count: unknown, not lowered),
// as a provider's rate-limit headers say, by a reservation (CapID) of the
// difference that expires then. It reports whether it changed s: a
// provider's count that is not tighter than the fleet's changes nothing.
// A cap marks Waiting, so workers' leases give back their surplus.
func (s *State) Cap(requests, tokens, until int64, now time.Time) bool {
	if !s.Limits.Rate || until <= now.UnixMilli() {
		return false
	}
	s.Roll(now)
	rest := slices.DeleteFunc(slices.Clone(s.Reservations), func(r Reservation) bool { return r.ID == CapID })
	used := s.UsedNow(now)
	held := State{Reservations: rest}.ReservedNow(now)
	var extra Amount
	lower := func(limit, used, held, remaining int64) int64 {
		if limit <= 0 || remaining < 0 {
			return 0
		}
		return max(limit-used-held-remaining, 0)
	}
	extra.Turns = lower(s.Limits.Max.Turns, used.Turns, held.Turns, requests)
	extra.Tokens = lower(s.Limits.Max.Tokens, used.Tokens, held.Tokens, tokens)
	i := slices.IndexFunc(s.Reservations, func(r Reservation) bool { return r.ID == CapID })
	if extra.IsZero() || i >= 0 && s.Reservations[i].Amount == extra && s.Reservations[i].Expires >= until {
		return false
	}
	s.Reservations = append(rest, Reservation{ID: CapID, Worker: "provider", Amount: extra, Expires: until})
	s.Waiting = now.UnixMilli()
	return true
}

// freeAt is when need fits a rate limit's window (unix ms) if nothing
// else is admitted meanwhile: its oldest slots leave the window and a
// provider's cap expires; 0 when that is not enough (the reservations of
// calls in flight hold the rest).
func (s State) freeAt(need Amount, now time.Time) int64 {
	if !s.Limits.Rate || s.Limits.Window.Kind != WindowRolling {
		return 0
	}
	s.Roll(now)
	used, held := s.UsedNow(now), s.ReservedNow(now)
	type leave struct {
		at int64
		a  Amount
	}
	var ls []leave
	w := s.Limits.Window.slotWidth()
	for _, sl := range s.Slots {
		ls = append(ls, leave{sl.Start + RollingSlots*w, sl.Used})
	}
	for _, r := range s.Reservations {
		if r.ID == CapID && r.Expires > now.UnixMilli() {
			ls = append(ls, leave{r.Expires, r.Amount})
		}
	}
	slices.SortFunc(ls, func(a, b leave) int { return int(a.at - b.at) })
	fits := func(u, h Amount) bool {
		l := s.Limits.Max
		return (l.Turns <= 0 || u.Turns+h.Turns+need.Turns <= l.Turns) && (l.Tokens <= 0 || u.Tokens+h.Tokens+need.Tokens <= l.Tokens)
	}
	for _, l := range ls {
		used = used.Sub(l.a) // a cap leaving lowers held; the sum is what counts
		if fits(used, held) {
			return l.at
		}
	}
	return 0
}
