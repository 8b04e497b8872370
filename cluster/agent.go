package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
)

// Agent is one agent session registered on some node.
type Agent struct {
	// Org and ID are the agent's identity: the same id in two orgs is two
	// agents (Org is empty for daemons without org secrets).
	Org     string   `json:"org,omitempty"`
	ID      string   `json:"id"`
	Session string   `json:"session"`
	Node    string   `json:"node"`
	Models  []string `json:"models,omitempty"`
	// Stamp orders registrations of one agent id across the cluster: the
	// larger (Stamp, Node) is the newer connection and wins. The daemon
	// sets it (unix nanoseconds, pushed past any stamp it has seen for the
	// id, so a node with a slow clock still replaces what it replaces).
	Stamp int64 `json:"stamp"`
	// Proof shows that Node holds the secret of Org (auth.go's orgProof);
	// set by the announcing node, checked by every receiver.
	Proof []byte `json:"proof,omitempty"`
}

// Newer reports whether a is a newer registration than b.
func (a *Agent) Newer(b *Agent) bool {
	if a.Stamp != b.Stamp {
		return a.Stamp > b.Stamp
	}
	return a.Node > b.Node
}

func (a *Agent) valid() error {
	if len(a.Org) > 255 || len(a.ID) == 0 || len(a.ID) > 255 || len(a.Session) == 0 || len(a.Session) > 255 || len(a.Models) > 1024 || len(a.Proof) > 64 {
		return errors.New("cluster: bad agent")
	}
	for _, m := range a.Models {
		if len(m) == 0 || len(m) > 255 {
			return errors.New("cluster: bad model")
		}
	}
	return nil
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
