package compaction

import "fmt"

// Defaults of pi's compaction settings.
const (
	// ReserveTokensDefault is the part of the context window kept free for
	// the model's reply; the summary request gets 80% of it as maxTokens.
	ReserveTokensDefault = 16384
	// KeepRecentTokensDefault is roughly how much of the newest conversation
	// a compaction keeps verbatim.
	KeepRecentTokensDefault = 20000
)

// Settings are pi's compaction settings (settings.json "compaction").
type Settings struct {
	// Enabled turns the threshold trigger on (ShouldCompact). It does not
	// stop Compact: overflow recovery and manual compaction run anyway, as
	// in pi. The zero Settings is disabled; DefaultSettings is enabled.
	Enabled bool
	// ReserveTokens is the part of the context window kept free for the
	// reply. 0 means ReserveTokensDefault.
	ReserveTokens int
	// KeepRecentTokens is how many tokens of the newest history are kept
	// verbatim. 0 means KeepRecentTokensDefault.
	KeepRecentTokens int
}

// DefaultSettings returns pi's defaults: enabled, 16384 reserved, 20000 kept.
func DefaultSettings() Settings {
	return Settings{Enabled: true, ReserveTokens: ReserveTokensDefault, KeepRecentTokens: KeepRecentTokensDefault}
}

func (s Settings) withDefaults() Settings {
	if s.ReserveTokens == 0 {
		s.ReserveTokens = ReserveTokensDefault
	}
	if s.KeepRecentTokens == 0 {
		s.KeepRecentTokens = KeepRecentTokensDefault
	}
	return s
}

func (s Settings) validate() error {
	if s.ReserveTokens < 0 {
		return fmt.Errorf("compaction: ReserveTokens %d is negative", s.ReserveTokens)
	}
	if s.KeepRecentTokens < 0 {
		return fmt.Errorf("compaction: KeepRecentTokens %d is negative", s.KeepRecentTokens)
	}
	return nil
}

// ShouldCompact reports whether a context of contextTokens tokens has
// crossed pi's threshold: contextTokens > contextWindow − ReserveTokens. It
// is false when s is not Enabled or contextWindow is unknown (≤ 0).
func ShouldCompact(contextTokens, contextWindow int, s Settings) bool {
	if !s.Enabled || contextWindow <= 0 {
		return false
	}
	s = s.withDefaults()
	return contextTokens > contextWindow-s.ReserveTokens
}
