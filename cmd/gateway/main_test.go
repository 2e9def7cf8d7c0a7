package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/gateway"
)

// TestTokenNew: `gateway token new` prints a token, then a token-file
// entry holding its hash (never the token) that loads and admits it.
func TestTokenNew(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"token", "new", "--name", "acme", "--role", "sender", "--prefix", "acme:", "--rate", "60"}, &out, &errb, func(string) string { return "" })
	if err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], gateway.TokenPrefix) || strings.Contains(lines[1], lines[0]) {
		t.Fatalf("output %q", out.String())
	}
	var e gateway.TokenEntry
	if err := json.Unmarshal([]byte(lines[1]), &e); err != nil || e.Hash != gateway.HashToken(lines[0]) || e.Name != "acme" || e.Rate != 60 {
		t.Fatalf("entry %s: %v", lines[1], err)
	}
	if _, err := gateway.ParseTokens(strings.NewReader(`{"tokens":[` + lines[1] + `]}`)); err != nil {
		t.Fatal(err)
	}
	err = run(context.Background(), []string{"token", "new", "--name", "x", "--role", "root"}, &out, &errb, func(string) string { return "" })
	if exitCode(err) != 2 {
		t.Fatalf("a bad role: %v", err)
	}
}

// TestRefusesPublicWithoutTokens: a non-loopback --http without a token
// file is refused at start, before NATS is dialled.
func TestRefusesPublicWithoutTokens(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"--http", "0.0.0.0:8080", "--nats-url", "nats://127.0.0.1:1"}, &out, &errb, func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") || exitCode(err) != 2 {
		t.Fatalf("%v", err)
	}
}
