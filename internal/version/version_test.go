package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"stamped", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/lanefleet/lanefleet", Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}},
			"lanefleet v1.2.3 commit 0123456789ab (modified) 2026-01-02T03:04:05Z go1.26.0"},
		// go build under GOFLAGS=-buildvcs=false: no vcs settings.
		{"unstamped", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/lanefleet/lanefleet", Version: "(devel)"}},
			"lanefleet (devel) commit unknown go1.26.0"},
		{"no main version", debug.BuildInfo{GoVersion: "go1.26.0"}, "lanefleet (devel) commit unknown go1.26.0"},
	} {
		if got := fromBuildInfo(&c.bi).String(); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
