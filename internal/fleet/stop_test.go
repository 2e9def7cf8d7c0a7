package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestStopWithoutServer: a worker joined to a server that is gone stops at
// once when asked, and "worker stopped" is its last line.
func TestStopWithoutServer(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	var logs lockedBuffer
	m, err := Start(t.Context(), Config{NATSURL: srv.URL, Scripted: true, NoBuiltinTools: true, Logger: zerolog.New(&logs).With().Timestamp().Logger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	_, c, rctx := runStartedClient(t, m)
	if v := watch(t, rctx, c, "before", "hi"); v.runErr != nil {
		t.Fatal(v.runErr)
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	// The connection's handler says so on its own goroutine: once it has,
	// nothing the server's end causes comes after the stop.
	logs.waitFor(t, "disconnected from NATS")
	start := time.Now()
	cancel()
	<-done
	took := time.Since(start)
	var last string
	for sc := bufio.NewScanner(strings.NewReader(logs.String())); sc.Scan(); {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil {
			last, _ = line["message"].(string)
		}
	}
	t.Logf("stopped in %v\n%s", took, logs.String())
	// 17 s before (5 s for each service's flush and the auth watch); about
	// 2 s now, 10 s seen on a machine loaded 10x: the bound catches the
	// flushes coming back, not a slow machine.
	if took > 15*time.Second {
		t.Errorf("the worker took %v to stop without its server", took)
	}
	if last != "worker stopped" {
		t.Errorf("last line %q, want worker stopped", last)
	}
}
