package guard

import (
	"fmt"
	"math"
)

// Context-window defaults (runtime spec §1, §13).
const (
	// DefaultContextTokens is the window assumed when neither the models
	// config nor the model metadata gives a usable one.
	DefaultContextTokens = 200_000
	// HardMinTokensDefault is the smallest window a run may start with.
	HardMinTokensDefault = 16_000
	// WarnBelowTokensDefault is the window below which a run logs a warning.
	WarnBelowTokensDefault = 32_000
)

// WindowSource says where a resolved context window came from.
type WindowSource string

// Window sources, in priority order; agentContextTokens is the agent-wide cap
// that replaces any of the others when it is smaller.
const (
	SourceModelsConfig       WindowSource = "modelsConfig"
	SourceModel              WindowSource = "model"
	SourceDefault            WindowSource = "default"
	SourceAgentContextTokens WindowSource = "agentContextTokens"
)

// WindowConfig is the slice of the configuration the context-window guard
// reads. All numbers may be fractional or non-positive, as they come from
// user config; unusable values are ignored.
type WindowConfig struct {
	// ModelWindows maps a provider key, compared exactly (not normalised),
	// and a model id to a configured context window
	// (models.providers[p].models[id].contextWindow).
	ModelWindows map[string]map[string]float64
	// AgentContextTokens is agents.defaults.contextTokens: a cap applied
	// when it is smaller than the resolved window. 0 = none.
	AgentContextTokens float64
	// DefaultTokens replaces DefaultContextTokens when usable.
	DefaultTokens float64
	// WarnBelowTokens replaces WarnBelowTokensDefault when set (floored, min 1).
	WarnBelowTokens float64
	// HardMinTokens replaces HardMinTokensDefault when set (floored, min 1).
	HardMinTokens float64
}

// Window is a resolved context window and the guard's verdict on it.
type Window struct {
	Tokens      int          `json:"tokens"`
	Source      WindowSource `json:"source"`
	ShouldWarn  bool         `json:"shouldWarn"`
	ShouldBlock bool         `json:"shouldBlock"`
	// HardMin is the minimum the verdict was computed against.
	HardMin int `json:"-"`
}

// usable floors v and reports whether it is a finite positive window.
func usable(v float64) (int, bool) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	f := math.Floor(v)
	if f <= 0 || f > math.MaxInt32*1024 {
		return 0, false
	}
	return int(f), true
}

func threshold(v float64, def int) int {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return def
	}
	return max(1, int(math.Floor(v)))
}

// ResolveWindow picks the context window for provider/modelID: the models
// config entry, else the model's own metadata (modelWindow), else the
// default; an agent-wide cap wins when smaller. It then flags windows below
// the warn and block thresholds (strictly below).
func ResolveWindow(provider, modelID string, modelWindow float64, cfg WindowConfig) Window {
	w := Window{Source: SourceDefault, Tokens: DefaultContextTokens}
	if n, ok := usable(cfg.DefaultTokens); ok {
		w.Tokens = n
	}
	if n, ok := usable(modelWindow); ok {
		w = Window{Tokens: n, Source: SourceModel}
	}
	if n, ok := usable(cfg.ModelWindows[provider][modelID]); ok {
		w = Window{Tokens: n, Source: SourceModelsConfig}
	}
	if n, ok := usable(cfg.AgentContextTokens); ok && n < w.Tokens {
		w = Window{Tokens: n, Source: SourceAgentContextTokens}
	}
	warn := threshold(cfg.WarnBelowTokens, WarnBelowTokensDefault)
	w.HardMin = threshold(cfg.HardMinTokens, HardMinTokensDefault)
	w.ShouldWarn = w.Tokens > 0 && w.Tokens < warn
	w.ShouldBlock = w.Tokens > 0 && w.Tokens < w.HardMin
	return w
}

// Err returns a *WindowTooSmallError when the window should block a run, else nil.
func (w Window) Err() error {
	if !w.ShouldBlock {
		return nil
	}
	return &WindowTooSmallError{Tokens: w.Tokens, Min: w.HardMin}
}

// WindowTooSmallError is returned by Window.Err for a window below the hard
// minimum. The run loop turns it into a failover error with reason unknown.
type WindowTooSmallError struct {
	Tokens int // the resolved window
	Min    int // the hard minimum
}

// Error returns the reference's message, "Model context window too small
// (<n> tokens). Minimum is <min>."
func (e *WindowTooSmallError) Error() string {
	return fmt.Sprintf("Model context window too small (%d tokens). Minimum is %d.", e.Tokens, e.Min)
}
