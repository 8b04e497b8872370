package router

import (
	"errors"
	"fmt"
)

// ErrInvalidAgentID, ErrInvalidOrg and ErrInvalidModel refuse a registration
// (docs/protocol.md §3.1): an agent id or org is 1–128 characters of
// [A-Za-z0-9_-]; a model is 1–255 bytes (the routing header's length byte,
// wire reference §3.6).
var (
	ErrInvalidAgentID = errors.New("router: invalid agent id")
	ErrInvalidOrg     = errors.New("router: invalid org")
	ErrInvalidModel   = errors.New("router: invalid model")
	// ErrAgentIDTaken: RegisterIf's policy kept the session that holds the
	// agent id.
	ErrAgentIDTaken = errors.New("router: agent id held by another session")
)

const (
	maxAgentIDLen = 128
	maxModelLen   = 255
)

func validAgentID(id string) error { return validID(ErrInvalidAgentID, id) }

// validOrg: an org name follows the agent id rule (docs/protocol.md §3.1).
func validOrg(org string) error { return validID(ErrInvalidOrg, org) }

func validID(sentinel error, id string) error {
	if len(id) == 0 || len(id) > maxAgentIDLen {
		return fmt.Errorf("%w: length %d, want 1 to %d", sentinel, len(id), maxAgentIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: byte 0x%02x at offset %d is not one of [A-Za-z0-9_-]", sentinel, c, i)
		}
	}
	return nil
}

// cleanModels validates models and drops repeats, keeping the first
// occurrence's position.
func cleanModels(models []string) ([]string, error) {
	if len(models) == 0 {
		return nil, nil
	}
	out := make([]string, 0, len(models))
	seen := make(map[string]struct{}, len(models))
	for i, m := range models {
		if len(m) == 0 || len(m) > maxModelLen {
			return nil, fmt.Errorf("%w: model %d has length %d, want 1 to %d", ErrInvalidModel, i, len(m), maxModelLen)
		}
		if _, dup := seen[m]; dup {
			continue
		}
		seen[m] = struct{}{}
		out = append(out, m)
	}
	return out, nil
}
