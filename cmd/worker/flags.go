package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/lanefleet/lanefleet/gateway"
	"github.com/lanefleet/lanefleet/gateway/openai"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/hooks"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/retention"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/tools"
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

// workerFlags are the worker's flags that are not fields of fleet.Config
// as given: lists, choices, files and the HTTP gateway's options, turned
// into the configuration after parsing.
type workerFlags struct {
	sync, logFormat, logLevel                         string
	allowModels, fallbacks, allowPins                 string
	toolsAllow, toolsDeny, toolsApprove, execApproval string
	webAllow, remoteTools, mcpConfig                  string
	hookNames, hookFailure                            string
	rateLimits, tenantWeights                         []string
	memLimit, skillsConfig, systemPromptFile          string
	httpOpts                                          gateway.Options
	httpAliases                                       []string
}

// defineServer declares the flags of the server connection: the embedded
// server's, the one to join, its credentials and TLS, and logging.
func (f *workerFlags) defineServer(fs *pflag.FlagSet, cfg *fleet.Config, env func(string) string) {
	fs.StringVar(&f.sync, "sync", "always", "embedded server fsync: always (every write is on disk before it is acknowledged) or default (NATS's 2-minute interval)")
	fs.StringVar(&f.logFormat, "log-format", "auto", "log format: json, console, or auto (console on a terminal)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&cfg.NATSURL, "nats-url", "", "NATS server URLs to join (env NATS_URL); empty starts an embedded server")
	fs.StringVar(&cfg.CredsFile, "creds", env("NATS_CREDS"), "NATS credentials file (env NATS_CREDS)")
	fs.StringVar(&cfg.NKeyFile, "nkey", env("NATS_NKEY"), "NATS NKey seed file (env NATS_NKEY)")
	fs.StringVar(&cfg.User, "nats-user", env("NATS_USER"), "NATS user name (env NATS_USER)")
	fs.StringVar(&cfg.Password, "nats-password", "", "NATS password (env NATS_PASSWORD; prefer the variable: arguments are visible to other local users)")
	fs.StringVar(&cfg.InboxPrefix, "inbox-prefix", env("NATS_INBOX_PREFIX"), "inbox prefix the worker's permissions allow (env NATS_INBOX_PREFIX; default _INBOX_<nats-user> with --nats-user, else _INBOX)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", env("NATS_TLS_CERT"), "client TLS certificate (env NATS_TLS_CERT)")
	fs.StringVar(&cfg.TLSKey, "tls-key", env("NATS_TLS_KEY"), "client TLS key (env NATS_TLS_KEY)")
	fs.StringVar(&cfg.TLSCA, "tls-ca", env("NATS_TLS_CA"), "CA bundle for the server certificate (env NATS_TLS_CA)")
	fs.StringVar(&cfg.ServerConfig, "server-config", env("LANEFLEET_SERVER_CONFIG"), "embedded server: a nats-server configuration file (users, permissions, accounts, TLS, monitoring; env LANEFLEET_SERVER_CONFIG); --data-dir and --listen fill in what it leaves unset")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "the worker's data directory: the embedded server's JetStream store (<data-dir>/jetstream), and the default home of --workspace-root and --agent-cache-dir (default ./lanefleet-data; with --server-config, the file's store_dir unless given; a worker joining another server has none: give --workspace-root to keep its workspaces)")
	fs.StringVar(&cfg.Listen, "listen", "", "embedded server: client address for publishers and other workers (default 127.0.0.1:4222, or the server config's)")
	fs.BoolVar(&cfg.InsecureListen, "insecure-listen", false, "embedded server: allow a non-loopback --listen without authentication (anyone who reaches it reads and writes every session)")
}

// defineLanes declares the lanes' scheduling and lease flags.
func defineLanes(fs *pflag.FlagSet, cfg *fleet.Config) {
	fs.StringVar(&cfg.WorkerID, "id", "", "worker id in logs, leases and events (default random)")
	fs.IntVar(&cfg.Replicas, "replicas", 1, "stream and bucket replicas (3 on a cluster)")
	fs.IntVar(&cfg.Concurrency, "concurrency", lanes.DefaultConcurrency, "lanes this worker runs at once (the global lane): each is a model call in flight, ~85 KB of memory beside its transcript and payload")
	fs.Int64Var(&cfg.MaxInflightBytes, "max-inflight-bytes", lanes.DefaultMaxInflightBytes, "payload bytes the lanes running at once may hold (a turn in flight holds ~5 copies of its payload): a lane whose message does not fit waits for a slot; -1 = no bound")
	fs.IntVar(&cfg.LaneTurnBudget, "lane-turn-budget", lanes.DefaultLaneTurnBudget, "while other lanes wait for a slot, the turns a lane runs before it yields its slot to the one that has waited longest (-1 = never: a lane keeps its slot while it has messages)")
	fs.IntVar(&cfg.SetupConcurrency, "setup-concurrency", 0, "how many lanes set up a turn at once (lease, reads, start event), in arrival order, so a burst of sessions gets its first model calls out early; 0 = four per core, -1 = no bound")
	fs.DurationVar(&cfg.Linger, "linger", lanes.DefaultLinger, "how long a lane's owner keeps an empty lane after a turn, waiting for the session's next message (saves releasing and re-taking it; never while its slot would go to a lane waiting for one; -1ms = off)")
	fs.DurationVar(&cfg.LaneTimeBudget, "lane-time-budget", 0, "while other lanes wait for a slot, also yield at the first turn boundary after a lane has held its slot this long (0 = turns only)")
	fs.DurationVar(&cfg.AckWait, "ack-wait", 30*time.Second, "dispatch AckWait: how long a dead worker's lanes wait before another takes them")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", 30*time.Second, "lane lease TTL (renewed every third of it)")
	fs.DurationVar(&cfg.LivenessEvery, "liveness-every", kvstore.DefaultLivenessEvery, "how often this worker beats in the workers bucket: a worker whose beat is late by half of it and whose connection is gone is declared dead, and the others take its lanes over at once instead of after --ack-wait (-1ms = off)")
	fs.DurationVar(&cfg.LivenessTTL, "liveness-ttl", kvstore.DefaultLivenessTTL, "how long a worker that keeps its connection but stops beating (paused, starved) lives on before the others take its lanes over (at least 1s)")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", 10*time.Second, "on stop, how long running turns may finish before they are cancelled and handed over")
	fs.IntVar(&cfg.MaxPayload, "max-payload", 4<<20, "largest inbound payload in bytes")
}

// defineLimits declares the byte limits of the streams and buckets and
// the retention flags.
func defineLimits(fs *pflag.FlagSet, cfg *fleet.Config) {
	// Byte limits: the defaults fit a single node's 8 GiB store; every
	// worker of a fleet must use the same.
	fs.Var((*byteSize)(&cfg.Limits.Inbound), "max-inbound-bytes", "byte limit of unprocessed inbound messages (stream AGENT_IN; when full, new messages are refused; default 1G, -1 = none)")
	fs.Var((*byteSize)(&cfg.Limits.Events), "max-event-bytes", "byte limit of run events (stream AGENT_EV; when full, the oldest are dropped; default 1G)")
	fs.Var((*byteSize)(&cfg.Limits.Dead), "max-dead-bytes", "byte limit of dead letters (stream AGENT_DLQ; when full, new ones are refused; default 256M)")
	fs.Var((*byteSize)(&cfg.Limits.Lanes), "max-lanes-bytes", "byte limit of transcripts, leases and cursors (bucket lanes; when full, turns cannot commit; default 4G)")
	fs.Var((*byteSize)(&cfg.Limits.Steps), "max-steps-bytes", "byte limit of the runs' step journals (stream AGENT_STEPS; when full, the oldest steps are dropped; default 512M)")
	fs.Var((*byteSize)(&cfg.Limits.Auth), "max-auth-bytes", "byte limit of auth-profile state (bucket auth; default 64M)")
	fs.Var((*byteSize)(&cfg.Limits.Budgets), "max-budgets-bytes", "byte limit of tenant and session budgets (bucket budgets; default 64M)")
	fs.Var((*byteSize)(&cfg.Limits.Schedules), "max-schedules-bytes", "byte limit of the schedules (bucket schedules; default 64M)")
	fs.Var((*byteSize)(&cfg.Limits.Agents), "max-agents-bytes", "byte limit of the named agents' definitions (bucket agents; default 16M)")
	fs.Var((*byteSize)(&cfg.Limits.AgentFiles), "max-agent-files-bytes", "byte limit of the agents' workspace files (object store agent-files; default 64M)")
	fs.Var((*byteSize)(&cfg.Limits.Sessions), "max-sessions-bytes", "byte limit of the session index the listings page through (stream AGENT_SESSIONS, one entry of about 100 bytes per session; when full, the entries of the sessions idle the longest are dropped; default a sixteenth of --max-lanes-bytes, 256M; -1 = none)")
	fs.Var((*byteSize)(&cfg.Limits.Runs), "max-runs-bytes", "byte limit of the active-run registry (bucket runs, in memory; default 64M)")
	fs.Int64Var(&cfg.Limits.LaneMessages, "lane-max-messages", 0, "messages one session's lane may hold in AGENT_IN (waiting, running, or answered and not yet deleted); at the limit its sender's next message is refused, nobody else's (default 1000, -1 = none)")
	fs.Var((*byteSize)(&cfg.Limits.LaneBytes), "lane-max-bytes", "bytes one session's lane may hold in AGENT_IN, kept as messages of the largest size (--max-payload + 64K): at most this / that many (default an eighth of --max-inbound-bytes, -1 = none)")
	// Retention (package retention): the same on every worker.
	fs.IntVar(&cfg.RetentionRate, "retention-rate", retention.DefaultRate, "with --session-ttl: the most idle sessions the fleet's retention pass forgets a second (one worker runs it at a time, four sessions at a time, working at most half the time); it logs a warning while it falls more than a minute behind")
	fs.DurationVar(&cfg.SessionTTL, "session-ttl", 0, "forget a session untouched this long: its transcript and stored settings are removed (never while it is running or a message waits), and it starts over if it speaks again; 0 = keep sessions forever")
	fs.DurationVar(&cfg.EventMaxAge, "event-max-age", 24*time.Hour, "how long run events stay replayable (stream AGENT_EV: two subjects per run stay in its index this long)")
}

// defineModels declares the models, their fallbacks and auth, and the
// tool policy.
func (f *workerFlags) defineModels(fs *pflag.FlagSet, cfg *fleet.Config, env func(string) string) {
	fs.StringVar(&cfg.DefaultModel, "model", env("LANEFLEET_MODEL"), "default model provider/model-id (env LANEFLEET_MODEL; default by the API keys present, scripted/echo with --scripted)")
	fs.StringVar(&cfg.ModelsFile, "models-file", env("LANEFLEET_MODELS_FILE"), "user models file (JSON) adding to or overriding the built-in catalog (env LANEFLEET_MODELS_FILE)")
	fs.StringVar(&cfg.OpenAICompatible, "openai-compatible", "", "base URL of an OpenAI-compatible server such as llama.cpp's llama-server, vLLM, Ollama or LM Studio (env OPENAI_COMPATIBLE_BASE_URL; http://host:port gets /v1): its models, listed at start from <url>/models, are served as local/<id> over Chat Completions, and the first is the default model")
	fs.StringVar(&cfg.OpenAICompatibleKey, "openai-compatible-key", "", "API key for that server, when it wants one (env OPENAI_COMPATIBLE_API_KEY; prefer the variable: arguments are visible to other local users)")
	fs.DurationVar(&cfg.OpenAICompatibleWait, "openai-compatible-wait", 0, "how long to wait at start while that server does not list its models (starting, loading a model); 0 = fail at once")
	fs.BoolVar(&cfg.Scripted, "scripted", false, "serve the built-in scripted/* test models (demos and tests only: scripted/script runs the tool calls a message scripts)")
	fs.DurationVar(&cfg.ScriptedDelay, "scripted-delay", 0, "pause before each scripted/echo delta (0 = instant)")
	fs.StringVar(&f.allowModels, "allow-models", env("LANEFLEET_ALLOW_MODELS"), "comma-separated models messages may ask for, provider/model-id or glob patterns such as anthropic/* (env LANEFLEET_ALLOW_MODELS; default: the default model, the fallbacks, the catalog and models file, and scripted/* with --scripted)")
	fs.StringVar(&f.fallbacks, "fallback", env("LANEFLEET_FALLBACKS"), "comma-separated model fallback chain tried after a failover error (env LANEFLEET_FALLBACKS)")
	fs.StringVar(&cfg.AuthProfiles, "auth-profiles", env("LANEFLEET_AUTH_PROFILES"), "auth-profiles.json with API keys and tokens to rotate through (env LANEFLEET_AUTH_PROFILES); keys in the environment are profiles too")
	fs.BoolVar(&cfg.SecretExec, "secret-exec", false, "run the exec secret providers --auth-profiles declares (\"secrets\": {\"providers\": …}: a program by absolute path, no shell, only the environment variables it lists, bounded in time and output) for its profiles' exec:PROVIDER:ID references, at start and every refreshMs; without it such a reference stops the worker at start")
	fs.StringVar(&f.allowPins, "allow-auth-pins", env("LANEFLEET_ALLOW_AUTH_PINS"), "comma-separated auth profiles a message or a session's settings may pin its turns to, ids or glob patterns such as acme:* (env LANEFLEET_ALLOW_AUTH_PINS; default none: turns rotate through the profiles); a disabled profile is never pinned")
	fs.DurationVar(&cfg.AttemptTimeout, "timeout", 10*time.Minute, "how long one attempt of a run may take before it is aborted (and the next auth profile tried)")
	fs.StringVar(&f.toolsAllow, "tools-allow", env("LANEFLEET_TOOLS_ALLOW"), "comma-separated tools runs may use, case-insensitive globs (env LANEFLEET_TOOLS_ALLOW; default all offered); client tools are not affected")
	fs.StringVar(&f.toolsDeny, "tools-deny", env("LANEFLEET_TOOLS_DENY"), "comma-separated tools runs may not use, globs; deny wins over allow (env LANEFLEET_TOOLS_DENY)")
	fs.StringVar(&f.toolsApprove, "tools-approve", env("LANEFLEET_TOOLS_APPROVE"), "comma-separated tools whose every call waits for the client's approval: the run ends with the call pending until a tool result \"approve\" (anything else refuses it) (env LANEFLEET_TOOLS_APPROVE)")
	fs.StringVar(&f.execApproval, "exec-approval", "off", "ask: every exec call waits for the client's approval (as --tools-approve exec); off: exec runs at once")
	fs.IntVar(&cfg.MaxToolIterations, "max-tool-iterations", runner.MaxToolIterationsDefault, "most model calls one turn's tool loop makes before it stops with a tool-loop-limit reply (a run's own setting may lower it)")
	fs.IntVar(&cfg.MaxToolRepeats, "max-tool-repeats", guard.ToolRepeatsDefault, "stop a turn with a tool_loop reply once its model made the same tool call (same arguments) and got the same error this many times (a run's own setting may lower it)")
}

// defineTools declares the tools runs are offered: built-in, exec,
// process, memory, sessions, web, remote and MCP, and the hooks.
func (f *workerFlags) defineTools(fs *pflag.FlagSet, cfg *fleet.Config, env func(string) string) {
	fs.BoolVar(&cfg.NoChatCommands, "no-chat-commands", false, "do not answer chat commands (/new, /reset, /compact, /model, /think, /verbose, /reasoning, /queue, /stop, /status, /help): messages that are one go to the model as they are")
	fs.BoolVar(&cfg.NoStepJournal, "no-step-journal", false, "do not journal a turn's steps: a turn re-run after its worker died repeats every model and tool call it had made (saves one synchronous write per tool-calling reply and per tool result)")
	fs.StringVar(&cfg.WorkspaceRoot, "workspace-root", env("LANEFLEET_WORKSPACES"), "directory holding each session's workspace for the read/write/edit/apply_patch/exec tools (default <data-dir>/workspaces, else a temp directory)")
	fs.BoolVar(&cfg.NoBuiltinTools, "no-builtin-tools", false, "offer no read/write/edit/apply_patch/exec tools (the web tools are separate: --web-fetch, --web-search)")
	fs.BoolVar(&cfg.Exec, "exec", false, "offer the exec tool: a shell in the session's workspace, confined (Landlock, namespaces, seccomp, a cgroup per command; as uid 65534 when the worker is root); refuses to start where it cannot be confined")
	fs.BoolVar(&cfg.ExecUnconfined, "exec-unconfined", false, "FOR TESTS ONLY, with --exec: run its commands unconfined, with the worker's privileges, seeing all it sees")
	fs.BoolVar(&cfg.ExecAllowRoot, "exec-allow-root", false, "with --exec, for a worker running as root where commands cannot run as uid 65534 (no user namespaces, workspaces on a filesystem without idmapped mounts): run them as root, without capabilities, still confined")
	fs.StringVar(&cfg.ExecCgroup, "exec-cgroup", env("LANEFLEET_EXEC_CGROUP"), "with --exec: a cgroup v2 directory delegated to the worker (no processes in it) where each command gets its cgroup (env LANEFLEET_EXEC_CGROUP; default: found where memory, pids and cpu are delegated, else cgroup v1)")
	fs.Var((*byteSize)(&cfg.WorkspaceMaxBytes), "workspace-max-bytes", "with --exec: size of the workspaces' filesystem, a loop-mounted ext4 image on --workspace-root (needs root; default 4G; -1 = no bound, which the worker refuses on the JetStream store's filesystem unless given)")
	fs.BoolVar(&cfg.Process, "process", false, "with --exec: offer the process tool, background commands in exec's sandbox (start, list, poll, log, write, kill, remove); a session's processes live on the worker that started them and end at their timeout (30m, at most 2h), the session's /new or /reset, its forget, or the worker's stop")
	fs.IntVar(&cfg.ProcessesPerSession, "processes-per-session", 0, "with --process: background processes one session may run at once on a worker (default 4; 64 for all sessions together)")
	fs.BoolVar(&cfg.MemoryTools, "memory-tools", false, "offer memory_search and memory_get over each workspace's MEMORY.md and memory/**/*.md (BM25 keyword ranking, no embeddings); they read the workspace only")
	fs.BoolVar(&cfg.NoMemoryFlush, "no-memory-flush", false, "with --memory-tools: no memory flush before a threshold compaction (by default the model first gets one silent turn, at most 4 model calls, to write durable memories to MEMORY.md or memory/YYYY-MM-DD.md with the write tool; its prompt, replies and calls stay out of the transcript and the reply; once per compaction cycle, journaled like the turn's steps)")
	fs.IntVar(&cfg.SubagentMaxDepth, "subagent-max-depth", 0, "with --session-tools: how deep sessions_spawn's sub-agents nest (default 2: a sub-agent's sub-agent spawns none)")
	fs.IntVar(&cfg.SubagentMaxChildren, "subagent-max-children", 0, "with --session-tools: sub-agents one run may spawn (default 5)")
	fs.StringVar(&cfg.SessionTools, "session-tools", env("LANEFLEET_SESSION_TOOLS"), "offer sessions_list, sessions_history, sessions_send, sessions_spawn and sessions_yield, reaching the sessions of the caller's tenant (tenant) or of its tenant and agent (agent), never another tenant's; a session without a tenant reaches only itself (env LANEFLEET_SESSION_TOOLS; default none)")
	fs.BoolVar(&cfg.WebFetch, "web-fetch", false, "offer the web_fetch tool: an HTTP(S) GET whose page comes back as markdown or text; reaches public addresses only (no loopback, private, link-local or cloud metadata address, checked on every connection and redirect) unless --web-allow names more; never through a proxy from the environment")
	fs.StringVar(&f.webAllow, "web-allow", env("LANEFLEET_WEB_ALLOW"), "with --web-fetch: comma-separated address ranges (10.1.0.0/16, 192.168.1.5) and host names (wiki.internal, *.corp.example) web_fetch may reach although the SSRF guard refuses them (env LANEFLEET_WEB_ALLOW)")
	fs.StringVar(&cfg.WebSearch, "web-search", env("LANEFLEET_WEB_SEARCH"), "offer the web_search tool through a search provider: brave (the Brave Search API, key from BRAVE_API_KEY or an api_key profile of provider \"brave\" in --auth-profiles) or searxng (the instance at --web-search-url, JSON format on) (env LANEFLEET_WEB_SEARCH; default none)")
	fs.StringVar(&cfg.WebSearchURL, "web-search-url", env("LANEFLEET_WEB_SEARCH_URL"), "with --web-search: the SearXNG instance's URL, or another Brave endpoint (env LANEFLEET_WEB_SEARCH_URL)")
	fs.StringVar(&f.remoteTools, "remote-tools", env("LANEFLEET_REMOTE_TOOLS"), "comma-separated names of the tools served over NATS (micro service lanefleet-tools) that runs may use, or globs of them such as github__* (an MCP bridge's tools of server github) (env LANEFLEET_REMOTE_TOOLS); nothing discovered is used unless listed")
	fs.StringVar(&f.mcpConfig, "mcp", env("LANEFLEET_MCP_CONFIG"), "serve the tools of the MCP servers in this JSON file (the mcpServers format of MCP clients) as remote tools <server>__<tool>, in this process, as worker mcp-bridge does in its own (env LANEFLEET_MCP_CONFIG); runs use them once --remote-tools allows them, e.g. github__*")
	fs.StringVar(&f.hookNames, "hooks", env("LANEFLEET_HOOKS"), "comma-separated names of the run hooks served over NATS (micro service lanefleet-hooks: before_agent_start, before_tool_call, agent_end) that runs call, in this order (env LANEFLEET_HOOKS); nothing discovered is used unless listed")
	fs.DurationVar(&cfg.Hooks.Timeout, "hooks-timeout", hooks.TimeoutDefault, "how long a run waits for one hook (at most 1m); a hook that does not answer in time only warns, except as --hooks-tool-failure says")
	fs.StringVar(&f.hookFailure, "hooks-tool-failure", "closed", "a before_tool_call hook that cannot decide (unreachable, timed out, failed): closed blocks the call and tells the model, open lets it run unchecked with a warning")
}

// defineFleet declares the fleet-wide features: compaction, tenants,
// schedules, agents, governance, replies, memory, metrics, skills and the
// system prompt.
func (f *workerFlags) defineFleet(fs *pflag.FlagSet, cfg *fleet.Config, env func(string) string) {
	fs.BoolVar(&cfg.NoCompaction, "no-compaction", false, "no compaction when the context nears the window (overflow recovery still compacts)")
	fs.StringVar(&cfg.TenantSeparator, "tenant-separator", "", `a session's tenant is its key's prefix up to this (default ":"; "acme:support:42" is tenant acme's)`)
	fs.BoolVar(&cfg.NoSchedules, "no-schedules", false, "this worker fires no schedules and opens no schedules bucket (the fleet's schedules fire while any worker runs without it)")
	fs.StringVar(&cfg.DefaultAgent, "default-agent", env("LANEFLEET_DEFAULT_AGENT"), `the agent of a session whose key names none ("agent:<id>:…" names one); when it is not defined (publisher agents put), such sessions run as this worker is configured (default "main", env LANEFLEET_DEFAULT_AGENT)`)
	fs.BoolVar(&cfg.NoAgents, "no-agents", false, "turn named agents off: no agents bucket, no agent-files object store; every session runs as this worker is configured (every worker of a fleet should agree)")
	fs.StringVar(&cfg.AgentCacheDir, "agent-cache-dir", "", "directory of this worker's copies of the agents' workspace files (default <data-dir>/agent-files, else a temporary directory)")
	fs.StringArrayVar(&f.tenantWeights, "tenant-weight", nil, "TENANT=N: the tenant's weight in this worker's slots while lanes wait for one (a freed slot goes to the waiting tenant with the fewest slots in use for its weight; default 1 each, so a tenant with hundreds of waiting sessions cannot starve a quiet one); repeatable")
	fs.StringArrayVar(&f.rateLimits, "rate-limit", nil, `PATTERN=rpm:N,tpm:N: a provider rate limit the whole fleet shares ("openai/*=rpm:500,tpm:200000"; PATTERN is PROVIDER/MODEL or profile:AUTH-PROFILE, '*' any run of characters); a call that would pass it waits, with a waiting event, instead of collecting a 429; repeatable, every worker should give the same`)
	fs.BoolVar(&cfg.NoBudgets, "no-budgets", false, "turn tenant governance off: no budgets bucket, no admission before model calls (every worker of a fleet should agree)")
	fs.BoolVar(&cfg.BlockReplies, "block-replies", false, "also publish the reply in blocks (block events of 800–1,200 characters, as OpenClaw's block streaming); off by default, as in OpenClaw")
	fs.Bool("no-block-replies", true, "no block reply events: the default now; accepted for old scripts")
	fs.StringVar(&f.memLimit, "memory-limit", env("LANEFLEET_MEMORY_LIMIT"), "soft memory limit of the worker process, the Go runtime's (env LANEFLEET_MEMORY_LIMIT): "+memoryLimitHelp+"; the default is GOMEMLIMIT when set, else 90% of the cgroup memory limit when there is one, else 50% of the machine's memory (MemTotal)")
	fs.StringVar(&cfg.MetricsListen, "metrics", env("LANEFLEET_METRICS"), "serve Prometheus /metrics, /healthz and /readyz on this host:port, e.g. 127.0.0.1:9464 (env LANEFLEET_METRICS; default none)")
	fs.StringVar(&cfg.NATSMonitor, "nats-monitor", "", "embedded server: serve its monitoring endpoints (/varz, /jsz, /connz, /healthz) on this host:port, e.g. 127.0.0.1:8222 (no authentication: loopback unless --insecure-listen)")
	fs.StringVar(&cfg.SkillsDir, "skills-dir", env("LANEFLEET_SKILLS_DIR"), "directory of skills (<name>/SKILL.md) offered to every session, besides each workspace's skills/ (env LANEFLEET_SKILLS_DIR)")
	fs.StringVar(&f.skillsConfig, "skills-config", env("LANEFLEET_SKILLS_CONFIG"), `JSON file configuring skills by name: {"<skill>": {"enabled": false, "env": {"VAR": "value"}, "apiKey": "…"}} (env LANEFLEET_SKILLS_CONFIG)`)
	fs.StringVar(&f.systemPromptFile, "system-prompt-file", env("LANEFLEET_SYSTEM_PROMPT_FILE"), "file holding the system prompt (env LANEFLEET_SYSTEM_PROMPT_FILE)")
}

// defineHTTP declares the HTTP gateway's flags.
func (f *workerFlags) defineHTTP(fs *pflag.FlagSet, env func(string) string) {
	fs.StringVar(&f.httpOpts.Addr, "http", env("LANEFLEET_HTTP"), "serve the HTTP gateway (session API, OpenAI-compatible routes) on this host:port, e.g. 127.0.0.1:8080, through the worker's own connection (env LANEFLEET_HTTP; default none); a non-loopback address needs --http-tokens")
	fs.StringVar(&f.httpOpts.TokensFile, "http-tokens", env("LANEFLEET_HTTP_TOKENS"), "with --http: token file of the HTTP gateway's bearer tokens (env LANEFLEET_HTTP_TOKENS; default none: loopback clients only, unauthenticated)")
	fs.StringVar(&f.httpOpts.TLSCert, "http-tls-cert", "", "with --http: serve HTTPS with this certificate (PEM)")
	fs.StringVar(&f.httpOpts.TLSKey, "http-tls-key", "", "with --http: the certificate's private key (PEM)")
	fs.StringVar(&f.httpOpts.CORSOrigins, "http-cors-origins", "", "with --http: comma-separated origins browsers may call from (default none: CORS off)")
	fs.StringArrayVar(&f.httpAliases, "http-model-alias", nil, "with --http: NAME=REF, a model name the OpenAI-compatible routes take for the fleet model REF (NAME= the default model); repeatable")
}

// fromEnv fills in the secrets from the environment after parsing, so -h
// never prints one as a default: URLs too, which may carry a user's
// password (nats://user:pass@host).
func fromEnv(fs *pflag.FlagSet, cfg *fleet.Config, env func(string) string) {
	if !fs.Changed("nats-url") {
		cfg.NATSURL = env("NATS_URL")
	}
	if !fs.Changed("openai-compatible") {
		cfg.OpenAICompatible = env("OPENAI_COMPATIBLE_BASE_URL")
	}
	if !fs.Changed("nats-password") {
		cfg.Password = env("NATS_PASSWORD")
	}
	if !fs.Changed("openai-compatible-key") {
		cfg.OpenAICompatibleKey = env("OPENAI_COMPATIBLE_API_KEY")
	}
}

// checkServer checks the server flags and the ranges, and sets the data
// directory and the fsync mode; it returns the parsed --memory-limit.
func (f *workerFlags) checkServer(fs *pflag.FlagSet, cfg *fleet.Config) (memoryLimit, error) {
	if err := checkJoin(fs, cfg.NATSURL); err != nil {
		return memoryLimit{}, err
	}
	if err := checkRanges(fs); err != nil {
		return memoryLimit{}, err
	}
	memory, err := parseMemoryLimit(f.memLimit)
	if err != nil {
		return memoryLimit{}, usageError{err}
	}
	if cfg.ServerConfig != "" {
		if cfg.NATSURL != "" {
			return memoryLimit{}, usageError{errors.New("--server-config configures the embedded server, but NATS_URL/--nats-url joins another one: give one of them")}
		}
		if fs.Changed("sync") {
			return memoryLimit{}, usageError{errors.New("--sync with --server-config: set jetstream { sync_interval } in the configuration file instead")}
		}
	}
	cfg.DataDir = dataDir(cfg.DataDir, cfg.NATSURL, cfg.ServerConfig)
	switch f.sync {
	case "always":
		cfg.SyncAlways = true
	case "default":
	default:
		return memoryLimit{}, usageError{fmt.Errorf("--sync must be always or default, not %q", f.sync)}
	}
	return memory, nil
}

// lists sets the comma-separated model and remote-tool lists.
func (f *workerFlags) lists(cfg *fleet.Config) {
	cfg.Fallbacks = splitList(f.fallbacks)
	cfg.AllowModels = splitList(f.allowModels)
	cfg.AllowAuthPins = splitList(f.allowPins)
	cfg.RemoteTools = splitList(f.remoteTools)
}

// toolRules sets the web, hook and tool policies and refuses the tool
// flags' values out of range.
func (f *workerFlags) toolRules(cfg *fleet.Config) error {
	cfg.WebAllow = splitList(f.webAllow)
	cfg.Hooks.Names = splitList(f.hookNames)
	mode, err := hooks.ParseFailMode(f.hookFailure)
	if err != nil {
		return usageError{fmt.Errorf("--hooks-tool-failure: %w", err)}
	}
	cfg.Hooks.ToolFailure = mode
	cfg.ToolPolicy = tools.Policy{Allow: splitList(f.toolsAllow), Deny: splitList(f.toolsDeny), Approve: splitList(f.toolsApprove)}
	switch cfg.SessionTools {
	case "":
	case "tenant", "agent":
		cfg.SessionSender = clientSender
	default:
		return usageError{fmt.Errorf("--session-tools must be tenant or agent, not %q", cfg.SessionTools)}
	}
	if cfg.SubagentMaxDepth < 0 || cfg.SubagentMaxChildren < 0 {
		return usageError{errors.New("--subagent-max-depth and --subagent-max-children must be 0 (the default) or more")}
	}
	if cfg.ProcessesPerSession < 0 {
		return usageError{fmt.Errorf("--processes-per-session must be 0 (the default) or more, not %d", cfg.ProcessesPerSession)}
	}
	switch f.execApproval {
	case "ask":
		cfg.ToolPolicy.Approve = append(cfg.ToolPolicy.Approve, "exec")
	case "off":
	default:
		return usageError{fmt.Errorf("--exec-approval must be ask or off, not %q", f.execApproval)}
	}
	return nil
}

// readFiles reads --skills-config and --system-prompt-file.
func (f *workerFlags) readFiles(cfg *fleet.Config) error {
	if f.skillsConfig != "" {
		b, err := os.ReadFile(f.skillsConfig)
		if err != nil {
			return fmt.Errorf("--skills-config: %w", err)
		}
		if err := json.Unmarshal(b, &cfg.Skills); err != nil {
			return fmt.Errorf("--skills-config %s: %w", f.skillsConfig, err)
		}
	}
	if f.systemPromptFile != "" {
		b, err := os.ReadFile(f.systemPromptFile)
		if err != nil {
			return fmt.Errorf("--system-prompt-file: %w", err)
		}
		cfg.SystemPrompt = string(b)
	}
	return nil
}

// logging makes the logger and sets the process's soft memory limit,
// logging where it comes from.
func (f *workerFlags) logging(stderr io.Writer, memory memoryLimit, env func(string) string) (zerolog.Logger, error) {
	log, err := newLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		return zerolog.Logger{}, usageError{err}
	}
	limit, why, err := memory.resolve(env("GOMEMLIMIT"), hostMemory)
	if err != nil {
		return zerolog.Logger{}, usageError{err}
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	memLog := log.Info().Str("from", why)
	if cur := debug.SetMemoryLimit(-1); cur != math.MaxInt64 {
		memLog = memLog.Int64("memory_limit_bytes", cur)
	}
	memLog.Msg("soft memory limit")
	return log, nil
}

// governance parses the rate limits and tenant weights, and the HTTP
// gateway's model aliases; it refuses an --http the worker cannot serve.
func (f *workerFlags) governance(cfg *fleet.Config) (aliases map[string]string, err error) {
	for _, r := range f.rateLimits {
		rule, err := governance.ParseRateRule(r)
		if err != nil {
			return nil, usageError{fmt.Errorf("--rate-limit: %w", err)}
		}
		cfg.RateLimits = append(cfg.RateLimits, rule)
	}
	if cfg.TenantWeights, err = parseTenantWeights(f.tenantWeights); err != nil {
		return nil, usageError{fmt.Errorf("--tenant-weight: %w", err)}
	}
	aliases, err = openai.ParseAliases(f.httpAliases)
	if err != nil {
		return nil, usageError{fmt.Errorf("--http-model-alias: %w", err)}
	}
	if f.httpOpts.Addr != "" {
		if err := checkHTTP(*cfg, f.httpOpts); err != nil {
			return nil, usageError{err}
		}
	}
	return aliases, nil
}
