package security

import (
	"fmt"
	"io"
)

// kdfVersion starts every hierarchy path (Rust M2M_KDF_VERSION).
const kdfVersion = "m2m/v1"

// MinMasterLen is the shortest org master secret NewHierarchy accepts. The
// Rust KeyHierarchy accepts any non-empty secret; m2md refuses secrets too
// short to be keys.
const MinMasterLen = 16

// Purpose separates the keys one agent derives for different jobs
// (Rust KeyPurpose); it is the last element of the HKDF info path.
type Purpose uint8

const (
	PurposeIdentity Purpose = iota + 1
	PurposeEncryption
	PurposeAuthentication
	PurposeSession
)

// String returns the path element: "identity", "encryption",
// "authentication" or "session".
func (p Purpose) String() string {
	switch p {
	case PurposeIdentity:
		return "identity"
	case PurposeEncryption:
		return "encryption"
	case PurposeAuthentication:
		return "authentication"
	case PurposeSession:
		return "session"
	}
	return fmt.Sprintf("Purpose(%d)", uint8(p))
}

func (p Purpose) check() error {
	if p < PurposeIdentity || p > PurposeSession {
		return fmt.Errorf("%w: %d", ErrInvalidPurpose, uint8(p))
	}
	return nil
}

// sortedPair orders two agent ids byte-wise, so that both ends of a
// session derive the same path (Rust: a <= b → a first).
func sortedPair(a, b string) (lo, hi string) {
	if a <= b {
		return a, b
	}
	return b, a
}

func sessionPath(org, a, b, sid string) string {
	lo, hi := sortedPair(a, b)
	return kdfVersion + "/" + org + "/session/" + lo + ":" + hi + "/" + sid
}

// Hierarchy derives an organisation's keys from its master secret (Rust
// KeyHierarchy, wire reference §4.4). Every derivation is HKDF-SHA256 with
// the master secret as IKM, no salt, 32 bytes of output, and the info path
// given at each method. A Hierarchy is safe for concurrent use, except
// that Wipe must not race with the other methods.
type Hierarchy struct {
	org    string
	master []byte
}

// NewHierarchy copies master (at least MinMasterLen bytes) for org (a
// valid ID); the caller may wipe its own copy afterwards.
func NewHierarchy(master []byte, org string) (*Hierarchy, error) {
	if len(master) < MinMasterLen {
		return nil, fmt.Errorf("%w: master secret of %d bytes, need at least %d",
			ErrInvalidKey, len(master), MinMasterLen)
	}
	if err := validateIDs("org", org); err != nil {
		return nil, err
	}
	return &Hierarchy{org: org, master: append([]byte(nil), master...)}, nil
}

// Org returns the organisation id.
func (h *Hierarchy) Org() string { return h.org }

// Wipe clears the hierarchy's copy of the master secret; later derivations
// fail with ErrInvalidKey.
func (h *Hierarchy) Wipe() {
	clear(h.master)
	h.master = nil
}

func (h *Hierarchy) String() string             { return "security.Hierarchy(" + h.org + ", " + redacted + ")" }
func (h *Hierarchy) Format(f fmt.State, _ rune) { io.WriteString(f, h.String()) }

// OrgKey derives the org key: info "m2m/v1/{org}". It is the IKM of
// AgentContext.OrgSessionKey.
func (h *Hierarchy) OrgKey() (Key, error) {
	return derive32(h.master, kdfVersion+"/"+h.org)
}

// AgentKey derives an agent's identity key: info "m2m/v1/{org}/{agent}".
// It is also the agent_key of the m2md HELLO proof (docs/protocol.md §5.2).
func (h *Hierarchy) AgentKey(agent string) (Key, error) {
	if err := validateIDs("agent", agent); err != nil {
		return Key{}, err
	}
	return derive32(h.master, kdfVersion+"/"+h.org+"/"+agent)
}

// AgentPurposeKey derives an agent's key for one purpose from the master
// secret: info "m2m/v1/{org}/{agent}/{purpose}" (Rust
// derive_agent_key_for_purpose). AgentContext.PurposeKey uses the same
// path with the agent key as IKM and so gives a different key.
func (h *Hierarchy) AgentPurposeKey(agent string, p Purpose) (Key, error) {
	if err := validateIDs("agent", agent); err != nil {
		return Key{}, err
	}
	if err := p.check(); err != nil {
		return Key{}, err
	}
	return derive32(h.master, kdfVersion+"/"+h.org+"/"+agent+"/"+p.String())
}

// MasterSessionKey derives a session key for agents a and b from the
// MASTER secret: info "m2m/v1/{org}/session/{lo}:{hi}/{sid}", lo/hi the two
// ids in byte order (Rust KeyHierarchy::derive_session_key). Only a holder
// of the master secret can compute it. Agents that hold just the org key
// use AgentContext.OrgSessionKey, which hashes the same path with a
// different IKM and gives a DIFFERENT key; the two are not interchangeable.
func (h *Hierarchy) MasterSessionKey(a, b, sid string) (Key, error) {
	if err := validateIDs("agent", a, "agent", b, "session id", sid); err != nil {
		return Key{}, err
	}
	return derive32(h.master, sessionPath(h.org, a, b, sid))
}

// SharedKey derives the org-wide shared key: info "m2m/v1/{org}/shared".
func (h *Hierarchy) SharedKey() (Key, error) {
	return derive32(h.master, kdfVersion+"/"+h.org+"/shared")
}

// AgentContext derives what one agent is handed by its organisation: its
// identity key and the org key (Rust AgentKeyContext::from_hierarchy).
func (h *Hierarchy) AgentContext(agent string) (*AgentContext, error) {
	ak, err := h.AgentKey(agent)
	if err != nil {
		return nil, err
	}
	ok, err := h.OrgKey()
	if err != nil {
		ak.Wipe()
		return nil, err
	}
	return &AgentContext{org: h.org, agent: agent, orgKey: ok, agentKey: ak}, nil
}

// AgentContext is one agent's key material (Rust AgentKeyContext): its
// identity key (HKDF(master, "m2m/v1/{org}/{agent}")) and the org key
// (HKDF(master, "m2m/v1/{org}")), without the master secret.
type AgentContext struct {
	org, agent       string
	orgKey, agentKey Key
}

// NewAgentContext builds a context from keys handed out elsewhere (Rust
// AgentKeyContext::from_keys). Neither key may be all zeros.
func NewAgentContext(org, agent string, orgKey, agentKey Key) (*AgentContext, error) {
	if err := validateIDs("org", org, "agent", agent); err != nil {
		return nil, err
	}
	if orgKey.IsZero() || agentKey.IsZero() {
		return nil, fmt.Errorf("%w: all-zero org or agent key", ErrInvalidKey)
	}
	return &AgentContext{org: org, agent: agent, orgKey: orgKey, agentKey: agentKey}, nil
}

// Org and Agent return the ids the context was made for.
func (c *AgentContext) Org() string   { return c.org }
func (c *AgentContext) Agent() string { return c.agent }

func (c *AgentContext) String() string {
	return "security.AgentContext(" + c.org + "/" + c.agent + ", " + redacted + ")"
}
func (c *AgentContext) Format(f fmt.State, _ rune) { io.WriteString(f, c.String()) }

// Wipe clears both keys; later derivations fail with ErrInvalidKey.
func (c *AgentContext) Wipe() {
	c.orgKey.Wipe()
	c.agentKey.Wipe()
}

// OrgSessionKey derives the session key with peer from the ORG KEY: info
// "m2m/v1/{org}/session/{lo}:{hi}/{sid}" (Rust
// AgentKeyContext::derive_session_key, the variant the Rust multi-agent
// tests use). Both agents of an org get the same key without talking to
// each other. Not equal to Hierarchy.MasterSessionKey for the same ids.
func (c *AgentContext) OrgSessionKey(peer, sid string) (Key, error) {
	if err := validateIDs("agent", peer, "session id", sid); err != nil {
		return Key{}, err
	}
	if c.orgKey.IsZero() {
		return Key{}, fmt.Errorf("%w: org key wiped", ErrInvalidKey)
	}
	return derive32(c.orgKey[:], sessionPath(c.org, c.agent, peer, sid))
}

// PurposeKey derives a purpose key from the agent's identity key: info
// "m2m/v1/{org}/{agent}/{purpose}" (Rust AgentKeyContext::derive_key).
func (c *AgentContext) PurposeKey(p Purpose) (Key, error) {
	if err := p.check(); err != nil {
		return Key{}, err
	}
	if c.agentKey.IsZero() {
		return Key{}, fmt.Errorf("%w: agent key wiped", ErrInvalidKey)
	}
	return derive32(c.agentKey[:], kdfVersion+"/"+c.org+"/"+c.agent+"/"+p.String())
}
