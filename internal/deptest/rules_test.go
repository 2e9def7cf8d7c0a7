package deptest

import (
	"strings"
	"testing"
)

const mod = "github.com/lanefleet/lanefleet"

// pure are the packages that decide from values: no NATS, no clocks they do
// not take as arguments (STYLE.md "Decide in pure code, translate in
// adapters").
var pure = []string{
	mod + "/sanitize", mod + "/sessionfile", mod + "/guard", mod + "/authprofile", mod + "/fallback",
	mod + "/lanes/queue", mod + "/blockchunk", mod + "/replytext", mod + "/provider/failover",
	mod + "/message", mod + "/events", mod + "/subagent",
}

// rules are the module's import rules, each with its reason.
var rules = []struct {
	name   string
	pkgs   []string // go list patterns the rule is about
	forbid []Rule
	why    string
	// pending names the branch that makes a rule hold that does not hold
	// yet: its violations are logged, and the test fails once the rule
	// holds, so that the mark is removed.
	pending string
}{
	{"runner does not import lanes", []string{mod + "/runner"}, []Rule{Exact(mod + "/lanes")},
		"the runner runs one turn over interfaces it declares (Sink, Resolver, ToolSource); cmd/worker plugs it into the lanes", ""},
	{"lanes do not import runner", []string{mod + "/lanes/..."}, []Rule{Prefix(mod + "/runner")},
		"the lanes run a Handler they declare, whatever runs the turns; the two meet only in cmd/worker's adapter", ""},
	{"events does not import lanes", []string{mod + "/events"}, []Rule{Prefix(mod + "/lanes")},
		"events is the wire schema every client links: it carries plain values, the queue policy that reads them lives in lanes/queue", ""},
	{"message imports nothing of ours but ecmatext and internal/mpw", []string{mod + "/message"}, []Rule{Prefix(mod+"/").Except(Exact(mod+"/ecmatext"), Exact(mod+"/internal/mpw"))},
		"message is the conversation model every package shares; a leaf, so that any package may import it (ecmatext is a leaf too: the one JSON.stringify emulation, which pi's session lines need; internal/mpw is the msgpack-by-hand leaf its entry encoder uses)", ""},
	{"internal/mpw imports nothing of ours", []string{mod + "/internal/mpw"}, []Rule{Prefix(mod + "/")},
		"internal/mpw is a leaf (msgpack appended by hand) that message, events and kvstore share", ""},
	{"ecmatext imports nothing of ours", []string{mod + "/ecmatext"}, []Rule{Prefix(mod + "/")},
		"ecmatext is the text leaf (JavaScript's string lengths and JSON.stringify) that message and the pure packages share", ""},
	{"pure packages do not link NATS", pure, []Rule{Contains("nats-io")},
		"pure packages take values and return values; only the adapters (lanes, kvstore, authstore, internal/fleet) speak NATS", ""},
	{"pure packages do not link the lane runtime or the stores", []string{mod + "/sanitize", mod + "/guard", mod + "/authprofile", mod + "/fallback",
		mod + "/blockchunk", mod + "/replytext", mod + "/tools", mod + "/agentprompt", mod + "/compaction"},
		[]Rule{Suffix("/lanes"), Prefix(mod + "/kvstore"), Prefix(mod + "/authstore")},
		"deciding must not depend on where the state is kept or how a lane is driven", ""},
	{"sanitize does no networking", []string{mod + "/sanitize"}, []Rule{Exact("net"), Exact("net/http")},
		"transcripts are repaired in memory, before any request is made", ""},
	{"prompt building and compaction do not depend on the runner or the adapters",
		[]string{mod + "/agentprompt", mod + "/compaction"}, []Rule{Prefix(mod + "/runner"), Exact("net/http")},
		"the runner calls them; compaction reaches a model only through the provider.Provider it is given", ""},
	{"agentprompt runs no processes and no providers", []string{mod + "/agentprompt"}, []Rule{Prefix(mod + "/provider"), Exact("net"), Exact("os/exec")},
		"building a system prompt reads files; hooks come in as values", ""},
	{"hooks do not depend on the runner", []string{mod + "/hooks"}, []Rule{Prefix(mod + "/runner")},
		"hooks speaks the hook protocol over NATS with types of its own; the worker's wiring (internal/fleet) adapts it to the runner's ToolHook and EndHook", ""},
	{"tools do not depend on the runner", []string{mod + "/tools"}, []Rule{Prefix(mod + "/runner")},
		"the runner calls tools through tools.Set; a tool never drives a run", ""},
	{"provider adapters do not link NATS", []string{mod + "/provider/..."}, []Rule{Contains("nats-io")},
		"providers speak HTTP to model APIs; the fleet's transport is not theirs", ""},
}

// TestModuleRules checks every import rule of the module (go list, so it
// sees exactly what each build links).
func TestModuleRules(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{TB: t}
			PackagesNoImports(rec, r.pkgs, r.forbid...)
			switch {
			case r.pending == "" && len(rec.errs) > 0:
				t.Errorf("%s\n%s", r.why, strings.Join(rec.errs, "\n"))
			case r.pending != "" && len(rec.errs) > 0:
				t.Logf("pending until %s: %s", r.pending, strings.Join(rec.errs, "\n"))
			case r.pending != "":
				t.Errorf("the rule holds now: remove its pending mark (%s)", r.pending)
			}
		})
	}
}
