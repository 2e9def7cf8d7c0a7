package deptest

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// allowed lists, for every package of the module (by path below the
// module, "" for the client), the packages of ours it may import directly:
// the layering of the tree in one place. A new package gets a row here
// with the layer it belongs to; an import not listed fails
// TestAllowedImports, which says what to add if the import is right. A
// pattern ending in "/..." allows a subtree. Test-only imports are not
// checked. (TestModuleRules holds the transitive rules and their reasons.)
var allowed = map[string][]string{
	// Each row as the tree stands: a change to the layering changes a row.
	"":                       {"admin", "agents", "agentstore", "budgetstore", "events", "governance", "internal/backoff", "kvstore", "lanes/queue", "lanes/sessionsvc", "message", "permission", "schedstore", "schedule", "sessionfile", "tracing"},
	"admin":                  {"events", "internal/directget", "internal/microsvc", "kvstore", "lanes/sessionsvc", "sessionindex"},
	"agentprompt":            {"ecmatext", "internal/pathless", "message"},
	"agents":                 {"events"},
	"agentstore":             {"agents", "internal/kvbucket"},
	"authprofile":            {"internal/pathless", "provider"},
	"authstore":              {"authprofile", "events", "fallback", "internal/backoff", "internal/kvbucket", "provider", "provider/catalog", "secretexec"},
	"blockchunk":             {"ecmatext"},
	"budgetstore":            {"events", "governance", "internal/backoff", "internal/kvbucket"},
	"chatcmd":                {"events"},
	"internal/cmd/lanebench": {"", "admin", "events", "gateway", "gateway/auth", "gateway/openai", "internal/embedded", "internal/fleet", "kvstore", "lanes", "provider", "provider/scripted", "sessionindex", "tools", "tools/remote"},
	"cmd/publisher":          {"", "admin", "agents", "events", "gateway/auth", "gateway/mcpserver", "governance", "internal/version", "kvstore", "lanes/queue", "lanes/sessionsvc", "message", "schedule"},
	"cmd/gateway":            {"", "gateway", "gateway/auth", "gateway/openai", "governance", "internal/version"},
	"cmd/worker":             {"", "gateway", "gateway/openai", "governance", "guard", "hooks", "internal/cgroup", "internal/fleet", "internal/version", "kvstore", "lanes", "mcpbridge", "permission", "redact", "retention", "runner", "sandbox", "sanitize/sanitizecmd", "tools", "tracing/otlp"},
	"compaction":             {"ecmatext", "message", "provider", "sessionfile"},
	"docs":                   {}, // a test of the pages alone
	"events":                 {"internal/mpw"},
	"fallback":               {"authprofile", "provider", "provider/failover"},
	"governance":             {"message", "provider"},
	"guard":                  {"ecmatext", "message"},
	"mcpbridge":              {"internal/backoff", "message", "provider", "tools", "tools/remote"},
	"hooks":                  {"agentprompt", "events", "internal/inflight", "internal/microsvc", "internal/reply"},
	"integration":            {},
	"internal/backoff":       {},
	"internal/bytelru":       {},
	"internal/cgroup":        {},
	"internal/conformance":   {"message", "provider", "provider/failover"},
	"internal/deptest":       {},
	"internal/embedded":      {},
	"internal/fleet":         {"admin", "agentprompt", "agents", "agentstore", "authprofile", "authstore", "blockchunk", "budgetstore", "chatcmd", "compaction", "events", "governance", "hooks", "internal/backoff", "internal/embedded", "internal/version", "kvstore", "lanes", "lanes/sessionsvc", "message", "metrics", "netguard", "permission", "provider", "provider/anthropic", "provider/catalog", "provider/failover", "provider/local", "provider/registry", "provider/scripted", "redact", "runner", "sandbox", "schedstore", "schedule", "secretexec", "sessionfile", "sessionindex", "subagent", "tools", "tools/remote", "tools/sessions", "tools/webfetch", "tools/websearch", "tracing"},
	"internal/inflight":      {},
	"internal/kvbucket":      {},
	"internal/directget":     {},
	"internal/mpw":           {},
	"internal/microsvc":      {"internal/inflight", "internal/reply"},
	"internal/mustrun":       {},
	"internal/pathless":      {},
	"internal/natstest":      {"internal/embedded"},
	"internal/mcptest":       {},
	"internal/refused":       {},
	"internal/reply":         {},
	"internal/version":       {},
	"ecmatext":               {},
	"kvstore":                {"events", "internal/backoff", "internal/directget", "internal/mpw", "lanes/queue", "message"},
	"lanes":                  {"chatcmd", "events", "internal/backoff", "internal/bytelru", "internal/reply", "kvstore", "lanes/queue", "message", "retention", "sessionfile", "subagent", "lanes/internal/..."},
	// The lane's own parts (renolane is moving the emitter and the slot
	// scheduler there).
	"lanes/internal/...":          {"events", "internal/backoff", "internal/bytelru", "kvstore", "lanes/queue", "message", "lanes/internal/..."},
	"lanes/queue":                 {"ecmatext"},
	"lanes/sessionsvc":            {"events", "internal/inflight", "internal/microsvc", "internal/reply", "kvstore", "message", "sanitize", "sessionfile"},
	"message":                     {"ecmatext", "internal/mpw"},
	"metrics":                     {"events", "internal/version", "message"},
	"netguard":                    {},
	"permission":                  {"events"},
	"provider":                    {"message"},
	"provider/anthropic":          {"message", "provider", "provider/failover", "provider/internal/adapter", "provider/internal/bodybuf", "provider/internal/jsonfast", "provider/internal/sse", "provider/internal/stream", "provider/internal/tokens", "provider/internal/wirecache", "provider/transform"},
	"provider/azure":              {"message", "provider", "provider/catalog", "provider/internal/adapter", "provider/internal/tokens", "provider/openai"},
	"provider/bedrock":            {"message", "provider", "provider/failover", "provider/internal/jsonfast", "provider/internal/stream", "provider/transform"},
	"internal/bedrocktest":        {},
	"provider/catalog":            {"provider"},
	"provider/failover":           {"ecmatext", "provider"},
	"provider/google":             {"message", "provider", "provider/internal/adapter", "provider/internal/bodybuf", "provider/internal/jsonfast", "provider/internal/sse", "provider/internal/stream", "provider/internal/wirecache", "provider/transform"},
	"provider/internal/adapter":   {"message", "provider", "provider/internal/send", "provider/internal/sse", "provider/internal/stream"},
	"provider/internal/jsonfast":  {},
	"provider/internal/bodybuf":   {},
	"provider/internal/send":      {"provider", "provider/internal/stream"},
	"provider/internal/sse":       {},
	"provider/internal/stream":    {"message", "provider", "provider/failover", "provider/internal/sse"},
	"provider/internal/wirecache": {"internal/bytelru", "message", "provider", "provider/internal/bodybuf", "provider/transform"},
	"provider/internal/tokens":    {"provider"},
	"provider/internal/wiretest":  {"message", "provider", "provider/internal/wirecache", "internal/refused"},
	"provider/local":              {"provider", "provider/catalog"},
	"provider/openai":             {"message", "provider", "provider/catalog", "provider/failover", "provider/internal/adapter", "provider/internal/bodybuf", "provider/internal/jsonfast", "provider/internal/sse", "provider/internal/stream", "provider/internal/wirecache", "provider/transform"},
	"provider/registry":           {"authprofile", "guard", "message", "provider", "provider/anthropic", "provider/bedrock", "provider/catalog", "provider/google", "provider/internal/adapter", "provider/local", "provider/openai", "provider/scripted", "provider/vertex", "provider/azure"},
	"provider/scripted":           {"message", "provider"},
	"provider/transform":          {"message", "provider"},
	"provider/vertex":             {"message", "provider", "provider/anthropic", "provider/catalog", "provider/google", "provider/internal/adapter", "provider/internal/tokens"},
	"redact":                      {},
	"replytext":                   {"ecmatext", "message"},
	"retention":                   {},
	"runner":                      {"agentprompt", "authprofile", "blockchunk", "compaction", "events", "fallback", "guard", "internal/backoff", "internal/bytelru", "ecmatext", "message", "provider", "provider/failover", "replytext", "sanitize", "sessionfile", "tools"},
	"sandbox":                     {"internal/cgroup"},
	"schedule":                    {"events"},
	"schedstore":                  {"events", "internal/backoff", "kvstore", "schedule"},
	"sanitize":                    {"ecmatext", "message"},
	"sanitize/sanitizecmd":        {"message", "sanitize", "sessionfile"},
	"secretexec":                  {"authprofile", "internal/pathless", "provider"},
	"sessionfile":                 {"ecmatext", "message"},
	"sessionindex":                {"events", "internal/directget"},
	"tools":                       {"internal/pathless", "message", "provider", "sandbox", "tools/internal/toolargs", "tools/memsearch", "tools/patch"},
	"tools/internal/toolargs":     {},
	"tools/memsearch":             {},
	"tools/sessions":              {"agents", "events", "governance", "message", "provider", "subagent", "tools", "tools/internal/toolargs"},
	"subagent":                    {"agents", "events", "message"},
	"tools/patch":                 {},
	"tools/webfetch":              {"message", "netguard", "provider", "tools", "tools/internal/toolargs"},
	"tools/websearch":             {"message", "provider", "tools", "tools/internal/toolargs"},
	"tools/remote":                {"guard", "internal/inflight", "internal/microsvc", "internal/reply", "message", "provider", "tools"},
	"tracing":                     {},
	"tracing/otlp":                {"internal/backoff", "tracing"},
	// The HTTP gateway (being built): the client and the wire schema.
	"gateway/console": {"gateway/route"},
	// The fleet as an MCP server: the client, the caller, the wire types.
	"gateway/mcpserver": {"", "admin", "events", "gateway/auth", "internal/version", "message"},
	"gateway/...":       {"", "events", "message", "metrics", "tracing", "permission", "lanes/queue", "lanes/sessionsvc", "admin", "internal/...", "gateway/...", "schedstore", "schedule", "sessionfile", "governance", "agents", "agentstore"},
}

// TestAllowedImports checks every package's direct imports of the module's
// packages against allowed (go list, without -deps: quick enough for
// -short).
func TestAllowedImports(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	cmd := exec.CommandContext(t.Context(), gobin, "list", "-json=ImportPath,Imports", mod+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	pkgs, err := decode(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		name := rel(p.ImportPath)
		allow, ok := allowedFor(name)
		if !ok {
			t.Errorf("package %q has no row in allowed: add one with the packages of ours it may import", name)
			continue
		}
		for _, imp := range p.Imports {
			if imp != mod && !strings.HasPrefix(imp, mod+"/") {
				continue
			}
			if !matches(allow, rel(imp)) {
				t.Errorf("%q imports %q, which its row in allowed does not list: add it there if that is the layering you mean", name, rel(imp))
			}
		}
	}
}

// rel is an import path of ours below the module ("" for the module).
func rel(path string) string {
	return strings.TrimPrefix(strings.TrimPrefix(path, mod), "/")
}

// allowedFor returns the row of pkg: its own, or that of a "/..." pattern
// above it.
func allowedFor(pkg string) ([]string, bool) {
	if a, ok := allowed[pkg]; ok {
		return a, true
	}
	for k, a := range allowed {
		if base, ok := strings.CutSuffix(k, "/..."); ok && (pkg == base || strings.HasPrefix(pkg, base+"/")) {
			return a, true
		}
	}
	return nil, false
}

// matches reports whether imp is in allow (a "/..." entry matches its
// subtree).
func matches(allow []string, imp string) bool {
	if slices.Contains(allow, imp) {
		return true
	}
	for _, a := range allow {
		if base, ok := strings.CutSuffix(a, "/..."); ok && (imp == base || strings.HasPrefix(imp, base+"/")) {
			return true
		}
	}
	return false
}
