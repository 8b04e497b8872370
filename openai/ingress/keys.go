package ingress

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
)

// Identity is who an API key acts as on the mesh: an agent id, and the org
// it belongs to when the daemon authenticates agents.
type Identity struct {
	AgentID string
	Org     string
}

// Keys maps API keys to identities and their limits. Keys are kept only
// as SHA-256 hashes, so a lookup's timing says nothing about a key's bytes.
type Keys struct {
	byHash map[[32]byte]keyEntry
}

// keyEntry is what a key acts as, and the name its limits and metrics go
// by (never the key itself).
type keyEntry struct {
	id    Identity
	name  string
	limit KeyLimits
}

// KeyLimits are the limits of one key name; zero fields do not limit.
type KeyLimits struct {
	// RequestsPerMinute bounds the requests begun per minute (a burst of
	// up to this many at once).
	RequestsPerMinute int
	// TokensPerMinute bounds the tokens used per minute, counted from the
	// answers' usage; each request reserves its max_tokens (and its
	// prompt, estimated at 4 bytes a token) up front.
	TokensPerMinute int
	// Concurrent bounds the requests in flight at once.
	Concurrent int
	// Models, when set, are the only models the key may ask for (and the
	// only ones GET /v1/models shows it).
	Models []string
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
	for _, e := range k.byHash {
		if !seen[e.id] {
			seen[e.id] = true
			out = append(out, e.id)
		}
	}
	return out
}

func (k *Keys) lookup(key string) (Identity, bool) {
	e, ok := k.entry(key)
	return e.id, ok
}

func (k *Keys) entry(key string) (keyEntry, bool) {
	e, ok := k.byHash[sha256.Sum256([]byte(key))]
	return e, ok
}

// names returns each key name once, with its limits.
func (k *Keys) names() map[string]KeyLimits {
	out := map[string]KeyLimits{}
	for _, e := range k.byHash {
		out[e.name] = e.limit
	}
	return out
}

// ParseKeys reads a keys file: one "KEY AGENT_ID [ORG] [SETTING=VALUE…]"
// per line, blank lines and "#" comments ignored. Keys are at least 8
// bytes without spaces; agent ids and orgs follow the agent id rule. The
// settings are name= (what limits and metrics go by; default the agent
// id: keys of one name share its limits, which all its lines must state
// alike), rpm=, tpm=, concurrent= (KeyLimits; 0 or absent: no limit) and
// models= (a comma-separated list).
func ParseKeys(r io.Reader, name string) (*Keys, error) {
	k := &Keys{byHash: map[[32]byte]keyEntry{}}
	byName := map[string]KeyLimits{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		all := strings.Fields(text)
		var f, settings []string
		for _, w := range all {
			if strings.Contains(w, "=") && len(f) >= 2 {
				settings = append(settings, w)
			} else if len(settings) > 0 {
				return nil, fmt.Errorf("%s:%d: settings (name=, rpm=, tpm=, concurrent=, models=) come after 'KEY AGENT_ID [ORG]'", name, line)
			} else {
				f = append(f, w)
			}
		}
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("%s:%d: want 'KEY AGENT_ID [ORG] [SETTING=VALUE…]'", name, line)
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
		// The default name holds the org: alice of one org and alice of
		// another are two agents, and must not share a quota.
		e := keyEntry{id: id, name: id.AgentID}
		if id.Org != "" {
			e.name = id.AgentID + "@" + id.Org
		}
		if err := e.set(settings); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if prev, ok := byName[e.name]; ok && !sameLimits(prev, e.limit) {
			return nil, fmt.Errorf("%s:%d: name %s has other limits on an earlier line: keys of one name share its limits", name, line, e.name)
		}
		byName[e.name] = e.limit
		h := sha256.Sum256([]byte(f[0]))
		if _, dup := k.byHash[h]; dup {
			return nil, fmt.Errorf("%s:%d: key listed twice", name, line)
		}
		k.byHash[h] = e
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(k.byHash) == 0 {
		return nil, fmt.Errorf("%s: no keys", name)
	}
	return k, nil
}

// set reads a line's settings.
func (e *keyEntry) set(settings []string) error {
	seen := map[string]bool{}
	for _, kv := range settings {
		key, val, _ := strings.Cut(kv, "=")
		if seen[key] {
			return fmt.Errorf("%s= given twice", key)
		}
		seen[key] = true
		switch key {
		case "name":
			if security.ValidateID(val) != nil {
				return errors.New("name= is 1-128 characters of [A-Za-z0-9_-]")
			}
			e.name = val
		case "rpm", "tpm", "concurrent":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 || n > maxLimit {
				return fmt.Errorf("%s= is a whole number from 0 (no limit) to %d", key, maxLimit)
			}
			switch key {
			case "rpm":
				e.limit.RequestsPerMinute = n
			case "tpm":
				e.limit.TokensPerMinute = n
			default:
				e.limit.Concurrent = n
			}
		case "models":
			for _, m := range strings.Split(val, ",") {
				if m == "" || len(m) > negotiate.MaxModelLen {
					return fmt.Errorf("models= is a comma-separated list of models of 1-%d bytes", negotiate.MaxModelLen)
				}
				e.limit.Models = append(e.limit.Models, m)
			}
		default:
			return fmt.Errorf("unknown setting %q: want name=, rpm=, tpm=, concurrent= or models=", key)
		}
	}
	return nil
}

// maxLimit bounds a limit's number: far beyond any real one, and small
// enough that rates and sums stay exact.
const maxLimit = 1 << 40

func sameLimits(a, b KeyLimits) bool {
	return a.RequestsPerMinute == b.RequestsPerMinute && a.TokensPerMinute == b.TokensPerMinute &&
		a.Concurrent == b.Concurrent && slices.Equal(a.Models, b.Models)
}
