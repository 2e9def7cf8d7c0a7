// Command worker runs a Lanefleet fleet member.
//
// Without NATS_URL it starts an embedded JetStream nats-server (file store
// under --data-dir, clients and other workers connect on --listen); with
// NATS_URL it joins that deployment. Add capacity by starting another worker
// with the same NATS_URL.
//
//	worker [flags]
//	worker version [--json]           (also worker --version)
//	worker sanitize --provider P --api A --model M < history.json
//	worker permissions --role worker|sender|viewer|tool-server|admin --user NAME [--session KEY ...] [--tool NAME ...]
//
// -h on any command prints its help and exits 0; a wrong command line
// exits 2, a worker that fails 1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/gateway"
	"github.com/lanefleet/lanefleet/gateway/openai"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/hooks"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/version"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/mcpbridge"
	"github.com/lanefleet/lanefleet/redact"
	"github.com/lanefleet/lanefleet/retention"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/sandbox"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tracing/otlp"
)

func main() {
	sandbox.Main() // exec's confined commands start as this binary, never for a message
	fleet.TuneGC(os.Getenv)
	// Every log line and error goes through the redactor: a NATS password
	// or an API key never reaches the terminal or a log file.
	red := redact.New()
	stderr := red.Writer(os.Stderr)
	err := runWith(red, os.Args[1:], os.Stdin, os.Stdout, stderr, os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, "worker:", err)
	}
	os.Exit(exitCode(err))
}

// Exit codes: 0 done (also -h, --version), 1 the worker failed, 2 the
// command line is wrong.
const (
	exitFailure = 1
	exitUsage   = 2
)

// usageError is a command line that cannot run: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.As(err, new(usageError)):
		return exitUsage
	}
	return exitFailure
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	red := redact.New()
	return runWith(red, args, stdin, stdout, red.Writer(stderr), os.Getenv)
}

// runWith runs the worker command line with the environment read through
// env; red masks stderr and learns the secrets of the configuration.
func runWith(red *redact.Redactor, args []string, stdin io.Reader, stdout, stderr io.Writer, env func(string) string) error {
	root := rootCommand(red, stdin, stdout, stderr, env)
	root.SetArgs(args)
	return root.Execute()
}

// rootCommand is `worker`: it runs a fleet member; its subcommands print
// things and start nothing.
func rootCommand(red *redact.Redactor, stdin io.Reader, stdout, stderr io.Writer, env func(string) string) *cobra.Command {
	var cfg fleet.Config
	root := &cobra.Command{
		Use:   "worker [flags]",
		Short: "Run a Lanefleet fleet member",
		Long: `worker runs a Lanefleet fleet member.

Without NATS_URL it starts an embedded JetStream nats-server (file store under
--data-dir; clients and other workers connect on --listen); with NATS_URL it
joins that deployment. Add capacity by starting another worker with the same
NATS_URL. Tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT (or the _TRACES_ one)
is set: spans go over OTLP/HTTP.`,
		Version:       version.Get().String(),
		Args:          noArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see %s -h)", err, c.CommandPath())}
	})
	fs := root.Flags()
	fs.SortFlags = false
	var (
		sync      = fs.String("sync", "always", "embedded server fsync: always (every write is on disk before it is acknowledged) or default (NATS's 2-minute interval)")
		logFormat = fs.String("log-format", "auto", "log format: json, console, or auto (console on a terminal)")
		logLevel  = fs.String("log-level", "info", "log level: debug, info, warn, error")
	)
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
	fs.StringVar(&cfg.DefaultModel, "model", env("LANEFLEET_MODEL"), "default model provider/model-id (env LANEFLEET_MODEL; default by the API keys present, scripted/echo with --scripted)")
	fs.StringVar(&cfg.ModelsFile, "models-file", env("LANEFLEET_MODELS_FILE"), "user models file (JSON) adding to or overriding the built-in catalog (env LANEFLEET_MODELS_FILE)")
	fs.StringVar(&cfg.OpenAICompatible, "openai-compatible", "", "base URL of an OpenAI-compatible server such as llama.cpp's llama-server, vLLM, Ollama or LM Studio (env OPENAI_COMPATIBLE_BASE_URL; http://host:port gets /v1): its models, listed at start from <url>/models, are served as local/<id> over Chat Completions, and the first is the default model")
	fs.StringVar(&cfg.OpenAICompatibleKey, "openai-compatible-key", "", "API key for that server, when it wants one (env OPENAI_COMPATIBLE_API_KEY; prefer the variable: arguments are visible to other local users)")
	fs.DurationVar(&cfg.OpenAICompatibleWait, "openai-compatible-wait", 0, "how long to wait at start while that server does not list its models (starting, loading a model); 0 = fail at once")
	fs.BoolVar(&cfg.Scripted, "scripted", false, "serve the built-in scripted/* test models (demos and tests only: scripted/script runs the tool calls a message scripts)")
	fs.DurationVar(&cfg.ScriptedDelay, "scripted-delay", 0, "pause before each scripted/echo delta (0 = instant)")
	allowModels := fs.String("allow-models", env("LANEFLEET_ALLOW_MODELS"), "comma-separated models messages may ask for, provider/model-id or glob patterns such as anthropic/* (env LANEFLEET_ALLOW_MODELS; default: the default model, the fallbacks, the catalog and models file, and scripted/* with --scripted)")
	fallbacks := fs.String("fallback", env("LANEFLEET_FALLBACKS"), "comma-separated model fallback chain tried after a failover error (env LANEFLEET_FALLBACKS)")
	fs.StringVar(&cfg.AuthProfiles, "auth-profiles", env("LANEFLEET_AUTH_PROFILES"), "auth-profiles.json with API keys and tokens to rotate through (env LANEFLEET_AUTH_PROFILES); keys in the environment are profiles too")
	fs.BoolVar(&cfg.SecretExec, "secret-exec", false, "run the exec secret providers --auth-profiles declares (\"secrets\": {\"providers\": …}: a program by absolute path, no shell, only the environment variables it lists, bounded in time and output) for its profiles' exec:PROVIDER:ID references, at start and every refreshMs; without it such a reference stops the worker at start")
	allowPins := fs.String("allow-auth-pins", env("LANEFLEET_ALLOW_AUTH_PINS"), "comma-separated auth profiles a message or a session's settings may pin its turns to, ids or glob patterns such as acme:* (env LANEFLEET_ALLOW_AUTH_PINS; default none: turns rotate through the profiles); a disabled profile is never pinned")
	fs.DurationVar(&cfg.AttemptTimeout, "timeout", 10*time.Minute, "how long one attempt of a run may take before it is aborted (and the next auth profile tried)")
	toolsAllow := fs.String("tools-allow", env("LANEFLEET_TOOLS_ALLOW"), "comma-separated tools runs may use, case-insensitive globs (env LANEFLEET_TOOLS_ALLOW; default all offered); client tools are not affected")
	toolsDeny := fs.String("tools-deny", env("LANEFLEET_TOOLS_DENY"), "comma-separated tools runs may not use, globs; deny wins over allow (env LANEFLEET_TOOLS_DENY)")
	toolsApprove := fs.String("tools-approve", env("LANEFLEET_TOOLS_APPROVE"), "comma-separated tools whose every call waits for the client's approval: the run ends with the call pending until a tool result \"approve\" (anything else refuses it) (env LANEFLEET_TOOLS_APPROVE)")
	execApproval := fs.String("exec-approval", "off", "ask: every exec call waits for the client's approval (as --tools-approve exec); off: exec runs at once")
	fs.IntVar(&cfg.MaxToolIterations, "max-tool-iterations", runner.MaxToolIterationsDefault, "most model calls one turn's tool loop makes before it stops with a tool-loop-limit reply (a run's own setting may lower it)")
	fs.IntVar(&cfg.MaxToolRepeats, "max-tool-repeats", guard.ToolRepeatsDefault, "stop a turn with a tool_loop reply once its model made the same tool call (same arguments) and got the same error this many times (a run's own setting may lower it)")
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
	webAllow := fs.String("web-allow", env("LANEFLEET_WEB_ALLOW"), "with --web-fetch: comma-separated address ranges (10.1.0.0/16, 192.168.1.5) and host names (wiki.internal, *.corp.example) web_fetch may reach although the SSRF guard refuses them (env LANEFLEET_WEB_ALLOW)")
	fs.StringVar(&cfg.WebSearch, "web-search", env("LANEFLEET_WEB_SEARCH"), "offer the web_search tool through a search provider: brave (the Brave Search API, key from BRAVE_API_KEY or an api_key profile of provider \"brave\" in --auth-profiles) or searxng (the instance at --web-search-url, JSON format on) (env LANEFLEET_WEB_SEARCH; default none)")
	fs.StringVar(&cfg.WebSearchURL, "web-search-url", env("LANEFLEET_WEB_SEARCH_URL"), "with --web-search: the SearXNG instance's URL, or another Brave endpoint (env LANEFLEET_WEB_SEARCH_URL)")
	remoteTools := fs.String("remote-tools", env("LANEFLEET_REMOTE_TOOLS"), "comma-separated names of the tools served over NATS (micro service lanefleet-tools) that runs may use, or globs of them such as github__* (an MCP bridge's tools of server github) (env LANEFLEET_REMOTE_TOOLS); nothing discovered is used unless listed")
	mcpConfig := fs.String("mcp", env("LANEFLEET_MCP_CONFIG"), "serve the tools of the MCP servers in this JSON file (the mcpServers format of MCP clients) as remote tools <server>__<tool>, in this process, as worker mcp-bridge does in its own (env LANEFLEET_MCP_CONFIG); runs use them once --remote-tools allows them, e.g. github__*")
	hookNames := fs.String("hooks", env("LANEFLEET_HOOKS"), "comma-separated names of the run hooks served over NATS (micro service lanefleet-hooks: before_agent_start, before_tool_call, agent_end) that runs call, in this order (env LANEFLEET_HOOKS); nothing discovered is used unless listed")
	fs.DurationVar(&cfg.Hooks.Timeout, "hooks-timeout", hooks.TimeoutDefault, "how long a run waits for one hook (at most 1m); a hook that does not answer in time only warns, except as --hooks-tool-failure says")
	hookFailure := fs.String("hooks-tool-failure", "closed", "a before_tool_call hook that cannot decide (unreachable, timed out, failed): closed blocks the call and tells the model, open lets it run unchecked with a warning")
	fs.BoolVar(&cfg.NoCompaction, "no-compaction", false, "no compaction when the context nears the window (overflow recovery still compacts)")
	fs.StringVar(&cfg.TenantSeparator, "tenant-separator", "", `a session's tenant is its key's prefix up to this (default ":"; "acme:support:42" is tenant acme's)`)
	fs.BoolVar(&cfg.NoSchedules, "no-schedules", false, "this worker fires no schedules and opens no schedules bucket (the fleet's schedules fire while any worker runs without it)")
	fs.StringVar(&cfg.DefaultAgent, "default-agent", env("LANEFLEET_DEFAULT_AGENT"), `the agent of a session whose key names none ("agent:<id>:…" names one); when it is not defined (publisher agents put), such sessions run as this worker is configured (default "main", env LANEFLEET_DEFAULT_AGENT)`)
	fs.BoolVar(&cfg.NoAgents, "no-agents", false, "turn named agents off: no agents bucket, no agent-files object store; every session runs as this worker is configured (every worker of a fleet should agree)")
	fs.StringVar(&cfg.AgentCacheDir, "agent-cache-dir", "", "directory of this worker's copies of the agents' workspace files (default <data-dir>/agent-files, else a temporary directory)")
	var rateLimits, tenantWeights []string
	fs.StringArrayVar(&tenantWeights, "tenant-weight", nil, "TENANT=N: the tenant's weight in this worker's slots while lanes wait for one (a freed slot goes to the waiting tenant with the fewest slots in use for its weight; default 1 each, so a tenant with hundreds of waiting sessions cannot starve a quiet one); repeatable")
	fs.StringArrayVar(&rateLimits, "rate-limit", nil, `PATTERN=rpm:N,tpm:N: a provider rate limit the whole fleet shares ("openai/*=rpm:500,tpm:200000"; PATTERN is PROVIDER/MODEL or profile:AUTH-PROFILE, '*' any run of characters); a call that would pass it waits, with a waiting event, instead of collecting a 429; repeatable, every worker should give the same`)
	fs.BoolVar(&cfg.NoBudgets, "no-budgets", false, "turn tenant governance off: no budgets bucket, no admission before model calls (every worker of a fleet should agree)")
	fs.BoolVar(&cfg.BlockReplies, "block-replies", false, "also publish the reply in blocks (block events of 800–1,200 characters, as OpenClaw's block streaming); off by default, as in OpenClaw")
	fs.Bool("no-block-replies", true, "no block reply events: the default now; accepted for old scripts")
	memLimit := fs.String("memory-limit", env("LANEFLEET_MEMORY_LIMIT"), "soft memory limit of the worker process, the Go runtime's (env LANEFLEET_MEMORY_LIMIT): "+memoryLimitHelp+"; the default is GOMEMLIMIT when set, else 90% of the cgroup memory limit when there is one, else 50% of the machine's memory (MemTotal)")
	fs.StringVar(&cfg.MetricsListen, "metrics", env("LANEFLEET_METRICS"), "serve Prometheus /metrics, /healthz and /readyz on this host:port, e.g. 127.0.0.1:9464 (env LANEFLEET_METRICS; default none)")
	fs.StringVar(&cfg.NATSMonitor, "nats-monitor", "", "embedded server: serve its monitoring endpoints (/varz, /jsz, /connz, /healthz) on this host:port, e.g. 127.0.0.1:8222 (no authentication: loopback unless --insecure-listen)")
	fs.StringVar(&cfg.SkillsDir, "skills-dir", env("LANEFLEET_SKILLS_DIR"), "directory of skills (<name>/SKILL.md) offered to every session, besides each workspace's skills/ (env LANEFLEET_SKILLS_DIR)")
	skillsConfig := fs.String("skills-config", env("LANEFLEET_SKILLS_CONFIG"), `JSON file configuring skills by name: {"<skill>": {"enabled": false, "env": {"VAR": "value"}, "apiKey": "…"}} (env LANEFLEET_SKILLS_CONFIG)`)
	systemPromptFile := fs.String("system-prompt-file", env("LANEFLEET_SYSTEM_PROMPT_FILE"), "file holding the system prompt (env LANEFLEET_SYSTEM_PROMPT_FILE)")
	var (
		httpOpts    gateway.Options
		httpAliases []string
	)
	fs.StringVar(&httpOpts.Addr, "http", env("LANEFLEET_HTTP"), "serve the HTTP gateway (session API, OpenAI-compatible routes) on this host:port, e.g. 127.0.0.1:8080, through the worker's own connection (env LANEFLEET_HTTP; default none); a non-loopback address needs --http-tokens")
	fs.StringVar(&httpOpts.TokensFile, "http-tokens", env("LANEFLEET_HTTP_TOKENS"), "with --http: token file of the HTTP gateway's bearer tokens (env LANEFLEET_HTTP_TOKENS; default none: loopback clients only, unauthenticated)")
	fs.StringVar(&httpOpts.TLSCert, "http-tls-cert", "", "with --http: serve HTTPS with this certificate (PEM)")
	fs.StringVar(&httpOpts.TLSKey, "http-tls-key", "", "with --http: the certificate's private key (PEM)")
	fs.StringVar(&httpOpts.CORSOrigins, "http-cors-origins", "", "with --http: comma-separated origins browsers may call from (default none: CORS off)")
	fs.StringArrayVar(&httpAliases, "http-model-alias", nil, "with --http: NAME=REF, a model name the OpenAI-compatible routes take for the fleet model REF (NAME= the default model); repeatable")
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		// Secrets come from the environment after parsing, so -h never
		// prints one as a default: URLs too, which may carry a user's
		// password (nats://user:pass@host).
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
		given := func(name string) bool { return fs.Changed(name) }
		if err := checkJoin(fs, cfg.NATSURL); err != nil {
			return err
		}
		if err := checkRanges(fs); err != nil {
			return err
		}
		memory, err := parseMemoryLimit(*memLimit)
		if err != nil {
			return usageError{err}
		}
		if cfg.ServerConfig != "" {
			if cfg.NATSURL != "" {
				return usageError{errors.New("--server-config configures the embedded server, but NATS_URL/--nats-url joins another one: give one of them")}
			}
			if given("sync") {
				return usageError{errors.New("--sync with --server-config: set jetstream { sync_interval } in the configuration file instead")}
			}
		}
		cfg.DataDir = dataDir(cfg.DataDir, cfg.NATSURL, cfg.ServerConfig)
		switch *sync {
		case "always":
			cfg.SyncAlways = true
		case "default":
		default:
			return usageError{fmt.Errorf("--sync must be always or default, not %q", *sync)}
		}
		cfg.Fallbacks = splitList(*fallbacks)
		cfg.AllowModels = splitList(*allowModels)
		cfg.AllowAuthPins = splitList(*allowPins)
		cfg.RemoteTools = splitList(*remoteTools)
		var mcpServers []mcpbridge.Server
		if *mcpConfig != "" {
			if mcpServers, err = loadMCP(*mcpConfig, env, red); err != nil {
				return err
			}
		}
		cfg.WebAllow = splitList(*webAllow)
		cfg.Hooks.Names = splitList(*hookNames)
		mode, err := hooks.ParseFailMode(*hookFailure)
		if err != nil {
			return usageError{fmt.Errorf("--hooks-tool-failure: %w", err)}
		}
		cfg.Hooks.ToolFailure = mode
		cfg.ToolPolicy = tools.Policy{Allow: splitList(*toolsAllow), Deny: splitList(*toolsDeny), Approve: splitList(*toolsApprove)}
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
		switch *execApproval {
		case "ask":
			cfg.ToolPolicy.Approve = append(cfg.ToolPolicy.Approve, "exec")
		case "off":
		default:
			return usageError{fmt.Errorf("--exec-approval must be ask or off, not %q", *execApproval)}
		}
		if *skillsConfig != "" {
			b, err := os.ReadFile(*skillsConfig)
			if err != nil {
				return fmt.Errorf("--skills-config: %w", err)
			}
			if err := json.Unmarshal(b, &cfg.Skills); err != nil {
				return fmt.Errorf("--skills-config %s: %w", *skillsConfig, err)
			}
		}
		if *systemPromptFile != "" {
			b, err := os.ReadFile(*systemPromptFile)
			if err != nil {
				return fmt.Errorf("--system-prompt-file: %w", err)
			}
			cfg.SystemPrompt = string(b)
		}
		log, err := newLogger(stderr, *logFormat, *logLevel)
		if err != nil {
			return usageError{err}
		}
		limit, why, err := memory.resolve(env("GOMEMLIMIT"), hostMemory)
		if err != nil {
			return usageError{err}
		}
		if limit > 0 {
			debug.SetMemoryLimit(limit)
		}
		memLog := log.Info().Str("from", why)
		if cur := debug.SetMemoryLimit(-1); cur != math.MaxInt64 {
			memLog = memLog.Int64("memory_limit_bytes", cur)
		}
		memLog.Msg("soft memory limit")
		red.Add(envSecrets(os.Environ())...)
		cfg.Redactor = red
		cfg.Logger = log
		cfg.Env = env

		for _, r := range rateLimits {
			rule, err := governance.ParseRateRule(r)
			if err != nil {
				return usageError{fmt.Errorf("--rate-limit: %w", err)}
			}
			cfg.RateLimits = append(cfg.RateLimits, rule)
		}
		if cfg.TenantWeights, err = parseTenantWeights(tenantWeights); err != nil {
			return usageError{fmt.Errorf("--tenant-weight: %w", err)}
		}
		aliases, err := openai.ParseAliases(httpAliases)
		if err != nil {
			return usageError{fmt.Errorf("--http-model-alias: %w", err)}
		}
		if httpOpts.Addr != "" {
			if err := checkHTTP(cfg, httpOpts); err != nil {
				return usageError{err}
			}
		}
		return serve(cmd.Context(), cfg, red, log, env, httpOpts, aliases, mcpServers)
	}
	root.AddCommand(versionCommand(stdout), sanitizeCommand(stdin, stdout, stderr), permissionsCommand(stdout), mcpBridgeCommand(red, stderr, env))
	return root
}

// serve runs the member until a signal, with tracing when the OTEL_*
// variables ask for it.
func serve(ctx context.Context, cfg fleet.Config, red *redact.Redactor, log zerolog.Logger, env func(string) string, httpOpts gateway.Options, aliases map[string]string, mcpServers []mcpbridge.Server) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	oenv, tracingOn, err := otlp.FromEnv(env)
	if err != nil {
		return usageError{err}
	}
	if tracingOn {
		red.Add(oenv.Secrets...)
		oenv.Logger = log
		exp, err := otlp.New(oenv.Config)
		if err != nil {
			return usageError{err}
		}
		tp, err := otlp.NewTracerProvider(exp, otlp.Service{Name: "lanefleet-worker", Version: version.Get().Version, Instance: cfg.WorkerID}, env)
		if err != nil {
			return usageError{err}
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				log.Warn().Err(err).Msg("tracing: the last spans were not exported")
			}
		}()
		cfg.TracerProvider = tp
		log.Info().Str("endpoint", endpointOf(oenv.URL)).Msg("tracing: exporting spans over OTLP/HTTP")
	}
	m, err := fleet.Start(ctx, cfg)
	if err != nil {
		return err
	}
	ready := log.Info()
	if cfg.ExecUnconfined {
		// Never a line an operator could skim past.
		ready = log.Warn().Str("exec", "UNCONFINED: --exec-unconfined is for tests only; commands run with this worker's privileges")
	}
	if httpOpts.Addr != "" {
		stop, err := serveHTTP(ctx, m, httpOpts, aliases, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	if len(mcpServers) > 0 {
		stop, err := serveMCP(ctx, m, mcpServers, env, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	ready.Str("worker", m.Worker.ID()).Str("nats", m.ClientURL()).Str("model", m.DefaultModel()).Str("version", version.Get().String()).Msg("ready")
	return m.Run(ctx)
}

// checkHTTP refuses --http where the worker's own connection is not the
// one to serve it: a worker with a NATS identity has the worker role,
// which may not send to sessions; give the gateway a user of its own.
func checkHTTP(cfg fleet.Config, o gateway.Options) error {
	if cfg.ServerConfig != "" || cfg.User != "" || cfg.CredsFile != "" || cfg.NKeyFile != "" {
		return errors.New("--http serves through the worker's own connection, whose NATS user has the worker role and may not send to sessions: with NATS users (--server-config, --nats-user, --creds, --nkey), run bin/gateway with a user of its own instead")
	}
	return gateway.CheckListen(o.Addr, o.TokensFile != "")
}

// serveHTTP serves the HTTP gateway through the member's connection until
// ctx is done; stop waits for it.
func serveHTTP(ctx context.Context, m *fleet.Member, o gateway.Options, aliases map[string]string, log zerolog.Logger) (stop func(), err error) {
	// The gateway's own connection (in process with the embedded
	// server): its traffic does not queue behind the worker's.
	gc, err := m.SecondConn("lanefleet-gateway")
	if err != nil {
		return nil, err
	}
	cl, err := lanefleet.New(gc)
	if err != nil {
		gc.Close()
		return nil, err
	}
	glog := log.With().Str("component", "gateway").Logger()
	// The OpenAI-compatible routes list the worker's default model and
	// the aliases.
	v1 := openai.New(cl, openai.Options{Aliases: aliases, Models: []string{m.DefaultModel()}, Logger: glog})
	ln, err := gateway.Listen(o, gateway.Config{Client: cl, Logger: &glog, Routes: v1.Routes(), Tenants: m.Tenants()})
	if err != nil {
		gc.Close()
		return nil, err
	}
	log.Info().Str("url", ln.URL()).Bool("tokens", ln.Authenticates()).Msg("serving the HTTP gateway")
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer gc.Close()
		if err := ln.Serve(hctx); err != nil {
			log.Error().Err(err).Msg("HTTP gateway stopped")
		}
	}()
	return func() { cancel(); <-done }, nil
}

// serveMCP runs the MCP bridge on a connection of its own until ctx is
// done; stop waits for it.
func serveMCP(ctx context.Context, m *fleet.Member, servers []mcpbridge.Server, env func(string) string, log zerolog.Logger) (stop func(), err error) {
	nc, err := m.SecondConn("lanefleet-mcp-bridge")
	if err != nil {
		return nil, err
	}
	bctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	// The worker's runs see the tools as soon as they are served, not at
	// the next discovery refresh (30 s).
	var served func(string)
	refreshed := make(chan struct{})
	if m.Tools != nil {
		due := make(chan struct{}, 1)
		served = func(string) {
			select {
			case due <- struct{}{}:
			default: // one refresh is due already: it will see these too
			}
		}
		go func() {
			defer close(refreshed)
			for {
				select {
				case <-due:
					if err := m.Tools.Refresh(bctx); err != nil {
						if bctx.Err() == nil {
							log.Warn().Err(err).Msg("remote tools: refresh after the MCP bridge served tools failed")
						}
						continue
					}
					log.Info().Int("tools", len(m.Tools.Tools())).Msg("remote tools: refreshed after the MCP bridge served tools")
				case <-bctx.Done():
					return
				}
			}
		}()
	} else {
		close(refreshed)
	}
	go func() {
		defer close(done)
		defer nc.Close()
		if err := runMCPBridge(bctx, nc, servers, env, log, served); err != nil {
			log.Error().Err(err).Msg("MCP bridge stopped")
		}
	}()
	return func() { cancel(); <-done; <-refreshed }, nil
}

// endpointOf is an export URL without credentials or query, for the log.
func endpointOf(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "?"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// noArgs refuses arguments: a worker takes flags only, and a misspelt
// subcommand must not start one.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("unknown command %q for %q (see %s -h)", args[0], cmd.CommandPath(), cmd.CommandPath())}
	}
	return nil
}

// versionCommand is `worker version`: it prints the build and starts
// nothing.
func versionCommand(stdout io.Writer) *cobra.Command {
	asJSON := false
	c := &cobra.Command{
		Use:   "version",
		Short: "Print the module version and commit of this build",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			if asJSON {
				return json.NewEncoder(stdout).Encode(version.Get())
			}
			_, err := fmt.Fprintln(stdout, version.Get())
			return err
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	return c
}

// envSecrets returns the values of environment variables whose names say
// they hold a secret (…_API_KEY, …_TOKEN, …_SECRET, …_PASSWORD).
func envSecrets(environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		k = strings.ToUpper(k)
		for _, suffix := range []string{"_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_ACCESS_KEY"} {
			if strings.HasSuffix(k, suffix) {
				out = append(out, v)
				break
			}
		}
	}
	return out
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// logLevels are the --log-level values.
var logLevels = map[string]zerolog.Level{"debug": zerolog.DebugLevel, "info": zerolog.InfoLevel, "warn": zerolog.WarnLevel, "error": zerolog.ErrorLevel}

func newLogger(w io.Writer, format, level string) (zerolog.Logger, error) {
	lvl, ok := logLevels[level]
	if !ok {
		// zerolog's own parser takes numbers too, and says it defaults
		// to no level: the worker would start logging everything.
		return zerolog.Logger{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	out := w
	switch format {
	case "json":
	case "console":
		out = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !isTerminal(w)}
	case "auto":
		if isTerminal(w) {
			out = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000"}
		}
	default:
		return zerolog.Logger{}, fmt.Errorf("--log-format must be json, console or auto, not %q", format)
	}
	return zerolog.New(out).Level(lvl).Hook(msTimestamp{}), nil
}

// msTimestamp stamps every line with its time to the millisecond. The
// logger's own Timestamp follows zerolog.TimeFieldFormat, a process global
// that defaults to whole seconds (the console showed .000 for every line).
type msTimestamp struct{}

// TimeFormat is the "time" field of every log line.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

func (msTimestamp) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, time.Now().Format(TimeFormat))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// clientSender is sessions_send's publisher: the Go client's Send over the
// member's connection, not following the run.
func clientSender(nc *nats.Conn) (fleet.SendFunc, error) {
	c, err := lanefleet.New(nc)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, key, text, id string) (string, error) {
		run, err := c.Send(ctx, key, text, lanefleet.WithMessageID(id), lanefleet.WithoutFollow())
		if err != nil {
			return "", err
		}
		return run.ID, nil
	}, nil
}

// dataDir is the worker's data directory: the one given; else, for the
// embedded server without a configuration file, ./lanefleet-data. A worker
// joining another server (which may not give --data-dir) has none: it
// keeps its workspaces in the system's temporary directory and its agent
// cache in one of its own unless --workspace-root and --agent-cache-dir
// say where, never in whatever directory it was started from (/ under a
// service manager, the source tree in a test).
func dataDir(given, natsURL, serverConfig string) string {
	if given != "" || natsURL != "" || serverConfig != "" {
		return given
	}
	return "./lanefleet-data"
}
