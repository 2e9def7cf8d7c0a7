package mcpbridge

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// Keys of the _meta the bridge puts on every tools/call, so a server can
// tell repeated executions of one call apart and knows the run.
const (
	MetaIdempotencyKey = "lanefleet/idempotencyKey"
	MetaSessionKey     = "lanefleet/sessionKey"
	MetaRunID          = "lanefleet/runId"
)

// tool is one MCP tool served as a remote tool.
type tool struct {
	s          *server
	cs         *mcp.ClientSession
	mcpName    string
	spec       provider.Tool
	idempotent bool
}

// newTool checks and converts an MCP tool: its remote name must be valid
// and its schema a JSON object within MaxSchemaBytes.
func (s *server) newTool(cs *mcp.ClientSession, t *mcp.Tool) (*tool, error) {
	if t == nil {
		return nil, errors.New("empty entry")
	}
	name, ok := ToolName(s.cfg.Name, t.Name)
	if !ok {
		return nil, fmt.Errorf("%q is not a valid tool name (1-64 of A-Z a-z 0-9 _ - with the server's prefix)", truncate(name, 100))
	}
	var params map[string]any
	if t.InputSchema != nil {
		raw, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("input schema: %w", err)
		}
		if len(raw) > s.b.cfg.MaxSchemaBytes {
			return nil, fmt.Errorf("input schema of %d bytes; at most %d", len(raw), s.b.cfg.MaxSchemaBytes)
		}
		if err := json.Unmarshal(raw, &params); err != nil {
			return nil, fmt.Errorf("input schema is not a JSON object: %w", err)
		}
	}
	desc := t.Description
	if desc == "" && t.Annotations != nil {
		desc = t.Annotations.Title
	}
	if len(desc) > s.b.cfg.MaxDescription {
		desc = strings.ToValidUTF8(desc[:s.b.cfg.MaxDescription], "") + "…"
	}
	idem := t.Annotations != nil && (t.Annotations.ReadOnlyHint || t.Annotations.IdempotentHint)
	return &tool{s: s, cs: cs, mcpName: t.Name, spec: provider.Tool{Name: name, Description: desc, Parameters: params}, idempotent: idem}, nil
}

// Spec implements tools.Tool.
func (t *tool) Spec() provider.Tool { return t.spec }

// Idempotent implements tools.Idempotent from the tool's annotations
// (readOnlyHint or idempotentHint).
func (t *tool) Idempotent() bool { return t.idempotent }

// Call implements tools.Tool: one tools/call on the server's session. The
// call's context ending (the caller's timeout, a stopped run, the bridge
// stopping) cancels the MCP request (notifications/cancelled). Progress
// notifications become partial results when the caller asked for them.
func (t *tool) Call(ctx context.Context, call tools.Call) (tools.Result, error) {
	args := call.Args
	if args == nil {
		args = map[string]any{} // a nil map would go as null, which servers refuse
	}
	params := &mcp.CallToolParams{Name: t.mcpName, Arguments: args}
	meta := mcp.Meta{}
	if call.Key != "" {
		meta[MetaIdempotencyKey] = call.Key
	}
	ri := remote.RunInfoFrom(ctx)
	if ri.SessionKey != "" {
		meta[MetaSessionKey] = ri.SessionKey
	}
	if ri.RunID != "" {
		meta[MetaRunID] = ri.RunID
	}
	if len(meta) > 0 {
		params.Meta = meta
	}
	if call.Update != nil {
		tok := t.s.cfg.Name + "-" + strconv.FormatUint(t.s.nextToken.Add(1), 36)
		params.SetProgressToken(tok)
		t.s.progress.Store(tok, func(p *mcp.ProgressNotificationParams) { call.Update(progressResult(p)) })
		defer t.s.progress.Delete(tok)
	}
	res, err := t.cs.CallTool(ctx, params)
	if err != nil {
		return tools.Result{}, t.callError(ctx, call, err)
	}
	return t.result(res), nil
}

// callError explains a failed tools/call to the model.
func (t *tool) callError(ctx context.Context, call tools.Call, err error) error {
	name := t.spec.Name
	if ctx.Err() != nil {
		// The remote service words timeouts and stops from the cause.
		return fmt.Errorf("tool %s was cancelled: %w", name, context.Cause(ctx))
	}
	var werr *jsonrpc.Error
	if errors.As(err, &werr) {
		return fmt.Errorf("tool %s failed: MCP server %s refused the call (code %d): %s", name, t.s.cfg.Name, werr.Code, truncate(werr.Message, 2000))
	}
	key := ""
	if call.Key != "" {
		key = " (idempotency key " + call.Key + ")"
	}
	return fmt.Errorf("tool %s failed: the connection to MCP server %s broke before it answered, so the call may or may not have taken effect%s: %w", name, t.s.cfg.Name, key, err)
}

// progressResult is the partial result of a progress notification.
func progressResult(p *mcp.ProgressNotificationParams) tools.Result {
	var b strings.Builder
	b.WriteString("progress ")
	b.WriteString(strconv.FormatFloat(p.Progress, 'f', -1, 64))
	if p.Total > 0 {
		b.WriteString("/")
		b.WriteString(strconv.FormatFloat(p.Total, 'f', -1, 64))
	}
	if p.Message != "" {
		b.WriteString(": ")
		b.WriteString(truncate(p.Message, 2000))
	}
	return tools.Result{Content: []message.Block{message.Text(b.String())}}
}

// result maps an MCP result to a tool result: text as text, images as
// images, embedded resources as their text (or image), resource links and
// other kinds as a line of text, structured content as JSON text when
// there is no other content (and always in Details). At most
// MaxResultBytes of content are taken; the rest is noted. isError stays an
// error result the model sees.
func (t *tool) result(res *mcp.CallToolResult) tools.Result {
	budget := t.s.b.cfg.MaxResultBytes
	var out []message.Block
	dropped := 0
	add := func(b message.Block, size int) {
		if size > budget {
			dropped++
			return
		}
		budget -= size
		out = append(out, b)
	}
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			add(message.Text(c.Text), len(c.Text))
		case *mcp.ImageContent:
			add(message.Image(c.MIMEType, base64.StdEncoding.EncodeToString(c.Data)), base64.StdEncoding.EncodedLen(len(c.Data)))
		case *mcp.AudioContent:
			add(message.Text(fmt.Sprintf("[audio of type %s, %d bytes, not shown]", c.MIMEType, len(c.Data))), 64)
		case *mcp.ResourceLink:
			s := "[resource " + c.URI
			if c.Name != "" {
				s += " (" + c.Name + ")"
			}
			add(message.Text(s+"]"), len(s)+1)
		case *mcp.EmbeddedResource:
			r := c.Resource
			switch {
			case r == nil:
			case r.Text != "":
				s := "[resource " + r.URI + "]\n" + r.Text
				add(message.Text(s), len(s))
			case strings.HasPrefix(r.MIMEType, "image/"):
				add(message.Image(r.MIMEType, base64.StdEncoding.EncodeToString(r.Blob)), base64.StdEncoding.EncodedLen(len(r.Blob)))
			default:
				s := fmt.Sprintf("[resource %s of type %s, %d bytes, not shown]", r.URI, r.MIMEType, len(r.Blob))
				add(message.Text(s), len(s))
			}
		default:
			add(message.Text("[content of a kind the bridge does not show]"), 48)
		}
	}
	var details map[string]any
	if res.StructuredContent != nil {
		if raw, err := json.Marshal(res.StructuredContent); err == nil && len(raw) <= budget {
			details = map[string]any{"structuredContent": json.RawMessage(raw)}
			if len(out) == 0 {
				add(message.Text(string(raw)), len(raw))
			} else {
				budget -= len(raw)
			}
		} else if err == nil {
			dropped++
		}
	}
	if dropped > 0 {
		out = append(out, message.Text(fmt.Sprintf("[%d more part(s) of the result were left out: over %d bytes in all; ask for less]", dropped, t.s.b.cfg.MaxResultBytes)))
	}
	if len(out) == 0 && res.IsError {
		out = append(out, message.Text("tool "+t.spec.Name+" failed (the MCP server gave no reason)"))
	}
	return tools.Result{Content: out, Details: details, IsError: res.IsError}
}
