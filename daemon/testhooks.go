package daemon

import "github.com/m2md/m2md/internal/daemonhook"

// The hooks failure drills and tests need (daemonhook.Hooks documents
// each), handed to the test harness through an internal package so that
// they stay out of the daemon's API.
func init() {
	daemonhook.Of = func(srv any) daemonhook.Hooks {
		s := srv.(*Server)
		return daemonhook.Hooks{Crash: s.simulateCrash, SessionOpen: s.sessionOpen, AgentNode: s.agentNode}
	}
}

func (s *Server) simulateCrash() {
	s.crashed.Do(func() { close(s.crash) })
}

func (s *Server) sessionOpen(sessionID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for se := range s.sessions {
		if se.neg.ID == sessionID {
			return true
		}
	}
	return false
}

func (s *Server) agentNode(org, agentID string) (node string, ok bool) {
	rs, ok := s.router.Lookup(org, agentID)
	if !ok {
		return "", false
	}
	return rs.Value().homeNode(), true
}
