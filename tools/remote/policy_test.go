package remote_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// TestOperatorPolicy: only the tools the operator lists are used; a tool
// may never take a built-in's name, nor be called on any subject but its
// own, whoever answers $SRV.INFO.
func TestOperatorPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.serve(t, b.server, remote.ServiceConfig{}, newTool("weather", echo), newTool("unlisted", echo), newTool("read", echo))
	// A responder advertising a listed name on someone else's subject.
	svc, err := micro.AddService(b.server, micro.Config{Name: remote.ServiceNameDefault, Version: "9.9.9"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	err = svc.AddEndpoint("stocks", micro.HandlerFunc(func(r micro.Request) { _ = r.Respond([]byte(`{"content":[]}`)) }),
		micro.WithEndpointSubject("agent.in.victim"), micro.WithEndpointMetadata(map[string]string{remote.MetaParameters: "{}"}))
	if err != nil {
		t.Fatal(err)
	}
	cfg := remote.DiscoverConfig{Allow: []string{"weather", "stocks"}, Reserved: []string{"read", "write"}}
	// Discovery returns what passed the policy; wait until the weather
	// tool is seen, so every responder had its chance.
	list := b.discoverUntil(t, cfg, func(l tools.List) bool { _, ok := l.Lookup("weather"); return ok })
	var names []string
	for _, s := range list.Specs() {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "weather" {
		t.Fatalf("tools = %v, want only weather (unlisted is not allowed, read is built in, stocks is served on a foreign subject)", names)
	}

	if _, err := remote.NewRegistry(b.client, remote.DiscoverConfig{Allow: []string{"read"}, Reserved: []string{"read"}}); err == nil {
		t.Error("a registry allowing a built-in name was created")
	}
	if _, err := remote.NewRegistry(b.client, remote.DiscoverConfig{Allow: []string{"a.b"}}); err == nil {
		t.Error("a registry allowing an invalid name was created")
	}
	if _, err := remote.NewRegistry(b.client, remote.DiscoverConfig{Allow: []string{"*"}}); err == nil {
		t.Error("a registry allowing every name with a lone '*' was created")
	}
}

// TestAllowGlobs: a glob in Allow takes the tools it matches (an MCP
// bridge's <server>__<tool> names) and no others.
func TestAllowGlobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.serve(t, b.server, remote.ServiceConfig{}, newTool("gh__issues", echo), newTool("gh__pulls", echo), newTool("ghx", echo), newTool("fs__read", echo))
	cfg := remote.DiscoverConfig{Allow: []string{"gh__*"}}
	list := b.discoverUntil(t, cfg, func(l tools.List) bool { return len(l.Specs()) == 2 })
	var names []string
	for _, s := range list.Specs() {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "gh__issues,gh__pulls" {
		t.Fatalf("tools = %v, want the gh__ tools only", names)
	}
}

// TestOversizedDetailsAreDropped: details past MaxDetailsBytes become a
// note, so a tool cannot make its turn too large to commit.
func TestOversizedDetailsAreDropped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := newTool("big", func(ctx context.Context, c tools.Call) (tools.Result, error) {
		return tools.Result{Content: []message.Block{message.Text("ok")},
			Details: map[string]any{"blob": strings.Repeat("x", remote.MaxDetailsBytes+1)}}, nil
	})
	small := newTool("small", func(ctx context.Context, c tools.Call) (tools.Result, error) {
		return tools.Result{Content: []message.Block{message.Text("ok")}, Details: map[string]any{"n": 1.0}}, nil
	})
	b.serve(t, b.server, remote.ServiceConfig{}, big, small)
	res, err := b.lookup(t, "big", remote.DiscoverConfig{}).Call(t.Context(), tools.Call{ID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Details["truncated"] != true || res.Details["blob"] != nil || text(res) != "ok" {
		t.Errorf("details = %v, text %q", res.Details, text(res))
	}
	res, err = b.lookup(t, "small", remote.DiscoverConfig{}).Call(t.Context(), tools.Call{ID: "c2"})
	if err != nil || res.Details["n"] != 1.0 {
		t.Errorf("small details = %v, %v", res.Details, err)
	}
}
