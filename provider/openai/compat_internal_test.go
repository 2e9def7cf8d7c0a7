package openai

import (
	"testing"

	"github.com/lanefleet/lanefleet/provider"
)

func TestOllamaNumCtx(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		m    provider.Model
		want int
	}{
		{"provider ollama: the context window", provider.Model{Provider: "ollama", BaseURL: "http://gpu-box:8080/v1", ContextWindow: 32768}, 32768},
		{"provider ollama without a window: max tokens", provider.Model{Provider: "Ollama", MaxTokens: 8192}, 8192},
		{"provider ollama knowing neither: the default window", provider.Model{Provider: "ollama"}, 200_000},
		{"the local default endpoint, any provider id", provider.Model{Provider: "local", BaseURL: "http://localhost:11434/v1", ContextWindow: 65536}, 65536},
		{"the local default endpoint by address", provider.Model{Provider: "local", BaseURL: "http://127.0.0.1:11434/v1", ContextWindow: 65536}, 65536},
		{"an ollama-named provider on 11434 at /v1", provider.Model{Provider: "my-ollama", BaseURL: "http://gpu-box:11434/v1", ContextWindow: 4096}, 4096},
		{"an ollama-named provider on 11434 at /", provider.Model{Provider: "my-ollama", BaseURL: "http://gpu-box:11434/", ContextWindow: 4096}, 4096},
		{"an ollama-named provider behind another path", provider.Model{Provider: "my-ollama", BaseURL: "http://gpu-box:11434/proxy/v1", ContextWindow: 4096}, 0},
		{"an ollama-named provider on another port", provider.Model{Provider: "my-ollama", BaseURL: "http://gpu-box:8080/v1", ContextWindow: 4096}, 0},
		{"another server on 11434, not local, not named", provider.Model{Provider: "vllm", BaseURL: "http://gpu-box:11434/v1", ContextWindow: 4096}, 0},
		{"openai", provider.Model{Provider: "openai", ContextWindow: 400000}, 0},
		{"lm studio", provider.Model{Provider: "lmstudio", BaseURL: "http://localhost:1234/v1", ContextWindow: 4096}, 0},
	}
	for _, tt := range tests {
		if got := ollamaNumCtx(tt.m); got != tt.want {
			t.Errorf("%s: num_ctx %d, want %d", tt.name, got, tt.want)
		}
	}
}
