package pathless

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestErr: a real open failure loses its path but keeps its cause; an
// error without a *fs.PathError comes back as it was.
func TestErr(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "secret-dir", "nope")
	_, err := os.Open(missing)
	if err == nil {
		t.Fatal("opened a missing file")
	}
	got := Err(fmt.Errorf("wrapped: %w", err))
	if strings.Contains(got.Error(), "secret-dir") {
		t.Errorf("Err kept the path: %v", got)
	}
	if !errors.Is(got, fs.ErrNotExist) {
		t.Errorf("Err lost the cause: %v", got)
	}
	plain := errors.New("plain")
	if Err(plain) != plain {
		t.Errorf("Err changed an error without a path")
	}
}
