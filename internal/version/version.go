// Package version says which build of Lanefleet is running: the module
// version and the version-control revision the Go toolchain stamped into
// the binary (runtime/debug.ReadBuildInfo). `make build` stamps the
// revision; a plain `go build` under GOFLAGS=-buildvcs=false does not, and
// then the revision reads "unknown".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info describes a build.
type Info struct {
	Module   string `json:"module"`   // module path
	Version  string `json:"version"`  // module version; "(devel)" for a build from a work tree
	Revision string `json:"revision"` // VCS revision (12 hex digits), or "unknown"
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"` // built from a work tree with uncommitted changes
	Go       string `json:"go"`
}

// Get returns the running binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown", Revision: "unknown", Go: runtime.Version()}
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Module: bi.Main.Path, Version: bi.Main.Version, Revision: "unknown", Go: bi.GoVersion}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
			if len(in.Revision) > 12 {
				in.Revision = in.Revision[:12]
			}
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is the one-line form --version prints:
// "lanefleet (devel) commit 0123456789ab (modified) 2026-01-02T03:04:05Z go1.26.0".
func (i Info) String() string {
	s := fmt.Sprintf("lanefleet %s commit %s", i.Version, i.Revision)
	if i.Modified {
		s += " (modified)"
	}
	if i.Time != "" {
		s += " " + i.Time
	}
	return s + " " + i.Go
}
