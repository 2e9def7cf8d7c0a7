package mcpbridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/lanefleet/lanefleet/tools/remote"
)

// Config-file bounds: a file is read whole, so its size is checked first.
const (
	// MaxConfigBytes caps the config file.
	MaxConfigBytes = 1 << 20
	// MaxServers caps the servers of one config.
	MaxServers = 64
	// MaxServerName caps a server's name, so that "<server>__<tool>" can
	// still fit remote.ValidName's 64 characters.
	MaxServerName = 32
)

// Transport kinds of a server.
const (
	TransportStdio = "stdio" // a command speaking MCP on stdin/stdout
	TransportHTTP  = "http"  // streamable HTTP (the default for a url)
	TransportSSE   = "sse"   // the older HTTP+SSE transport
)

// ErrConfig is wrapped by every error of LoadConfig and ParseConfig.
var ErrConfig = errors.New("mcpbridge: bad config")

// Server is one MCP server of the config, in the shape MCP clients use:
// either a command (stdio) or a url (streamable HTTP, or SSE with "type":
// "sse").
type Server struct {
	// Name is the server's key in mcpServers; its tools are served as
	// <Name>__<tool>.
	Name string
	// Transport is TransportStdio, TransportHTTP or TransportSSE.
	Transport string
	// Command, Args and Env start a stdio server. Env is added to a
	// small base environment (PATH, HOME, USER, LOGNAME, SHELL, TERM,
	// LANG, TMPDIR), not to the bridge's whole environment, so the
	// bridge's own secrets stay with it.
	Command string
	Args    []string
	Env     map[string]string
	// URL and Headers reach an HTTP server; headers go on every request.
	URL     string
	Headers map[string]string
}

// fileConfig is the JSON of a config file.
type fileConfig struct {
	MCPServers map[string]fileServer `json:"mcpServers"`
}

type fileServer struct {
	Type    string            `json:"type"`
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// serverNameRE is the shape of a server name: a tool-name prefix without
// "__" (checked apart), so no two servers' tool names can be confused.
var serverNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// LoadConfig reads and parses the config file at path (see ParseConfig).
func LoadConfig(path string, getenv func(string) string) ([]Server, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mcpbridge: config: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, MaxConfigBytes+1)); err != nil {
		return nil, fmt.Errorf("mcpbridge: config %s: %w", path, err)
	}
	if buf.Len() > MaxConfigBytes {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrConfig, path, MaxConfigBytes)
	}
	return ParseConfig(buf.Bytes(), getenv)
}

// ParseConfig parses a config in the MCP clients' format,
//
//	{"mcpServers": {"fs": {"command": "npx", "args": ["-y", "@scope/server"], "env": {"TOKEN": "${FS_TOKEN}"}},
//	                "docs": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}},
//	                "old": {"type": "sse", "url": "https://old.example.com/sse"}}}
//
// and returns its servers sorted by name. ${VAR} in env values, header
// values and the url is replaced with getenv(VAR); a variable that is unset
// or empty is an error that names it (never its value). Errors wrap
// ErrConfig.
func ParseConfig(data []byte, getenv func(string) string) ([]Server, error) {
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("%w: over %d bytes", ErrConfig, MaxConfigBytes)
	}
	var fc fileConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&fc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if len(fc.MCPServers) == 0 {
		return nil, fmt.Errorf("%w: no servers under \"mcpServers\"", ErrConfig)
	}
	if len(fc.MCPServers) > MaxServers {
		return nil, fmt.Errorf("%w: %d servers; at most %d", ErrConfig, len(fc.MCPServers), MaxServers)
	}
	out := make([]Server, 0, len(fc.MCPServers))
	for name, fs := range fc.MCPServers {
		s, err := fs.server(name, getenv)
		if err != nil {
			return nil, fmt.Errorf("%w: server %q: %w", ErrConfig, name, err)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (fs fileServer) server(name string, getenv func(string) string) (Server, error) {
	if len(name) > MaxServerName || !serverNameRE.MatchString(name) || strings.Contains(name, "__") {
		return Server{}, fmt.Errorf("a server name must be 1-%d letters, digits, '_' or '-', start with a letter or digit and hold no \"__\"", MaxServerName)
	}
	s := Server{Name: name, Command: fs.Command, Args: fs.Args}
	var err error
	switch {
	case fs.Command != "" && fs.URL != "":
		return Server{}, errors.New("give either \"command\" or \"url\", not both")
	case fs.Command != "":
		if fs.Type != "" && fs.Type != TransportStdio {
			return Server{}, fmt.Errorf("type %q does not go with \"command\"", fs.Type)
		}
		s.Transport = TransportStdio
		if len(fs.Headers) > 0 {
			return Server{}, errors.New("\"headers\" go with \"url\", not \"command\"")
		}
		if s.Env, err = expandMap(fs.Env, getenv); err != nil {
			return Server{}, fmt.Errorf("env: %w", err)
		}
	case fs.URL != "":
		switch fs.Type {
		case "", TransportHTTP, "streamable-http", "streamableHttp":
			s.Transport = TransportHTTP
		case TransportSSE:
			s.Transport = TransportSSE
		default:
			return Server{}, fmt.Errorf("type %q is not one of http, sse", fs.Type)
		}
		if len(fs.Env) > 0 || len(fs.Args) > 0 {
			return Server{}, errors.New("\"env\" and \"args\" go with \"command\", not \"url\"")
		}
		if s.URL, err = expand(fs.URL, getenv); err != nil {
			return Server{}, fmt.Errorf("url: %w", err)
		}
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Server{}, errors.New("url must be an http or https URL")
		}
		if s.Headers, err = expandMap(fs.Headers, getenv); err != nil {
			return Server{}, fmt.Errorf("headers: %w", err)
		}
	default:
		return Server{}, errors.New("needs \"command\" (stdio) or \"url\" (http, sse)")
	}
	return s, nil
}

// varRE is a ${VAR} reference.
var varRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expand replaces every ${VAR} in s with getenv(VAR). The error names the
// variable, never a value.
func expand(s string, getenv func(string) string) (string, error) {
	var missing string
	out := varRE.ReplaceAllStringFunc(s, func(m string) string {
		name := m[2 : len(m)-1]
		v := ""
		if getenv != nil {
			v = getenv(name)
		}
		if v == "" && missing == "" {
			missing = name
		}
		return v
	})
	if missing != "" {
		return "", fmt.Errorf("environment variable %s is not set", missing)
	}
	return out, nil
}

func expandMap(m map[string]string, getenv func(string) string) (map[string]string, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		x, err := expand(v, getenv)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = x
	}
	return out, nil
}

// ToolName is the remote tool name of an MCP server's tool:
// <server>__<tool>. ok is false when that is not a valid remote tool name.
func ToolName(server, tool string) (name string, ok bool) {
	name = server + "__" + tool
	return name, remote.ValidName(name)
}
