package fallback

import (
	"strings"

	"github.com/lanefleet/lanefleet/authprofile"
)

// Defaults used when neither the request nor the configuration names a model.
const (
	DefaultProvider = "anthropic"
	DefaultModel    = "claude-opus-4-6"
)

// Candidate is one provider/model pair to try.
type Candidate struct {
	Provider string
	Model    string
}

// String returns "provider/model".
func (c Candidate) String() string { return c.Provider + "/" + c.Model }

// Config is agents.defaults.model and the model aliases.
type Config struct {
	// Primary is the configured primary model, "provider/model" or an alias.
	Primary string
	// Fallbacks are the configured fallbacks, in order.
	Fallbacks []string
	// Aliases maps an alias (compared case-insensitively) to
	// "provider/model".
	Aliases map[string]string
}

// ParseRef resolves a model reference: "provider/model" (split at the first
// slash, provider normalised), an alias, or a bare model id of
// defaultProvider. ok is false for a blank reference.
func (c *Config) ParseRef(raw, defaultProvider string) (Candidate, bool) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return Candidate{}, false
	}
	if !strings.Contains(raw, "/") && c != nil {
		for alias, target := range c.Aliases {
			if strings.EqualFold(strings.TrimSpace(alias), raw) && strings.Contains(target, "/") {
				raw = strings.TrimSpace(target)
				break
			}
		}
	}
	prov, model, ok := strings.Cut(raw, "/")
	if !ok {
		return normalize(defaultProvider, raw), true
	}
	if strings.TrimSpace(prov) == "" || strings.TrimSpace(model) == "" {
		return Candidate{}, false
	}
	return normalize(prov, model), true
}

func normalize(prov, model string) Candidate {
	return Candidate{Provider: authprofile.NormalizeProvider(prov), Model: strings.TrimSpace(model)}
}

// primary is the configured primary, or the default.
func (c *Config) primary() Candidate {
	if c != nil {
		if p, ok := c.ParseRef(c.Primary, DefaultProvider); ok {
			return p
		}
	}
	return Candidate{Provider: DefaultProvider, Model: DefaultModel}
}

// Candidates lists the models to try for a request, first the requested one
// (blank parts default to the configured primary, or the default). The
// fallbacks follow: override when it is non-nil (even empty), else the
// configured fallbacks, but only when the requested provider is the
// primary's or the requested model is itself one of them. Without an
// override the configured primary comes last. Duplicates are dropped. A nil
// cfg means no configuration: only the requested model.
func Candidates(cfg *Config, requestedProvider, requestedModel string, override []string) []Candidate {
	prim := cfg.primary()
	prov := strings.TrimSpace(requestedProvider)
	if prov == "" {
		prov = prim.Provider
	}
	model := strings.TrimSpace(requestedModel)
	if model == "" {
		model = prim.Model
	}
	req := normalize(prov, model)

	var out []Candidate
	add := func(c Candidate) {
		if c.Provider == "" || c.Model == "" {
			return
		}
		for _, e := range out {
			if e == c {
				return
			}
		}
		out = append(out, c)
	}
	add(req)

	fallbacks := override
	if override == nil && cfg != nil {
		fallbacks = cfg.Fallbacks
		if req.Provider != prim.Provider {
			inChain := false
			for _, raw := range cfg.Fallbacks {
				if c, ok := cfg.ParseRef(raw, prim.Provider); ok && c == req {
					inChain = true
					break
				}
			}
			if !inChain {
				fallbacks = nil
			}
		}
	}
	for _, raw := range fallbacks {
		if c, ok := cfg.ParseRef(raw, prim.Provider); ok {
			add(c)
		}
	}
	if override == nil && cfg != nil {
		add(prim)
	}
	return out
}
