package runner

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/lanefleet/lanefleet/authprofile"
)

// TestProfileKeyReadsRefs: a profile's secret held in a file is read at
// each use (a rotated file is the next call's key); one that cannot be
// read is the profile's errNoKey, which moves the run to the next profile.
func TestProfileKeyReadsRefs(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte("sk-ant-oat01-first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := authprofile.Profile{ID: "anthropic:sub", Type: authprofile.TypeToken, Provider: "anthropic", TokenRef: "file:" + path}
	if k, err := profileKey(p); err != nil || k.Reveal() != "sk-ant-oat01-first" {
		t.Fatalf("key: %v", err)
	}
	if err := os.WriteFile(path, []byte("sk-ant-oat01-second"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := profileKey(p); err != nil || k.Reveal() != "sk-ant-oat01-second" {
		t.Fatalf("rotated key: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := profileKey(p); !errors.Is(err, errNoKey) || !errors.Is(err, authprofile.ErrSecretRef) {
		t.Errorf("missing file: %v", err)
	}
}
