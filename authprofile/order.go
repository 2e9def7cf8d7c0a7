package authprofile

import (
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/provider"
)

// profileConfig returns the configured entry for id.
func (c Config) profileConfig(id string) (ProfileConfig, bool) {
	for _, p := range c.Profiles {
		if p.ID == id {
			return p, true
		}
	}
	return ProfileConfig{}, false
}

// Valid reports whether p may serve prov at now: the providers match
// (normalised); a configured entry for p, if any, has the same provider and a
// mode equal to p's type (mode oauth also accepts a token); an api_key has a
// non-blank key or a key reference; a token is non-blank (or a reference)
// and not expired; an oauth credential has a non-blank access or refresh
// token. (A reference is read at use: one that does not read then fails
// that call and the run moves to the next profile.)
func (c Config) Valid(p Profile, prov string, now time.Time) bool {
	key := NormalizeProvider(prov)
	if p.Provider != key && NormalizeProvider(p.Provider) != key {
		return false
	}
	if pc, ok := c.profileConfig(p.ID); ok {
		if NormalizeProvider(pc.Provider) != key {
			return false
		}
		if pc.Mode != p.Type && !(pc.Mode == TypeOAuth && p.Type == TypeToken) {
			return false
		}
	}
	switch p.Type {
	case TypeAPIKey:
		return strings.TrimSpace(p.Key.Reveal()) != "" || strings.TrimSpace(p.KeyRef) != ""
	case TypeToken:
		if strings.TrimSpace(p.Token.Reveal()) == "" && strings.TrimSpace(p.TokenRef) == "" {
			return false
		}
		return !(p.Expires > 0 && ms(now) >= p.Expires)
	case TypeOAuth:
		return strings.TrimSpace(p.Access.Reveal()) != "" || strings.TrimSpace(p.Refresh.Reveal()) != "" || strings.TrimSpace(p.RefreshRef) != ""
	}
	return false
}

// until is when s stops blocking model (0 = not blocked at all).
func until(s State, model string) int64 { return max(s.unusableUntil(), s.modelUntil(model)) }

// InCooldown reports whether a profile of provider prov with state s is
// cooling or disabled for model at now (model "" = any model). OpenRouter
// profiles are never in cooldown.
func InCooldown(prov string, s State, model string, now time.Time) bool {
	if isOpenRouter(prov) {
		return false
	}
	return ms(now) < until(s, model)
}

// CanProbe reports whether a cooling profile may be probed under the fleet
// policy: probing is on, the profile is not disabled, its window for model
// ends within ProbeMargin, neither a failure nor a probe happened within
// ProbeInterval, and no Retry-After it got is still pending.
func (c Config) CanProbe(prov string, s State, model string, now time.Time) bool {
	if c.Fleet.ProbeMargin <= 0 || !InCooldown(prov, s, model, now) {
		return false
	}
	t := ms(now)
	if s.DisabledUntil > t {
		return false
	}
	if until(s, model)-t > c.Fleet.ProbeMargin.Milliseconds() {
		return false
	}
	last, retry := max(s.LastProbeAt, s.LastFailureAt), s.RetryUntil
	if m := s.Models[model]; model != "" && m.CooldownUntil > t {
		last, retry = max(m.LastProbeAt, m.LastFailureAt), m.RetryUntil
	}
	return t >= retry && t-last >= c.Fleet.probeInterval().Milliseconds()
}

// OrderRequest says which profiles to order.
type OrderRequest struct {
	Provider  string
	Model     string // per-model cooldowns are consulted for this model; "" = none
	Preferred string // moved to the front when in the list, even if cooling
}

// lookupOrder finds the order list whose provider key normalises to key.
// An exact key wins; otherwise the smallest matching key (for determinism).
func lookupOrder(m map[string][]string, key string) ([]string, bool) {
	if v, ok := m[key]; ok {
		return v, true
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if NormalizeProvider(k) == key {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, false
	}
	sort.Strings(keys)
	return m[keys[0]], true
}

// Order returns the profile ids to try for req.Provider, best first (the
// reference's resolveAuthProfileOrder). The base list is the store's order
// for the provider, else the configured order, else the configured profiles
// for the provider, else every stored profile for it; invalid profiles are
// dropped. An explicit order is kept as given, a derived one is sorted round
// robin (oauth, token, api_key, then least recently used); cooling profiles
// go last, soonest expiry first; the preferred profile goes first. Expired
// windows count as ended (call ClearExpired to persist that). With probing
// on, a profile that may be probed keeps its place among the available ones.
func Order(s Store, c Config, req OrderRequest, now time.Time) []string {
	key := NormalizeProvider(req.Provider)
	b := orderBase(s, c, key)
	if len(b.list) == 0 {
		return []string{}
	}
	ids, pos := b.valid(s, c, key, now)
	out := rank(s, c, req.Model, ids, pos, b.explicit && len(b.list) > 0, now)
	return preferFirst(out, req.Preferred)
}

// base is the list Order starts from, and what it came from.
type base struct {
	list     []string // the base list
	explicit bool     // list is an explicit order (the store's or the configuration's)
	// configured are the configured profiles of the provider; stored the
	// store's, at storedPos in s.Profiles.
	configured []string
	stored     []string
	storedPos  []int
	index      map[string]int // profile id → position in s.Profiles, built on first use
}

// orderBase picks the base list of provider key: the store's order, else
// the configured order, else the configured profiles, else every stored
// profile of the provider.
func orderBase(s Store, c Config, key string) base {
	var b base
	var explicit []string
	explicit, b.explicit = lookupOrder(s.Order, key)
	if !b.explicit {
		explicit, b.explicit = lookupOrder(c.Order, key)
	}
	for _, p := range c.Profiles {
		if NormalizeProvider(p.Provider) == key {
			b.configured = append(b.configured, p.ID)
		}
	}
	b.stored = make([]string, 0, len(s.Profiles))
	b.storedPos = make([]int, 0, len(s.Profiles))
	for i, p := range s.Profiles {
		if p.Provider == key || NormalizeProvider(p.Provider) == key {
			b.stored = append(b.stored, p.ID)
			b.storedPos = append(b.storedPos, i)
		}
	}
	b.list = b.stored
	switch {
	case b.explicit:
		b.list = explicit
	case len(b.configured) > 0:
		b.list = b.configured
	}
	return b
}

// lookup finds a profile's position in s.Profiles. Profile ids are unique
// in a Store (they key auth-profiles.json); the index is built once.
func (b *base) lookup(s Store, id string) (int, bool) {
	if b.index == nil {
		b.index = make(map[string]int, len(s.Profiles))
		for i := len(s.Profiles) - 1; i >= 0; i-- {
			b.index[s.Profiles[i].ID] = i
		}
	}
	i, ok := b.index[id]
	return i, ok
}

// valid returns the base list's valid candidates, once each, and their
// profiles' positions. A configured list none of whose ids the store
// knows falls back to the stored profiles.
func (b *base) valid(s Store, c Config, key string, now time.Time) (ids []string, pos []int) {
	filter := func(list []string, at []int) {
		ids, pos = make([]string, 0, len(list)), make([]int, 0, len(list))
		seen := make([]bool, len(s.Profiles))
		for k, id := range list {
			i, ok := 0, true
			if at != nil {
				i = at[k]
			} else {
				i, ok = b.lookup(s, id)
			}
			if ok && !seen[i] && c.Valid(s.Profiles[i], key, now) {
				seen[i] = true
				ids, pos = append(ids, id), append(pos, i)
			}
		}
	}
	if b.explicit || len(b.configured) > 0 {
		filter(b.list, nil)
	} else {
		filter(b.stored, b.storedPos)
	}
	if len(ids) == 0 && len(b.configured) > 0 && !slices.ContainsFunc(b.list, func(id string) bool { _, ok := b.lookup(s, id); return ok }) {
		filter(b.stored, b.storedPos)
	}
	return ids, pos
}

// rank orders the candidates: the available ones first (kept in order
// when keep, else round robin: by type, then least recently used), then
// the cooling ones, soonest expiry first. A profile that may be probed
// counts as available.
func rank(s Store, c Config, model string, ids []string, pos []int, keep bool, now time.Time) []string {
	// Entries hold no pointers and carry their position, so sorting them is
	// cheap and a plain sort with the position as last key is stable.
	type entry struct {
		pos      int32 // in ids
		rank     int32
		lastUsed int64
		until    int64
	}
	avail := make([]entry, 0, len(ids))
	var cooling []entry
	for i, id := range ids {
		p := &s.Profiles[pos[i]]
		st := s.Usage[id]
		e := entry{pos: int32(i), rank: int32(typeRank(p.Type)), lastUsed: st.LastUsed, until: until(st, model)}
		if InCooldown(p.Provider, st, model, now) && !c.CanProbe(p.Provider, st, model, now) {
			cooling = append(cooling, e)
		} else {
			avail = append(avail, e)
		}
	}
	if !keep {
		slices.SortFunc(avail, func(a, b entry) int {
			if a.rank != b.rank {
				return int(a.rank - b.rank)
			}
			if c := cmpInt(a.lastUsed, b.lastUsed); c != 0 {
				return c
			}
			return int(a.pos - b.pos)
		})
	}
	slices.SortFunc(cooling, func(a, b entry) int {
		if c := cmpInt(a.until, b.until); c != 0 {
			return c
		}
		return int(a.pos - b.pos)
	})
	out := make([]string, 0, len(ids))
	for _, e := range avail {
		out = append(out, ids[e.pos])
	}
	for _, e := range cooling {
		out = append(out, ids[e.pos])
	}
	return out
}

// preferFirst moves preferred to the front of out when it is in it.
func preferFirst(out []string, preferred string) []string {
	if preferred != "" {
		if i := slices.Index(out, preferred); i > 0 {
			out = slices.Insert(slices.Delete(out, i, i+1), 0, preferred)
		}
	}
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Selection is the profile a run should use.
type Selection struct {
	// ID is the chosen profile, "" when none is usable.
	ID string
	// Probe reports that ID is cooling and chosen as a probe: claim it by
	// applying EventProbe (under compare-and-swap) before using it.
	Probe bool
	// AllInCooldown reports that there were candidates and all were cooling.
	AllInCooldown bool
}

// Select picks the first of ids (an Order result) that is usable for model:
// not cooling, or, with probing on, cooling but due for a probe. Because
// Order keeps a probe-due profile in its rank, a recovering higher-priority
// profile is tried again before its window ends (re-promotion); only one
// worker wins the probe when each claims it with EventProbe under CAS.
func Select(s Store, c Config, ids []string, model string, now time.Time) Selection {
	for _, id := range ids {
		p, _ := s.Profile(id)
		st := s.Usage[id]
		if !InCooldown(p.Provider, st, model, now) {
			return Selection{ID: id}
		}
		if c.CanProbe(p.Provider, st, model, now) {
			return Selection{ID: id, Probe: true}
		}
	}
	return Selection{AllInCooldown: len(ids) > 0}
}

// LastResort picks the profile a run may still use for model when every
// one of ids (an Order result) is cooling and nothing else can serve the run
// (Fleet.LastResort; false when it is off): the one the server lets back
// first. A profile that is disabled (billing, auth_permanent) or cooling
// because its key was refused (auth) is never picked: waiting does not
// mend those. at is when the profile may be called: its pending
// Retry-After (profile-wide or for model), or now; ties keep the order of
// ids.
func (c Config) LastResort(s Store, ids []string, model string, now time.Time) (id string, at time.Time, ok bool) {
	if !c.Fleet.LastResort {
		return "", time.Time{}, false
	}
	t := ms(now)
	best := int64(0)
	for _, cand := range ids {
		st := s.Usage[cand]
		switch UnavailableReason(s.Usage, []string{cand}, model, now) {
		case provider.ReasonAuth, provider.ReasonAuthPermanent, provider.ReasonBilling:
			continue
		}
		if st.DisabledUntil > t {
			continue
		}
		free := max(t, st.RetryUntil, st.Models[model].RetryUntil)
		if !ok || free < best {
			id, best, ok = cand, free, true
		}
	}
	if !ok {
		return "", time.Time{}, false
	}
	return id, time.UnixMilli(best), true
}

// reasonPriority breaks ties in UnavailableReason.
var reasonPriority = []provider.Reason{
	provider.ReasonAuthPermanent, provider.ReasonAuth, provider.ReasonBilling, provider.ReasonFormat,
	provider.ReasonModelNotFound, provider.ReasonTimeout, provider.ReasonRateLimit, provider.ReasonUnknown,
}

func priority(r provider.Reason) int {
	if i := slices.Index(reasonPriority, r); i >= 0 {
		return i
	}
	return len(reasonPriority)
}

// UnavailableReason infers why the profiles ids are unavailable for model
// at now: an active disable with a reason scores 1000 for it; otherwise each
// active cooldown adds its failure counts (rate_limit 1 when it has none).
// The highest score wins, ties broken by auth_permanent, auth, billing,
// format, model_not_found, timeout, rate_limit, unknown. "" when nothing is
// active.
func UnavailableReason(usage map[string]State, ids []string, model string, now time.Time) provider.Reason {
	t := ms(now)
	scores := map[provider.Reason]int{}
	add := func(counts map[provider.Reason]int) {
		n := 0
		for r, c := range counts {
			if c > 0 {
				scores[r] += c
				n++
			}
		}
		if n == 0 {
			scores[provider.ReasonRateLimit]++
		}
	}
	for _, id := range ids {
		st, ok := usage[id]
		if !ok {
			continue
		}
		if st.DisabledUntil > t && st.DisabledReason != "" {
			scores[st.DisabledReason] += 1000
			continue
		}
		if st.unusableUntil() > t {
			add(st.FailureCounts)
		}
		if st.modelUntil(model) > t {
			add(st.Models[model].FailureCounts)
		}
	}
	best := provider.Reason("")
	for r, sc := range scores {
		if best == "" || sc > scores[best] || (sc == scores[best] && (priority(r) < priority(best) || (priority(r) == priority(best) && r < best))) {
			best = r
		}
	}
	return best
}

// ProviderStatus summarises a provider's profiles for the model-fallback
// decision.
type ProviderStatus struct {
	// Profiles is how many usable profiles the provider has.
	Profiles int
	// AllCooling reports that there are profiles and every one is cooling
	// or disabled for the model.
	AllCooling bool
	// Reason is UnavailableReason over the profiles when AllCooling ("" =
	// unknown).
	Reason provider.Reason
	// SoonestExpiry is the earliest end of their windows (zero = unknown).
	SoonestExpiry time.Time
}

// Status reports on prov's profiles for model at now.
func Status(s Store, c Config, prov, model string, now time.Time) ProviderStatus {
	ids := Order(s, c, OrderRequest{Provider: prov, Model: model}, now)
	st := ProviderStatus{Profiles: len(ids)}
	if len(ids) == 0 {
		return st
	}
	soonest := int64(0)
	for _, id := range ids {
		p, _ := s.Profile(id)
		u := s.Usage[id]
		if !InCooldown(p.Provider, u, model, now) {
			return st
		}
		if e := until(u, model); e > 0 && (soonest == 0 || e < soonest) {
			soonest = e
		}
	}
	st.AllCooling = true
	st.Reason = UnavailableReason(s.Usage, ids, model, now)
	if soonest > 0 {
		st.SoonestExpiry = time.UnixMilli(soonest)
	}
	return st
}

// MarkGood records id as the last good profile of prov (exact provider
// string, as the reference does). lastGood is informational: Order never
// uses it.
func (s *Store) MarkGood(prov, id string) {
	if s.LastGood == nil {
		s.LastGood = map[string]string{}
	}
	s.LastGood[prov] = id
}
