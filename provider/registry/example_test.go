package registry_test

import (
	"fmt"

	"github.com/lanefleet/lanefleet/provider/registry"
)

// The worker resolves the lane's model and gets its provider; keys and base
// URLs come from the environment it passes in (os.Getenv in production).
func ExampleRegistry_ProviderFor() {
	env := map[string]string{"ANTHROPIC_API_KEY": "sk-ant-example"}
	reg := registry.FromEnv(func(k string) string { return env[k] })

	fmt.Println("any key configured:", reg.HasAPIKey())
	res, p, err := reg.ProviderFor("anthropic/claude-sonnet-4-6")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Model.API, res.Model.ContextWindow, p != nil)

	res, _, _ = reg.ProviderFor("groq/brand-new-model")
	fmt.Println(res.Model.API, res.Model.ContextWindow, res.Warning != "")
	// Output:
	// any key configured: true
	// anthropic-messages 1000000 true
	// openai-completions 128000 true
}
