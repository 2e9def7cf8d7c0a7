package mcpbridge_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/mcpbridge"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{"GH_TOKEN": "s3cret", "HOST": "mcp.example.com"}
	getenv := func(k string) string { return env[k] }
	servers, err := mcpbridge.ParseConfig([]byte(`{"mcpServers": {
		"fs": {"command": "npx", "args": ["-y", "server-fs", "/data"], "env": {"TOKEN": "${GH_TOKEN}", "MODE": "ro"}},
		"gh": {"url": "https://${HOST}/mcp", "headers": {"Authorization": "Bearer ${GH_TOKEN}"}},
		"old": {"type": "sse", "url": "http://127.0.0.1:9/sse"}}}`), getenv)
	if err != nil {
		t.Fatal(err)
	}
	want := []mcpbridge.Server{
		{Name: "fs", Transport: mcpbridge.TransportStdio, Command: "npx", Args: []string{"-y", "server-fs", "/data"}, Env: map[string]string{"TOKEN": "s3cret", "MODE": "ro"}},
		{Name: "gh", Transport: mcpbridge.TransportHTTP, URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer s3cret"}},
		{Name: "old", Transport: mcpbridge.TransportSSE, URL: "http://127.0.0.1:9/sse"},
	}
	if !reflect.DeepEqual(servers, want) {
		t.Fatalf("servers = %+v\nwant %+v", servers, want)
	}
}

func TestParseConfigRefuses(t *testing.T) {
	t.Parallel()
	getenv := func(k string) string { return map[string]string{"SET": "s3cret"}[k] }
	for _, tc := range []struct{ name, json, want string }{
		{"not json", `{`, "unexpected EOF"},
		{"no servers", `{"mcpServers": {}}`, "no servers"},
		{"neither", `{"mcpServers": {"a": {}}}`, `needs "command"`},
		{"both", `{"mcpServers": {"a": {"command": "x", "url": "http://h"}}}`, "not both"},
		// "__" in a server name would make <server>__<tool> ambiguous.
		{"double underscore", `{"mcpServers": {"a__b": {"command": "x"}}}`, "no \"__\""},
		{"dot", `{"mcpServers": {"a.b": {"command": "x"}}}`, "server name"},
		{"long", `{"mcpServers": {"` + strings.Repeat("a", 33) + `": {"command": "x"}}}`, "server name"},
		{"bad type", `{"mcpServers": {"a": {"type": "ws", "url": "http://h"}}}`, `type "ws"`},
		{"bad url", `{"mcpServers": {"a": {"url": "file:///etc/passwd"}}}`, "http or https"},
		{"headers on stdio", `{"mcpServers": {"a": {"command": "x", "headers": {"A": "b"}}}}`, "headers"},
		// The error names the variable, never a value.
		{"unset variable", `{"mcpServers": {"a": {"url": "http://h", "headers": {"Authorization": "Bearer ${UNSET} ${SET}"}}}}`, "environment variable UNSET is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mcpbridge.ParseConfig([]byte(tc.json), getenv)
			if err == nil || !errors.Is(err, mcpbridge.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want ErrConfig with %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("error %q shows a secret", err)
			}
		})
	}
}
