// Package buildinfo says which build of m2md is running: the module version,
// the VCS commit and the Go version, read from the binary's embedded build
// information. `m2md version` prints it and the daemon exports it as
// m2md_build_info.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Commit can be set at link time when the build has no VCS stamp (go build
// -buildvcs=false, or a build outside a checkout):
//
//	go build -ldflags "-X github.com/m2md/m2md/internal/buildinfo.Commit=$(git rev-parse HEAD)" ./cmd/m2md
var Commit string

// Info describes the running binary.
type Info struct {
	// Version is the main module's version: a tag such as v0.4.0 for
	// `go install …@v0.4.0`, "(devel)" for a build from a checkout.
	Version string
	// Commit is the VCS revision, with "-dirty" when the tree had changes;
	// "unknown" when the build recorded none.
	Commit string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

var (
	once sync.Once
	info Info
)

// Get returns the running binary's build information.
func Get() Info {
	once.Do(func() { info = read() })
	return info
}

func read() Info {
	in := Info{Version: "(devel)", Commit: Commit, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if in.Commit == "" {
			in.Commit = "unknown"
		}
		return in
	}
	if bi.Main.Version != "" {
		in.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		in.GoVersion = bi.GoVersion
	}
	var rev string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if in.Commit == "" && rev != "" {
		in.Commit = rev
		if dirty {
			in.Commit += "-dirty"
		}
	}
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	return in
}
