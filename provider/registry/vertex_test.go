package registry_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/provider/registry"
)

// keyFile writes a service-account key file whose token_uri is a local
// endpoint issuing "ya29.test", and returns its path.
func keyFile(t *testing.T) string {
	t.Helper()
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"ya29.test","token_type":"Bearer","expires_in":3600}`))
	}))
	t.Cleanup(tokens.Close)
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{"type": "service_account", "project_id": "proj-key", "private_key_id": "k1",
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), "client_email": "sa@proj-key.iam.gserviceaccount.com", "token_uri": tokens.URL})
	path := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestVertexFromEnvironment: with only GOOGLE_APPLICATION_CREDENTIALS and
// GOOGLE_CLOUD_PROJECT set (what `make demo` passes on), the worker's
// default model is Vertex's Gemini, which it may run, and a call of it
// reaches VERTEX_BASE_URL on the project's path with the key file's token.
func TestVertexFromEnvironment(t *testing.T) {
	t.Parallel()
	srv, got := speaking(t, "data: {\"candidates\": [{\"content\": {\"role\": \"model\",\"parts\": [{\"text\": \"hi\"}]},\"finishReason\": \"STOP\"}]}\r\n\r\n")
	env := envOf(map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": keyFile(t), "GOOGLE_CLOUD_PROJECT": "proj-env", "VERTEX_BASE_URL": srv.URL})
	res := registry.NewResolver(registry.ResolverConfig{Env: env})
	streamsDefault(t, res, "vertex/gemini-2.5-flash", "")
	got.mu.Lock()
	defer got.mu.Unlock()
	path, auth := got.path, got.header.Get("Authorization")
	if want := "/v1/projects/proj-env/locations/global/publishers/google/models/gemini-2.5-flash:streamGenerateContent"; path != want || auth != "Bearer ya29.test" {
		t.Errorf("call %s %q, want %s with the token", path, auth, want)
	}
}

// TestVertexPolicy: the Vertex models run with a key file, or with
// GOOGLE_CLOUD_PROJECT alone (the metadata server's credentials); with
// neither the worker says what to set.
func TestVertexPolicy(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": "/etc/key.json"}, ""},
		{map[string]string{"GOOGLE_CLOUD_PROJECT": "p"}, ""},
		{nil, "set GOOGLE_APPLICATION_CREDENTIALS, or add an auth profile for vertex-anthropic to --auth-profiles, or set GOOGLE_CLOUD_PROJECT to use the default credentials of the machine"},
	} {
		res := registry.NewResolver(registry.ResolverConfig{Env: envOf(tt.env)})
		_, err := res.Policy("vertex-anthropic/claude-sonnet-4-5@20250929", nil, nil, nil)
		if got := ""; err != nil {
			got = err.Error()
			if tt.want == "" || !strings.Contains(got, tt.want) {
				t.Errorf("env %v: %v", tt.env, err)
			}
		} else if tt.want != "" {
			t.Errorf("env %v: allowed, want %q", tt.env, tt.want)
		}
	}
	// Claude's own variable moves Claude only.
	r := registry.FromEnv(envOf(map[string]string{"VERTEX_BASE_URL": "http://v.example", "VERTEX_ANTHROPIC_BASE_URL": "http://a.example"}))
	for ref, want := range map[string]string{"vertex/gemini-2.5-pro": "http://v.example", "vertex-anthropic/claude-opus-4-6": "http://a.example"} {
		if res, err := r.Resolve(ref); err != nil || res.Model.BaseURL != want {
			t.Errorf("%s: %v %s, want %s", ref, err, res.Model.BaseURL, want)
		}
	}
}
