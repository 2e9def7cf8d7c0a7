package tools

import (
	"slices"
	"testing"
)

func TestBuiltinNames(t *testing.T) {
	list, err := Builtin(Workspace{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list.Specs() {
		names = append(names, s.Name)
	}
	_, unconfined := boxes(t)
	ex, err := Exec(Workspace{Dir: t.TempDir()}, unconfined)
	if err != nil {
		t.Fatal(err)
	}
	names = append(names, ex.Spec().Name)
	if !slices.Equal(names, BuiltinNames()[:len(names)]) {
		t.Fatalf("Builtin offers %v, BuiltinNames says %v", names, BuiltinNames())
	}
}
