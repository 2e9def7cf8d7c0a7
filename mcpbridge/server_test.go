package mcpbridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lanefleet/lanefleet/mcpbridge"
)

// The test binary is also a stdio MCP server: run with envServer=stdio it
// serves testServer on stdin/stdout instead of running the tests.
const (
	envServer     = "MCPBRIDGE_TEST_SERVER"
	envCancelFile = "MCPBRIDGE_TEST_CANCEL_FILE" // the slow tool writes its cancellation here
)

func TestMain(m *testing.M) {
	if os.Getenv(envServer) == "stdio" {
		srv := testServer(serverHooks{
			cancelled: func(reason string) {
				if p := os.Getenv(envCancelFile); p != "" {
					_ = os.WriteFile(p, []byte(reason), 0o600)
				}
			},
			crash: func() { os.Exit(3) },
		})
		if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "stdio server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serverHooks let a test see what the server's tools did.
type serverHooks struct {
	cancelled func(reason string) // the slow tool's call was cancelled
	crash     func()              // the crash tool ends the process (stdio)
	// done, closed when the test ends, ends the slow tool's calls still
	// running: a stopped bridge's notifications/cancelled is best effort.
	done <-chan struct{}
}

var objectSchema = map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}

// testServer is an MCP server of the official SDK with a tool for each
// kind of result the bridge maps.
func testServer(h serverHooks) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1.0.0"}, nil)
	add := func(name, desc string, fn func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, error)) {
		srv.AddTool(&mcp.Tool{Name: name, Description: desc, InputSchema: objectSchema}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args map[string]any
			if len(req.Params.Arguments) > 0 {
				if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
					return nil, err
				}
			}
			return fn(ctx, req, args)
		})
	}
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	add("echo", "echoes q with the call's key and run", func(_ context.Context, req *mcp.CallToolRequest, args map[string]any) (*mcp.CallToolResult, error) {
		m := req.Params.Meta
		return text(fmt.Sprintf("echo %v key=%v session=%v run=%v", args["q"], m[mcpbridge.MetaIdempotencyKey], m[mcpbridge.MetaSessionKey], m[mcpbridge.MetaRunID])), nil
	})
	add("image", "a red pixel", func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a pixel"}, &mcp.ImageContent{MIMEType: "image/png", Data: redPixel()}}}, nil
	})
	add("structured", "structured content only", func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{StructuredContent: map[string]any{"n": 1}}, nil
	})
	add("resource", "an embedded resource", func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///notes.txt", MIMEType: "text/plain", Text: "the notes"}}}}, nil
	})
	add("fail", "fails as a tool", func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, error) {
		r := text("q must be a city")
		r.IsError = true
		return r, nil
	})
	add("slow", "reports progress, then waits until cancelled", func(ctx context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, error) {
		if tok := req.Params.GetProgressToken(); tok != nil {
			msg := "working"
			if req.Extra != nil && req.Extra.Header.Get("X-Bridge") != "" {
				msg += " via " + req.Extra.Header.Get("X-Bridge")
			}
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Total: 10, Message: msg})
		}
		select {
		case <-ctx.Done():
		case <-h.done:
			return nil, context.Canceled
		}
		if h.cancelled != nil {
			h.cancelled(context.Cause(ctx).Error())
		}
		return nil, ctx.Err()
	})
	add("pid", "the server's process id", func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, error) {
		return text(fmt.Sprint(os.Getpid())), nil
	})
	add("crash", "ends the server's process", func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, error) {
		if h.crash != nil {
			h.crash()
		}
		return text("not crashed"), nil
	})
	add("who", "the bridge that called, from its X-Bridge header", func(_ context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, error) {
		if req.Extra == nil {
			return text("?"), nil
		}
		return text(req.Extra.Header.Get("X-Bridge")), nil
	})
	add("add_late", "adds the tool late (a list change)", func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, error) {
		srv.AddTool(&mcp.Tool{Name: "late", Description: "added later", InputSchema: objectSchema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("late"), nil
		})
		return text("added"), nil
	})
	// Refused by the bridge: not a valid tool name with the prefix.
	add("bad.name", "a name with a dot", func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, error) {
		return text("no"), nil
	})
	return srv
}

// redPixel is a 1×1 PNG.
func redPixel() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 1, 1))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	_ = png.Encode(&b, img)
	return b.Bytes()
}
