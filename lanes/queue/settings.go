package queue

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

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
	// Dedupe is how a duplicate of a queued message is recognised.
	Dedupe DedupeMode
}

// DedupeMode says when an arriving message duplicates a queued one. Only
// messages with the same Route are compared.
type DedupeMode string

// Dedupe modes. The zero value is DedupeMessageID.
const (
	// DedupeMessageID: same non-empty client message id.
	DedupeMessageID DedupeMode = "message-id"
	// DedupePrompt: same prompt text.
	DedupePrompt DedupeMode = "prompt"
	// DedupeNone: never a duplicate.
	DedupeNone DedupeMode = "none"
)

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
	Dedupe   DedupeMode
}

// Resolve applies layers in precedence order, first set value wins: pass the
// inline directive, then the session's settings, then the channel's, then the
// global configuration. Unset values fall back to DefaultSettings; a
// negative debounce counts as 0 and a cap below 1 is ignored.
func Resolve(layers ...Overrides) Settings {
	s := Settings{}
	var debounceSet bool
	for _, l := range layers {
		if s.Mode == "" && l.Mode != "" {
			s.Mode = l.Mode
		}
		if !debounceSet && l.Debounce != nil {
			s.Debounce, debounceSet = max(0, *l.Debounce), true
		}
		if s.Cap == 0 && l.Cap >= 1 {
			s.Cap = l.Cap
		}
		if s.Drop == "" && l.Drop != "" {
			s.Drop = l.Drop
		}
		if s.Dedupe == "" && l.Dedupe != "" {
			s.Dedupe = l.Dedupe
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
	s.Debounce = max(0, s.Debounce)
	if s.Cap < 1 {
		s.Cap = d.Cap
	}
	if s.Drop == "" {
		s.Drop = d.Drop
	}
	return s
}

// ErrDirective is wrapped by every error of ParseDirective.
var ErrDirective = errors.New("queue: bad /queue directive")

// Directive is a parsed "/queue" command.
type Directive struct {
	// Reset clears the session's queue settings (default, reset, clear).
	Reset bool
	// Set holds the values the directive sets.
	Set Overrides
}

// ParseDirective parses the arguments of a "/queue" command (with or
// without the leading "/queue"): an optional mode, then options
// debounce:<duration> (Go duration or milliseconds), cap:<n> and
// drop:<policy>, in any order. Errors wrap ErrDirective.
func ParseDirective(text string) (Directive, error) {
	var d Directive
	fields := strings.Fields(text)
	if len(fields) > 0 && strings.EqualFold(fields[0], "/queue") {
		fields = fields[1:]
	}
	for _, f := range fields {
		key, val, ok := strings.Cut(f, ":")
		if !ok {
			key, val, ok = strings.Cut(f, "=")
		}
		if !ok {
			switch strings.ToLower(f) {
			case "default", "reset", "clear":
				d.Reset = true
				continue
			}
			m, ok := ParseMode(f)
			if !ok {
				return Directive{}, fmt.Errorf("%w: unknown mode %q", ErrDirective, f)
			}
			d.Set.Mode = m
			continue
		}
		switch strings.ToLower(key) {
		case "debounce":
			dur, err := parseDuration(val)
			if err != nil {
				return Directive{}, fmt.Errorf("%w: debounce %q: %w", ErrDirective, val, err)
			}
			d.Set.Debounce = &dur
		case "cap":
			n, err := strconv.ParseFloat(val, 64)
			if err != nil || n < 1 || math.IsInf(n, 0) {
				return Directive{}, fmt.Errorf("%w: cap %q is not a number ≥ 1", ErrDirective, val)
			}
			d.Set.Cap = int(math.Floor(min(n, math.MaxInt32)))
		case "drop":
			p, ok := ParseDropPolicy(val)
			if !ok {
				return Directive{}, fmt.Errorf("%w: unknown drop policy %q", ErrDirective, val)
			}
			d.Set.Drop = p
		default:
			return Directive{}, fmt.Errorf("%w: unknown option %q", ErrDirective, key)
		}
	}
	return d, nil
}

func parseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if n < 0 || math.IsNaN(n) || n > float64(math.MaxInt64/int64(time.Millisecond)) {
			return 0, errors.New("out of range")
		}
		return time.Duration(n * float64(time.Millisecond)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, errors.New("negative")
	}
	return d, nil
}
