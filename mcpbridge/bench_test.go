package mcpbridge_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/mcpbridge"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// echoTool is the test server's echo served natively as a remote tool.
type echoTool struct{}

func (echoTool) Spec() provider.Tool {
	return provider.Tool{Name: "native__echo", Description: "echoes q", Parameters: objectSchema}
}

func (echoTool) Call(_ context.Context, c tools.Call) (tools.Result, error) {
	q, _ := c.Args["q"].(string)
	return tools.TextResult("echo " + q), nil
}

// BenchmarkCall compares one echo call through the bridge (to a stdio and
// to a streamable-HTTP MCP server) with the same tool served natively as
// a remote tool, in one run on one NATS server; each reports its p50.
func BenchmarkCall(b *testing.B) {
	bb := setup(b)
	svc, err := remote.Serve(bb.caller(b), remote.ServiceConfig{}, echoTool{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = svc.Stop() })
	stdio, _ := stdioServer(b, "st")
	_, url := httpServer(b, serverHooks{}, false)
	bb.bridge(b, stdio, mcpbridge.Server{Name: "h", Transport: mcpbridge.TransportHTTP, URL: url})
	nc := bb.caller(b)
	for _, name := range []string{"native__echo", "st__echo", "h__echo"} {
		tl := tool(b, nc, name)
		c := tools.Call{ID: "c1", Args: map[string]any{"q": "hi"}}
		b.Run(name, func(b *testing.B) {
			var d []time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := tl.Call(b.Context(), c); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(start))
			}
			slices.Sort(d)
			b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
		})
	}
}
