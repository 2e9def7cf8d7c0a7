package fleet

import (
	"slices"
	"testing"

	"github.com/lanefleet/lanefleet/authprofile"
)

// TestSecretsSplitAccessKeyPairs: a Bedrock profile's key is an access
// key pair; the secret access key is masked on its own, not only the pair.
func TestSecretsSplitAccessKeyPairs(t *testing.T) {
	t.Parallel()
	const pair = "AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	got := secrets(Config{Env: func(string) string { return "" }}, &authprofile.Store{Profiles: []authprofile.Profile{{ID: "bedrock:a", Provider: "bedrock", Key: pair}}}, authprofile.SecretSources{})
	for _, want := range []string{pair, "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"} {
		if !slices.Contains(got, want) {
			t.Errorf("%q not masked", want)
		}
	}
}
