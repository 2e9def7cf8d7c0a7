package registry_test

import (
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/provider/registry"
)

// TestAzureFromEnvironment: with only AZURE_OPENAI_API_KEY and the
// endpoint set (what `make demo` passes on), the worker's default model is
// Azure's gpt-5-mini deployment, which it may run, and a call of it
// reaches the deployment's URL with the key in api-key; without an
// endpoint the worker refuses the model at start, saying what to set.
func TestAzureFromEnvironment(t *testing.T) {
	t.Parallel()
	srv, got := speaking(t, `data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	res := registry.NewResolver(registry.ResolverConfig{Env: envOf(map[string]string{"AZURE_OPENAI_API_KEY": "azkey", "AZURE_OPENAI_ENDPOINT": srv.URL + "/"})})
	streamsDefault(t, res, registry.AzureDefault, "azure-openai/gpt-5-mini")
	got.mu.Lock()
	if got.path != "/openai/deployments/gpt-5-mini/chat/completions" || got.header.Get("api-key") != "azkey" {
		t.Errorf("call %s api-key %q", got.path, got.header.Get("api-key"))
	}
	got.mu.Unlock()

	bare := registry.NewResolver(registry.ResolverConfig{Env: envOf(map[string]string{"AZURE_OPENAI_API_KEY": "azkey"})})
	if _, err := bare.Policy(registry.AzureDefault, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "AZURE_OPENAI_ENDPOINT") {
		t.Errorf("no endpoint: %v", err)
	}
	named := registry.NewResolver(registry.ResolverConfig{Env: envOf(map[string]string{"AZURE_OPENAI_API_KEY": "azkey", "AZURE_OPENAI_RESOURCE": "contoso"})})
	if m, _, err := named.Resolve("azure/my-deployment"); err != nil || m.BaseURL != "https://contoso.openai.azure.com" {
		t.Errorf("resource name: %q %v", m.BaseURL, err)
	}
	evil := registry.NewResolver(registry.ResolverConfig{Env: envOf(map[string]string{"AZURE_OPENAI_API_KEY": "azkey", "AZURE_OPENAI_RESOURCE": "evil.example/x"})})
	if err := evil.Check(registry.AzureDefault); err == nil {
		t.Error("a resource name that moves the host is accepted")
	}
}
