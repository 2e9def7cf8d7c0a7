package lanefleet_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
)

// startExampleFleet runs a worker with an embedded NATS server in a temp dir
// (what `worker` does without NATS_URL) and returns its URL.
func startExampleFleet() (url string, stop func()) {
	dir, _ := os.MkdirTemp("", "lanefleet-example")
	ctx, cancel := context.WithCancel(context.Background())
	m, err := fleet.Start(ctx, fleet.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: zerolog.Nop()})
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
