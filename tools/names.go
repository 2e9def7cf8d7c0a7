package tools

// BuiltinNames returns the names of the worker's own tools: Builtin's and
// Exec's, then the web tools (packages tools/webfetch and
// tools/websearch), process, the memory tools and the session tools
// (package tools/sessions). No tool from elsewhere (a remote tool server,
// a client) may take one of them, whether or not the worker offers it.
func BuiltinNames() []string {
	return []string{"read", "write", "edit", "apply_patch", "exec", "web_fetch", "web_search", "process",
		"memory_search", "memory_get", "sessions_list", "sessions_history", "sessions_send"}
}
