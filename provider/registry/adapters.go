package registry

import (
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/anthropic"
	"github.com/lanefleet/lanefleet/provider/azure"
	"github.com/lanefleet/lanefleet/provider/bedrock"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/provider/google"
	"github.com/lanefleet/lanefleet/provider/internal/adapter"
	"github.com/lanefleet/lanefleet/provider/openai"
	"github.com/lanefleet/lanefleet/provider/vertex"
)

// addAdapters registers the adapters besides Chat Completions.
func addAdapters(m map[string]provider.Provider, cfg Config) {
	m[catalog.APIAnthropicMessages] = anthropic.New(anthropic.Config{HTTPClient: cfg.HTTPClient, IdleTimeout: cfg.IdleTimeout, Now: cfg.Now, WireCacheBytes: cfg.WireCacheBytes})
	m[catalog.APIGoogleGenerativeAI] = google.New(google.Config{HTTPClient: cfg.HTTPClient, IdleTimeout: cfg.IdleTimeout, Now: cfg.Now, WireCacheBytes: cfg.WireCacheBytes})
	m[catalog.APIBedrockConverse] = bedrock.New(bedrock.Config{HTTPClient: cfg.HTTPClient, IdleTimeout: cfg.IdleTimeout, Now: cfg.Now, Load: bedrock.LoadFromEnv(cfg.Env)})
	m[catalog.APIOpenAIResponses] = openai.NewResponses(openai.Config{HTTPClient: cfg.HTTPClient, IdleTimeout: cfg.IdleTimeout, Now: cfg.Now, WireCacheBytes: cfg.WireCacheBytes})
	v := vertex.New(vertex.Config{Config: adapter.Config{HTTPClient: cfg.HTTPClient, IdleTimeout: cfg.IdleTimeout, Now: cfg.Now, WireCacheBytes: cfg.WireCacheBytes}, Env: cfg.Env})
	m[catalog.APIGoogleVertex], m[catalog.APIAnthropicVertex] = v, v
	az := azure.New(azure.Config{Config: adapter.Config{HTTPClient: cfg.HTTPClient, IdleTimeout: cfg.IdleTimeout, Now: cfg.Now, WireCacheBytes: cfg.WireCacheBytes}, Env: cfg.Env})
	m[catalog.APIAzureCompletions], m[catalog.APIAzureResponses] = az, az
}
