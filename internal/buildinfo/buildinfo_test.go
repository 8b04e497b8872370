package buildinfo

import (
	"runtime"
	"testing"
)

func TestGet(t *testing.T) {
	in := Get()
	if in.GoVersion != runtime.Version() {
		t.Errorf("GoVersion %q, want %q", in.GoVersion, runtime.Version())
	}
	if in.Version == "" || in.Commit == "" {
		t.Errorf("empty field in %+v", in)
	}
}

func TestCommitFromLinker(t *testing.T) {
	old := Commit
	defer func() { Commit = old }()
	Commit = "0123abc"
	if got := read().Commit; got != "0123abc" {
		t.Errorf("Commit %q, want the -X value", got)
	}
}
