package adapter

import (
	"net/http"
	"time"
)

// Config configures a provider adapter (anthropic.Config, google.Config
// and openai.Config are this type): how it sends, how long a silent
// stream may last, and what it keeps between a session's requests.
type Config struct {
	// HTTPClient sends every request as it is; nil uses a pooled client
	// per origin of the model's base URL (see send.NewTransport:
	// keep-alive, HTTP/2, no overall timeout; a stream is bounded by
	// IdleTimeout and the context).
	HTTPClient *http.Client
	// IdleTimeout abandons a stream that sends nothing for this long;
	// 0 means stream.IdleTimeoutDefault (5 min).
	IdleTimeout time.Duration
	// Headers are added to every request.
	Headers map[string]string
	// Now is the clock for message timestamps (and the ids Google's
	// adapter invents for calls without one); nil = time.Now.
	Now func() time.Time
	// WireCacheBytes bounds the JSON of its sessions' last requests an
	// adapter keeps (each adapter its own), to encode only each request's
	// new messages (requests are keyed by provider.Request.SessionID); 0
	// means the adapter's WireCacheBytesDefault, < 0 keeps none.
	WireCacheBytes int
}

// withDefaults returns c with its clock set (time.Now when nil).
func (c Config) withDefaults() Config {
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}
