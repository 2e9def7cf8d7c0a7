package tools

import "strings"

// commandEnv is the environment of one exec command: env, then each entry
// of named ("KEY=value") whose KEY the command names (see namesVar) and env
// does not set. A variable named but not asked for never reaches the
// command, nor the programs it starts.
func commandEnv(env, named []string, command string) []string {
	out := env
	for _, kv := range named {
		key, _, ok := strings.Cut(kv, "=")
		if !ok || !namesVar(command, key) || hasKey(out, key) {
			continue
		}
		if len(out) == len(env) {
			out = append(make([]string, 0, len(env)+len(named)), env...) // never env's array
		}
		out = append(out, kv)
	}
	return out
}

// namesVar reports whether command names the variable key the way a shell
// expands it: "$KEY" or "${KEY" not followed by another character of a
// variable name ([A-Za-z0-9_]), as in "$KEY", "${KEY}" or "${KEY:-x}".
// Quoting is not parsed: '$KEY' counts too (the command then passes the
// name on, to a program that may expand it).
func namesVar(command, key string) bool {
	if key == "" {
		return false
	}
	for rest := command; ; {
		i := strings.IndexByte(rest, '$')
		if i < 0 {
			return false
		}
		rest = rest[i+1:]
		after := strings.TrimPrefix(rest, "{")
		if tail, ok := strings.CutPrefix(after, key); ok && (tail == "" || !isNameByte(tail[0])) {
			return true
		}
	}
}

// isNameByte reports whether c can continue a shell variable name.
func isNameByte(c byte) bool {
	return c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
}

// hasKey reports whether env has an entry for key.
func hasKey(env []string, key string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			return true
		}
	}
	return false
}
