// Command worker runs a Lanefleet fleet member.
//
// Without NATS_URL it starts an embedded JetStream nats-server (file store
// under --data-dir, clients and other workers connect on --listen); with
// NATS_URL it joins that deployment. Add capacity by starting another worker
// with the same NATS_URL.
//
//	worker [flags]
//	worker sanitize --provider P --api A --model M < history.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/sandbox"
)

func main() {
	sandbox.Main() // exec's confined commands start as this binary, never for a message
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "sanitize" {
		return sanitize(args[1:], stdin, stdout, stderr)
	}
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := os.Getenv
	var (
		cfg       fleet.Config
		sync      = fs.String("sync", "always", "embedded server fsync: always (every write is on disk before it is acknowledged) or default (NATS's 2-minute interval)")
		logFormat = fs.String("log-format", "auto", "log format: json, console, or auto (console on a terminal)")
		logLevel  = fs.String("log-level", "info", "log level: debug, info, warn, error")
	)
	fs.StringVar(&cfg.NATSURL, "nats-url", env("NATS_URL"), "NATS server URLs to join (env NATS_URL); empty starts an embedded server")
	fs.StringVar(&cfg.CredsFile, "creds", env("NATS_CREDS"), "NATS credentials file (env NATS_CREDS)")
	fs.StringVar(&cfg.NKeyFile, "nkey", env("NATS_NKEY"), "NATS NKey seed file (env NATS_NKEY)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", env("NATS_TLS_CERT"), "client TLS certificate (env NATS_TLS_CERT)")
	fs.StringVar(&cfg.TLSKey, "tls-key", env("NATS_TLS_KEY"), "client TLS key (env NATS_TLS_KEY)")
	fs.StringVar(&cfg.TLSCA, "tls-ca", env("NATS_TLS_CA"), "CA bundle for the server certificate (env NATS_TLS_CA)")
	fs.StringVar(&cfg.DataDir, "data-dir", "./lanefleet-data", "embedded server: JetStream data directory")
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:4222", "embedded server: client address for publishers and other workers")
	fs.StringVar(&cfg.WorkerID, "id", "", "worker id in logs, leases and events (default random)")
	fs.IntVar(&cfg.Replicas, "replicas", 1, "stream and bucket replicas (3 on a cluster)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 64, "lanes this worker runs at once (the global lane)")
	fs.DurationVar(&cfg.AckWait, "ack-wait", 30*time.Second, "dispatch AckWait: how long a dead worker's lanes wait before another takes them")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", 30*time.Second, "lane lease TTL (renewed every third of it)")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", 10*time.Second, "on stop, how long running turns may finish before they are cancelled and handed over")
	fs.IntVar(&cfg.MaxPayload, "max-payload", 4<<20, "largest inbound payload in bytes")
	fs.StringVar(&cfg.DefaultModel, "model", env("LANEFLEET_MODEL"), "default model provider/model-id (env LANEFLEET_MODEL; default scripted/echo without API keys)")
	fs.StringVar(&cfg.ModelsFile, "models-file", env("LANEFLEET_MODELS_FILE"), "user models file (JSON) adding to or overriding the built-in catalog (env LANEFLEET_MODELS_FILE)")
	fs.DurationVar(&cfg.ScriptedDelay, "scripted-delay", 0, "pause before each scripted/echo delta (0 = instant)")
	fallbacks := fs.String("fallback", env("LANEFLEET_FALLBACKS"), "comma-separated model fallback chain tried after a failover error (env LANEFLEET_FALLBACKS)")
	fs.StringVar(&cfg.AuthProfiles, "auth-profiles", env("LANEFLEET_AUTH_PROFILES"), "auth-profiles.json with API keys and tokens to rotate through (env LANEFLEET_AUTH_PROFILES); keys in the environment are profiles too")
	fs.DurationVar(&cfg.AttemptTimeout, "timeout", 10*time.Minute, "how long one attempt of a run may take before it is aborted (and the next auth profile tried)")
	fs.StringVar(&cfg.WorkspaceRoot, "workspace-root", env("LANEFLEET_WORKSPACES"), "directory holding each session's workspace for the read/write/edit/exec tools (default <data-dir>/workspaces, else a temp directory)")
	fs.BoolVar(&cfg.NoBuiltinTools, "no-builtin-tools", false, "offer no read/write/edit/exec tools")
	fs.BoolVar(&cfg.Exec, "exec", false, "offer the exec tool: a shell in the session's workspace, confined (Landlock, namespaces, rlimits); refuses to start where it cannot be confined")
	fs.BoolVar(&cfg.ExecUnconfined, "exec-unconfined", false, "with --exec: run its commands unconfined, with the worker's privileges (for platforms without Landlock)")
	fs.BoolVar(&cfg.NoRemoteTools, "no-remote-tools", false, "do not discover tools other processes serve over NATS (micro service lanefleet-tools)")
	fs.BoolVar(&cfg.NoCompaction, "no-compaction", false, "no compaction when the context nears the window (overflow recovery still compacts)")
	fs.BoolVar(&cfg.NoBlockReplies, "no-block-replies", false, "publish no block reply events")
	fs.StringVar(&cfg.SkillsDir, "skills-dir", env("LANEFLEET_SKILLS_DIR"), "directory of skills (<name>/SKILL.md) offered to every session, besides each workspace's skills/ (env LANEFLEET_SKILLS_DIR)")
	skillsConfig := fs.String("skills-config", env("LANEFLEET_SKILLS_CONFIG"), `JSON file configuring skills by name: {"<skill>": {"enabled": false, "env": {"VAR": "value"}, "apiKey": "…"}} (env LANEFLEET_SKILLS_CONFIG)`)
	systemPromptFile := fs.String("system-prompt-file", env("LANEFLEET_SYSTEM_PROMPT_FILE"), "file holding the system prompt (env LANEFLEET_SYSTEM_PROMPT_FILE)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	switch *sync {
	case "always":
		cfg.SyncAlways = true
	case "default":
	default:
		return fmt.Errorf("--sync must be always or default, not %q", *sync)
	}
	for _, f := range strings.Split(*fallbacks, ",") {
		if f = strings.TrimSpace(f); f != "" {
			cfg.Fallbacks = append(cfg.Fallbacks, f)
		}
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
		return err
	}
	cfg.Logger = log
	cfg.Env = env

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m, err := fleet.Start(ctx, cfg)
	if err != nil {
		return err
	}
	log.Info().Str("worker", m.Worker.ID()).Str("nats", m.ClientURL()).Str("model", m.DefaultModel()).Msg("ready")
	return m.Run(ctx)
}

func newLogger(w io.Writer, format, level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Logger{}, fmt.Errorf("--log-level: %w", err)
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
	return zerolog.New(out).Level(lvl).With().Timestamp().Logger(), nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
