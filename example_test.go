package lanefleet_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/lanes/queue"
	"github.com/lanefleet/lanefleet/tracing"
)

// startExampleFleet runs a worker with an embedded NATS server in a temp dir
// (what `worker` does without NATS_URL) and returns its URL.
func startExampleFleet() (url string, stop func()) {
	dir, _ := os.MkdirTemp("", "lanefleet-example")
	ctx, cancel := context.WithCancel(context.Background())
	m, err := fleet.Start(ctx, fleet.Config{DataDir: dir, Listen: "127.0.0.1:0", Scripted: true, Logger: zerolog.Nop()})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	return m.ClientURL(), func() { cancel(); <-done; os.RemoveAll(dir) }
}

// Send a message to a session and stream its reply.
func ExampleClient_Send() {
	url, stop := startExampleFleet()
	defer stop()

	c, err := lanefleet.Connect(url)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	run, err := c.Send(ctx, "agent:main:telegram:dm:42", "hello")
	if err != nil {
		panic(err)
	}
	for ev, err := range run.Events(ctx) {
		if err != nil {
			panic(err)
		}
		switch ev.Stream {
		case events.StreamAssistant:
			fmt.Print(ev.Data.Delta)
		case events.StreamFinal:
			fmt.Println()
			fmt.Println("payload:", ev.Data.Result.Payloads[0].Text)
		}
	}
	// Output:
	// echo: hello
	// payload: echo: hello
}

// Wait for a run's result, then read the session's transcript.
func ExampleClient_History() {
	url, stop := startExampleFleet()
	defer stop()
	c, _ := lanefleet.Connect(url)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, text := range []string{"one", "two"} {
		run, err := c.Send(ctx, "bob", text)
		if err != nil {
			panic(err)
		}
		if _, err := run.Wait(ctx); err != nil {
			panic(err)
		}
	}
	entries, err := c.History(ctx, "bob")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		fmt.Printf("%s: %s\n", e.Message.Role, e.Message.Content.Text())
	}
	// Output:
	// user: one
	// assistant: echo: one
	// user: two
	// assistant: echo: two
}

// Offer a client tool; the run stops with the model's call, the client runs
// the tool and sends the result, and the model answers.
func ExampleWithTools() {
	url, stop := startExampleFleet()
	defer stop()
	c, _ := lanefleet.Connect(url)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	weather := events.ClientTool{Name: "weather", Description: "Current weather in a city",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}
	// The scripted model plays a call to the tool, then a reply.
	script := `#script {"replies":[{"toolCalls":[{"id":"call_1","name":"weather","arguments":{"city":"Lisbon"}}]},{"text":"It is sunny in Lisbon."}]}`
	run, err := c.Send(ctx, "tools:1", script, lanefleet.WithModel("scripted/script"), lanefleet.WithTools(weather))
	if err != nil {
		panic(err)
	}
	res, err := run.Wait(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("stop reason:", res.Meta.StopReason)
	var results []events.ToolResult
	for _, call := range res.Meta.PendingToolCalls {
		fmt.Printf("call %s: %s(%s)\n", call.ID, call.Name, call.Arguments)
		results = append(results, events.ToolResult{ToolCallID: call.ID, Text: "22°C, clear"})
	}
	// The answer offers the same tools: the history's calls refer to them.
	run, err = c.Send(ctx, "tools:1", "", lanefleet.WithModel("scripted/script"),
		lanefleet.WithTools(weather), lanefleet.WithToolResults(results...))
	if err != nil {
		panic(err)
	}
	if res, err = run.Wait(ctx); err != nil {
		panic(err)
	}
	fmt.Println(res.Payloads[0].Text)
	// Output:
	// stop reason: tool_calls
	// call call_1: weather({"city":"Lisbon"})
	// It is sunny in Lisbon.
}

// Store a session's queue settings: its messages that name no mode are then
// collected, waiting for a quiet second before a batch queued behind a turn
// runs, at most 5 to a turn, the oldest summarised beyond that.
func ExampleClient_SetQueueSettings() {
	url, stop := startExampleFleet()
	defer stop()
	c, _ := lanefleet.Connect(url)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	second := time.Second
	run, err := c.SetQueueSettings(ctx, "chatty", lanefleet.QueueSettings{Mode: "collect", Debounce: &second, Cap: 5, Drop: "summarize"})
	if err != nil {
		panic(err)
	}
	res, err := run.Wait(ctx) // applied in lane order
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Payloads[0].Text)
	s, err := c.QueueSettings(ctx, "chatty")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%+v\n", queue.Resolve(s.Overrides()))
	// Output:
	// queue settings: mode collect, debounce 1000ms, cap 5, drop summarize
	// {Mode:collect Debounce:1s Cap:5 Drop:summarize}
}

// Store a session's run settings: its turns then use this model and
// thinking level unless their message names others, and never the write
// tool. Settings returns them with the session's state: its running usage
// and the auth profile its next turn starts on.
func ExampleClient_SetSettings() {
	url, stop := startExampleFleet()
	defer stop()
	c, _ := lanefleet.Connect(url)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	run, err := c.SetSettings(ctx, "tuned", lanefleet.SettingsChange{
		Run: &events.RunSettings{Model: "scripted/echo", Thinking: "low", Tools: &events.ToolPolicy{Deny: []string{"write"}}}})
	if err != nil {
		panic(err)
	}
	res, err := run.Wait(ctx) // applied in lane order
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Payloads[0].Text)
	if run, err = c.Send(ctx, "tuned", "hello"); err != nil {
		panic(err)
	}
	if res, err = run.Wait(ctx); err != nil {
		panic(err)
	}
	fmt.Println(res.Payloads[0].Text)
	s, err := c.Settings(ctx, "tuned")
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Run, "/", s.State.Turns, "turn")
	// Output:
	// queue settings: defaults; run settings: model scripted/echo, thinking low, tools deny write
	// echo: hello
	// model scripted/echo, thinking low, tools deny write / 1 turn
}

// Follow a message sent while no worker runs: OnWait says why nothing
// happens yet, and the run goes on once a worker starts.
func ExampleRun_OnWait() {
	dir, _ := os.MkdirTemp("", "lanefleet-example")
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{Name: "example", DataDir: dir})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A worker that prepared the fleet's streams, not running yet.
	m, err := fleet.Start(ctx, fleet.Config{NATSURL: srv.ClientURL(), Scripted: true, Logger: zerolog.Nop()})
	if err != nil {
		panic(err)
	}
	workerCtx, stopWorker := context.WithCancel(context.Background())
	done := make(chan struct{})
	defer func() { stopWorker(); <-done }()

	c, _ := lanefleet.Connect(srv.ClientURL())
	defer c.Close()
	run, err := c.Send(ctx, "early", "hello")
	if err != nil {
		panic(err)
	}
	var once sync.Once
	run.OnWait(100*time.Millisecond, func(w lanefleet.Wait) {
		once.Do(func() {
			fmt.Println("waiting:", w.State)
			go func() { defer close(done); _ = m.Run(workerCtx) }() // the worker starts
		})
	})
	res, err := run.Wait(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Payloads[0].Text)
	// Output:
	// waiting: no-worker
	// echo: hello
}

// Connect the way the nats CLI does, with credentials from the environment
// (NATS_USER, NATS_PASSWORD, NATS_CREDS, NATS_CERT, … ) or flags, and a
// per-user inbox prefix so no other user can read this client's replies.
func ExampleCredentials() {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		Username: "alice", Password: "s3cret"})
	if err != nil {
		panic(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		panic("server not ready")
	}
	env := map[string]string{"NATS_USER": "alice", "NATS_PASSWORD": "s3cret"}
	creds := lanefleet.Credentials{InboxPrefix: "_INBOX_alice"}.Or(lanefleet.CredentialsFromEnv(func(k string) string { return env[k] }))
	fmt.Println(creds) // never shows a secret
	opts, err := creds.Options()
	if err != nil {
		panic(err)
	}
	c, err := lanefleet.Connect(srv.ClientURL(), opts...)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	fmt.Println("connected")
	// Output:
	// {user=alice password=xxxxx inbox-prefix=_INBOX_alice}
	// connected
}

// Fan a notice out to many sessions without following their runs: no
// subscription per session, a plain publish each. A run can still be
// followed later (from the stored events).
func ExampleWithoutFollow() {
	url, stop := startExampleFleet()
	defer stop()
	c, _ := lanefleet.Connect(url)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var last *lanefleet.Run
	for _, session := range []string{"user-1", "user-2", "user-3"} {
		run, err := c.Send(ctx, session, "maintenance at noon", lanefleet.WithoutFollow())
		if err != nil {
			panic(err)
		}
		last = run
	}
	res, err := last.Wait(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(last.Session+":", res.Payloads[0].Text)
	// Output:
	// user-3: echo: maintenance at noon
}

// Continue a caller's trace into the turn: Send writes the trace context
// its context carries into the message's headers.
func ExampleClient_Send_traceparent() {
	url, stop := startExampleFleet()
	defer stop()
	c, _ := lanefleet.Connect(url)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The caller's span, as a traceparent header names it (OpenTelemetry's
	// propagator writes one into a propagation.MapCarrier).
	ctx = tracing.ContextWithTraceparent(ctx, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	run, err := c.Send(ctx, "carol", "traced")
	if err != nil {
		panic(err)
	}
	res, err := run.Wait(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Payloads[0].Text)
	// Output: echo: traced
}
