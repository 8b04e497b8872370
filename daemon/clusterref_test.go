package daemon

import (
	"runtime"
	"testing"
)

// TestClusterRefDoesNotRetain: what the cluster's ring of sent replies
// keeps of a provider's session (session.ref) names the session while it
// lives and lets it go once nothing else holds it: the ring is 65,536
// entries per other node, and a strong reference would keep up to that
// many ended sessions, with their connections' buffers, alive.
func TestClusterRefDoesNotRetain(t *testing.T) {
	se := &session{agent: "prov"}
	ref := se.ref()
	if refSession(ref) != se || refSession(se.ref()) != se {
		t.Fatal("the ref does not name its session")
	}
	se = nil
	for range 5 {
		runtime.GC()
		if refSession(ref) == nil {
			return
		}
	}
	t.Fatal("the ring's ref keeps an ended session alive")
}
