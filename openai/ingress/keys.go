package ingress

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"strings"

	"github.com/m2md/m2md/security"
)

// Identity is who an API key acts as on the mesh: an agent id, and the org
// it belongs to when the daemon authenticates agents.
type Identity struct {
	AgentID string
	Org     string
}

// Keys maps API keys to identities. Keys are kept only as SHA-256 hashes,
// so a lookup's timing says nothing about a key's bytes.
type Keys struct {
	byHash map[[32]byte]Identity
}

// Len is the number of keys.
func (k *Keys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.byHash)
}

// Identities returns each identity once.
func (k *Keys) Identities() []Identity {
	seen := map[Identity]bool{}
	var out []Identity
	for _, id := range k.byHash {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

func (k *Keys) lookup(key string) (Identity, bool) {
	id, ok := k.byHash[sha256.Sum256([]byte(key))]
	return id, ok
}

// ParseKeys reads a keys file: one "KEY AGENT_ID [ORG]" per line, blank
// lines and "#" comments ignored. Keys are at least 8 bytes without
// spaces; agent ids and orgs follow the agent id rule.
func ParseKeys(r io.Reader, name string) (*Keys, error) {
	k := &Keys{byHash: map[[32]byte]Identity{}}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("%s:%d: want 'KEY AGENT_ID [ORG]'", name, line)
		}
		if len(f[0]) < 8 {
			return nil, fmt.Errorf("%s:%d: a key must be at least 8 characters", name, line)
		}
		id := Identity{AgentID: f[1]}
		if len(f) == 3 {
			id.Org = f[2]
		}
		if security.ValidateID(id.AgentID) != nil || (id.Org != "" && security.ValidateID(id.Org) != nil) {
			return nil, fmt.Errorf("%s:%d: agent id and org are 1-128 characters of [A-Za-z0-9_-]", name, line)
		}
		h := sha256.Sum256([]byte(f[0]))
		if _, dup := k.byHash[h]; dup {
			return nil, fmt.Errorf("%s:%d: key listed twice", name, line)
		}
		k.byHash[h] = id
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(k.byHash) == 0 {
		return nil, fmt.Errorf("%s: no keys", name)
	}
	return k, nil
}
