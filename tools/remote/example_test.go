package remote_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// weather is a tool some process offers to every agent run.
type weather struct{}

func (weather) Spec() provider.Tool {
	return provider.Tool{Name: "weather", Description: "Current weather in a city.",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}}}
}

func (weather) Call(ctx context.Context, c tools.Call) (tools.Result, error) {
	city, _ := c.Args["city"].(string)
	if city == "" {
		return tools.Result{}, fmt.Errorf("weather: the city argument is required")
	}
	return tools.TextResult(city + ": 21°C, sunny"), nil
}

// One process serves a tool; a worker on another connection discovers and
// calls it.
func Example() {
	dir, _ := os.MkdirTemp("", "remote-example")
	defer os.RemoveAll(dir)
	no := false
	srv, err := embedded.Start(embedded.Config{Name: "example", DataDir: dir, SyncAlways: &no})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()

	// The process offering the tool.
	toolConn, _ := nats.Connect(srv.ClientURL())
	defer toolConn.Close()
	svc, err := remote.Serve(toolConn, remote.ServiceConfig{Version: "1.0.0"}, weather{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer svc.Stop()

	// A worker.
	workerConn, _ := nats.Connect(srv.ClientURL())
	defer workerConn.Close()
	ctx := context.Background()
	list, err := remote.Discover(ctx, workerConn, remote.DiscoverConfig{Window: 100 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range list.Specs() {
		fmt.Printf("%s: %s\n", s.Name, s.Description)
	}
	tool, _ := list.Lookup("weather")
	res, err := tool.Call(ctx, tools.Call{ID: "call_1", Name: "weather", Args: map[string]any{"city": "Lisbon"}})
	fmt.Println(res.Content[0].Text, err)
	_, err = tool.Call(ctx, tools.Call{ID: "call_2", Name: "weather", Args: map[string]any{}})
	fmt.Println(err)

	svc.Stop()
	_, err = tool.Call(ctx, tools.Call{ID: "call_3", Name: "weather", Args: map[string]any{"city": "Porto"}})
	fmt.Println(err)
	// Output:
	// weather: Current weather in a city.
	// Lisbon: 21°C, sunny <nil>
	// weather: the city argument is required
	// tool weather is not available: no process serves it
}
