package queue

import "time"

// Settings are the queue settings in force for one lane.
type Settings struct {
	// Mode is the queue mode.
	Mode Mode
	// Debounce is how long the queue must be quiet (no new message)
	// before it is drained.
	Debounce time.Duration
	// Cap is the most messages kept queued (at least 1).
	Cap int
	// Drop is what happens at the cap.
	Drop DropPolicy
}

// DefaultSettings returns the reference defaults: collect, 1 s debounce, cap
// 20, summarize.
func DefaultSettings() Settings {
	return Settings{Mode: ModeDefault, Debounce: DebounceDefault, Cap: CapDefault, Drop: DropDefault}
}

// Overrides is one layer of settings; zero fields are unset.
type Overrides struct {
	Mode Mode
	// Debounce is set when non-nil (zero is a valid debounce).
	Debounce *time.Duration
	Cap      int
	Drop     DropPolicy
}

// Resolve applies layers in precedence order, first set value wins: pass the
// inline directive, then the session's settings, then the channel's, then the
// global configuration. Unset values fall back to DefaultSettings; a
// negative debounce counts as 0, one over DebounceMax as DebounceMax, and a
// cap below 1 is ignored.
func Resolve(layers ...Overrides) Settings {
	s := Settings{}
	var debounceSet bool
	for _, l := range layers {
		if s.Mode == "" && l.Mode != "" {
			s.Mode = l.Mode
		}
		if !debounceSet && l.Debounce != nil {
			s.Debounce, debounceSet = min(max(0, *l.Debounce), DebounceMax), true
		}
		if s.Cap == 0 && l.Cap >= 1 {
			s.Cap = l.Cap
		}
		if s.Drop == "" && l.Drop != "" {
			s.Drop = l.Drop
		}
	}
	d := DefaultSettings()
	if s.Mode == "" {
		s.Mode = d.Mode
	}
	if !debounceSet {
		s.Debounce = d.Debounce
	}
	if s.Cap == 0 {
		s.Cap = d.Cap
	}
	if s.Drop == "" {
		s.Drop = d.Drop
	}
	return s
}

// normalized returns s with every field valid.
func (s Settings) normalized() Settings {
	d := DefaultSettings()
	if s.Mode == "" {
		s.Mode = d.Mode
	}
	s.Debounce = min(max(0, s.Debounce), DebounceMax)
	if s.Cap < 1 {
		s.Cap = d.Cap
	}
	if s.Drop == "" {
		s.Drop = d.Drop
	}
	return s
}
