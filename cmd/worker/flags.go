package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/hooks"
)

// embeddedFlags configure the embedded server, which a worker joining
// NATS_URL does not start.
var embeddedFlags = []string{"data-dir", "listen", "sync", "insecure-listen", "nats-monitor"}

// checkJoin refuses embedded-server flags next to a server URL to join: the
// URL won and the flags were ignored (a shell set up for the publisher
// exports NATS_URL, so a worker started in that shell joined it, or died
// with "no servers available", whatever --data-dir and --listen said).
func checkJoin(fs *pflag.FlagSet, natsURL string) error {
	if natsURL == "" {
		return nil
	}
	var given []string
	for _, name := range embeddedFlags {
		if fs.Changed(name) {
			given = append(given, "--"+name)
		}
	}
	if len(given) == 0 {
		return nil
	}
	from := "NATS_URL (set in the environment)"
	way := "unset NATS_URL (env -u NATS_URL worker …)"
	if fs.Changed("nats-url") {
		from, way = "--nats-url", "drop --nats-url"
	}
	return usageError{fmt.Errorf("%s configure the embedded server, but %s joins another server instead: %s to start the embedded server, or drop %s to join that one",
		strings.Join(given, ", "), from, way, strings.Join(given, ", "))}
}

// rangeRule is what a numeric flag allows.
type rangeRule struct {
	name  string
	ok    func(v float64) bool
	allow string
}

// The flags' ranges: a value outside one was silently replaced by a
// default (zero, negative counts) or failed later with a raw NATS error.
var (
	positive       = func(v float64) bool { return v > 0 }
	nonNegative    = func(v float64) bool { return v >= 0 }
	positiveOrNone = func(v float64) bool { return v > 0 || v == -1 }
	rangeRules     = []rangeRule{
		{"replicas", func(v float64) bool { return v >= 1 && v <= 5 }, "1 to 5 (3 on a 3-node cluster)"},
		{"concurrency", positive, "a positive count"},
		{"max-inflight-bytes", positiveOrNone, "a positive byte count, or -1 for no bound"},
		{"lane-turn-budget", positiveOrNone, "a positive count, or -1 for no fair scheduling"},
		{"setup-concurrency", func(v float64) bool { return v >= -1 }, "a positive count, 0 for four per core, or -1 for no bound"},
		{"max-payload", positive, "a positive byte count"},
		{"max-tool-iterations", positive, "a positive count"},
		{"linger", func(v float64) bool { return v != 0 }, "a positive duration, or -1ms for none"},
		{"lane-time-budget", nonNegative, "a positive duration, or 0 for turns only"},
		{"ack-wait", positive, "a positive duration"},
		{"lease-ttl", positive, "a positive duration"},
		{"shutdown-grace", positive, "a positive duration"},
		{"retention-rate", positive, "a positive count of sessions a second"},
		{"session-ttl", nonNegative, "a positive duration, or 0 to keep sessions forever"},
		{"event-max-age", positive, "a positive duration"},
		{"openai-compatible-wait", nonNegative, "a positive duration, or 0 to fail at once"},
		{"scripted-delay", nonNegative, "a positive duration, or 0 for none"},
		{"timeout", positive, "a positive duration"},
		{"hooks-timeout", func(v float64) bool { return v > 0 && v <= float64(hooks.MaxTimeout) }, "a positive duration of at most " + hooks.MaxTimeout.String()},
	}
)

// checkRanges refuses a duration or count no worker could mean, naming the
// flag, its value and what it allows.
func checkRanges(fs *pflag.FlagSet) error {
	var errs []error
	for _, r := range rangeRules {
		f := fs.Lookup(r.name)
		if f == nil {
			continue
		}
		var v float64
		switch f.Value.Type() {
		case "duration":
			d, err := fs.GetDuration(r.name)
			if err != nil {
				return err
			}
			v = float64(d)
		case "int":
			n, err := fs.GetInt(r.name)
			if err != nil {
				return err
			}
			v = float64(n)
		case "int64":
			n, err := fs.GetInt64(r.name)
			if err != nil {
				return err
			}
			v = float64(n)
		default:
			return fmt.Errorf("checkRanges: --%s is a %s", r.name, f.Value.Type())
		}
		if !r.ok(v) {
			errs = append(errs, fmt.Errorf("--%s %s: want %s", r.name, f.Value.String(), r.allow))
		}
	}
	if len(errs) > 0 {
		return usageError{errors.Join(errs...)}
	}
	return nil
}

// maxTenantWeight bounds a --tenant-weight.
const maxTenantWeight = 1000

// parseTenantWeights reads --tenant-weight TENANT=N flags.
func parseTenantWeights(flags []string) (map[string]int, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	out := make(map[string]int, len(flags))
	for _, f := range flags {
		name, v, ok := strings.Cut(f, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 1 || n > maxTenantWeight {
			return nil, fmt.Errorf("%.80q is not TENANT=N with N from 1 to %d", f, maxTenantWeight)
		}
		if err := governance.ValidName(name); err != nil {
			return nil, err
		}
		out[name] = n
	}
	return out, nil
}
