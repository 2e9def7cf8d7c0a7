package chatcmd

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/events"
)

func ptr[T any](v T) *T { return &v }

var parseCases = []struct {
	name  string
	text  string
	ok    bool
	want  Name
	args  string
	err   bool
	queue *events.QueueSettings
	run   *events.RunSettings
}{
	{name: "plain text", text: "hello", ok: false},
	{name: "empty", text: "", ok: false},
	{name: "slash alone", text: "/", ok: false},
	{name: "unknown command goes to the model", text: "/foo bar", ok: false},
	{name: "a path is no command", text: "/etc/hosts what is in it", ok: false},
	{name: "a name followed by a slash is a word", text: "/new/thing", ok: false},
	{name: "a name followed by punctuation is a word", text: "/status.", ok: false},
	{name: "double slash", text: "//new", ok: false},
	{name: "space after the slash", text: "/ new", ok: false},
	{name: "command later in the text", text: "hey /status", ok: false},
	{name: "overlong name", text: "/" + strings.Repeat("a", 40), ok: false},
	{name: "new alone", text: "/new", ok: true, want: New},
	{name: "reset alone, leading blanks", text: "  \n/reset", ok: true, want: Reset},
	{name: "name ignores case", text: "/NEW", ok: true, want: New},
	{name: "new with a first message keeps its case and lines", text: "/new Hello There\nsecond line", ok: true, want: New, args: "Hello There\nsecond line"},
	{name: "colon after the name", text: "/think: high", ok: true, want: Think, run: &events.RunSettings{Thinking: "high"}},
	{name: "think alias t", text: "/t LOW", ok: true, want: Think, run: &events.RunSettings{Thinking: "low"}},
	{name: "think shows", text: "/think", ok: true, want: Think},
	{name: "think unknown level", text: "/think hard", ok: true, want: Think, err: true},
	{name: "model set", text: "/model openai/gpt-5", ok: true, want: Model, run: &events.RunSettings{Model: "openai/gpt-5"}},
	{name: "model alias", text: "/models", ok: true, want: Model},
	{name: "model status shows", text: "/model status", ok: true, want: Model},
	{name: "model without provider", text: "/model gpt-5", ok: true, want: Model, err: true},
	{name: "verbose on", text: "/verbose on", ok: true, want: Verbose, run: &events.RunSettings{Verbose: "on"}},
	{name: "verbose full is on", text: "/v full", ok: true, want: Verbose, run: &events.RunSettings{Verbose: "on"}},
	{name: "verbose bad", text: "/verbose loud", ok: true, want: Verbose, err: true},
	{name: "reasoning stream", text: "/reasoning stream", ok: true, want: Reasoning, run: &events.RunSettings{Reasoning: "stream"}},
	{name: "reasoning alias", text: "/reason off", ok: true, want: Reasoning, run: &events.RunSettings{Reasoning: "off"}},
	{name: "reasoning bad", text: "/reasoning maybe", ok: true, want: Reasoning, err: true},
	{name: "queue shows", text: "/queue", ok: true, want: Queue},
	{name: "queue mode and options", text: "/queue collect debounce:2s cap:25 drop:summarize", ok: true, want: Queue,
		queue: &events.QueueSettings{Mode: "collect", DebounceMs: ptr(int64(2000)), Cap: 25, Drop: "summarize"}},
	{name: "queue options with =", text: "/queue debounce=500 cap=3", ok: true, want: Queue,
		queue: &events.QueueSettings{DebounceMs: ptr(int64(500)), Cap: 3}},
	{name: "queue reset", text: "/queue reset", ok: true, want: Queue, queue: &events.QueueSettings{Reset: true}},
	{name: "queue unknown mode", text: "/queue sideways", ok: true, want: Queue, err: true},
	{name: "queue two modes", text: "/queue collect steer", ok: true, want: Queue, err: true},
	{name: "queue bad cap", text: "/queue cap:0", ok: true, want: Queue, err: true},
	{name: "queue bad debounce", text: "/queue debounce:soon", ok: true, want: Queue, err: true},
	{name: "queue debounce over the bound", text: "/queue debounce:2h", ok: true, want: Queue, err: true},
	{name: "queue unknown option", text: "/queue speed:3", ok: true, want: Queue, err: true},
	{name: "stop", text: "/stop", ok: true, want: Stop},
	{name: "status", text: "/Status", ok: true, want: Status},
	{name: "help alias commands", text: "/commands", ok: true, want: Help},
	{name: "compact with focus", text: "/compact keep the decisions", ok: true, want: Compact, args: "keep the decisions"},
	{name: "compact focus too long", text: "/compact " + strings.Repeat("x", MaxArgBytes+1), ok: true, want: Compact, err: true},
	{name: "new remainder is not bounded by MaxArgBytes", text: "/new " + strings.Repeat("x", MaxArgBytes+1), ok: true, want: New, args: strings.Repeat("x", MaxArgBytes+1)},
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, ok := Parse(tc.text)
			if ok != tc.ok {
				t.Fatalf("Parse(%.40q) ok = %v, want %v", tc.text, ok, tc.ok)
			}
			if !ok {
				return
			}
			if c.Name != tc.want {
				t.Errorf("name = %q, want %q", c.Name, tc.want)
			}
			if tc.args != "" && c.Args != tc.args {
				t.Errorf("args = %.40q, want %.40q", c.Args, tc.args)
			}
			if (c.Err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", c.Err, tc.err)
			}
			if c.Err != nil {
				if !errors.As(c.Err, new(*UsageError)) {
					t.Errorf("err %T is not a *UsageError", c.Err)
				}
				if c.IsChange() {
					t.Error("a refused command stores a change")
				}
				return
			}
			if got, want := c.Run, tc.run; (got == nil) != (want == nil) || got != nil && *got != *want {
				t.Errorf("run = %+v, want %+v", got, want)
			}
			if got, want := c.Queue, tc.queue; (got == nil) != (want == nil) || got != nil && !sameQueue(got, want) {
				t.Errorf("queue = %+v, want %+v", got, want)
			}
		})
	}
}

func sameQueue(a, b *events.QueueSettings) bool {
	if (a.DebounceMs == nil) != (b.DebounceMs == nil) || a.DebounceMs != nil && *a.DebounceMs != *b.DebounceMs {
		return false
	}
	return a.Mode == b.Mode && a.Cap == b.Cap && a.Drop == b.Drop && a.Reset == b.Reset
}

func TestReply(t *testing.T) {
	t.Parallel()
	def := Defaults{Model: "anthropic/claude", Thinking: "low"}
	stored := &events.Settings{Run: &events.RunSettings{Model: "openai/gpt-5", Thinking: "high", Verbose: "off"}}
	stored.Mode = "collect"
	cases := []struct {
		text  string
		s     *events.Settings
		want  string
		agent bool // the defaults are the session's agent's
	}{
		{"/model", nil, "Model: anthropic/claude (the worker's default).", false},
		{"/model openai/gpt-5", stored, "Model set to openai/gpt-5.", false},
		{"/model", stored, "Model is openai/gpt-5.", false},
		{"/think", nil, "Thinking level: low (the worker's default).", false},
		{"/model", nil, "Model: anthropic/claude (the agent's default).", true},
		{"/think", nil, "Thinking level: low (the agent's default).", true},
		{"/think high", stored, "Thinking level set to high.", false},
		{"/verbose", stored, "Verbose is off.", false},
		{"/reasoning", nil, "Reasoning is stream.", false},
		{"/queue", stored, "Queue settings are mode collect.", false},
		{"/queue", nil, "Queue settings are defaults.", false},
		{"/think hard", nil, `/think: unknown thinking level "hard" (usage: /think [off|minimal|low|medium|high|xhigh])`, false},
	}
	for _, tc := range cases {
		c, ok := Parse(tc.text)
		if !ok {
			t.Fatalf("%q is no command", tc.text)
		}
		d := def
		d.AgentModel, d.AgentThinking = tc.agent, tc.agent
		if got := c.Reply(tc.s, d); got != tc.want {
			t.Errorf("%q: reply %q, want %q", tc.text, got, tc.want)
		}
	}
}

func TestHelpNamesEveryCommand(t *testing.T) {
	t.Parallel()
	h := HelpText()
	for _, n := range names {
		if !strings.Contains(h, "/"+string(n)) {
			t.Errorf("/help does not name /%s", n)
		}
	}
}

func TestStatusText(t *testing.T) {
	t.Parallel()
	s := &events.Settings{Run: &events.RunSettings{AuthProfile: "openai:work"}}
	s.Mode, s.Cap = "collect", 5
	got := StatusText(StatusInfo{Settings: s, Defaults: Defaults{Model: "scripted/echo"}, AuthProfile: "openai:other",
		Entries: 4, ContextTokens: 500, ContextWindow: 1000,
		State: events.SessionState{Turns: 3, Usage: &events.UsageMeta{Total: 1234, Cost: &events.CostMeta{Total: 0.5}}}})
	for _, want := range []string{"Model: scripted/echo (default)", "Auth profile: openai:work (pinned)",
		"Context: ~500 of 1000 tokens (50%), 4 entries", "Running cost: $0.5000 over 3 turns (1234 tokens)", "Queue: mode collect, cap 5"} {
		if !strings.Contains(got, want) {
			t.Errorf("status lacks %q:\n%s", want, got)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, tc := range parseCases {
		f.Add(tc.text)
	}
	f.Fuzz(func(t *testing.T, text string) {
		c, ok := Parse(text)
		if !ok {
			return
		}
		s := strings.TrimLeft(text, " \t\r\n")
		if s[0] != '/' {
			t.Fatalf("%q parsed as a command without a leading slash", text)
		}
		if _, known := usage[c.Name]; !known {
			t.Fatalf("unknown name %q", c.Name)
		}
		if c.Name != New && c.Name != Reset && len(c.Args) > MaxArgBytes {
			t.Fatalf("args of %d bytes", len(c.Args))
		}
		if c.IsChange() {
			if c.Run != nil {
				if err := c.Run.Validate(); err != nil {
					t.Fatalf("a stored run change does not validate: %v", err)
				}
			}
			if c.Queue != nil {
				if err := c.Queue.Validate(); err != nil {
					t.Fatalf("a stored queue change does not validate: %v", err)
				}
			}
		}
		if utf8.ValidString(text) && !utf8.ValidString(c.Reply(nil, Defaults{})) {
			t.Fatal("reply is not UTF-8")
		}
	})
}
