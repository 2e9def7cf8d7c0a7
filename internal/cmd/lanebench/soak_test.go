package main

import (
	"slices"
	"testing"
)

// TestSoakCheckpoints: -soak-at takes ascending positive turn counts and
// refuses anything else.
func TestSoakCheckpoints(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]int64{
		"":                  nil,
		"10000,20000,40000": {10000, 20000, 40000},
		" 5 , 7 ":           {5, 7},
		"1000":              {1000},
	} {
		got, err := soakCheckpoints(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("soakCheckpoints(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"10,5", "10,10", "0", "-1", "x", "10,", "1e4"} {
		if got, err := soakCheckpoints(in); err == nil {
			t.Errorf("soakCheckpoints(%q) = %v, want an error", in, got)
		}
	}
}
