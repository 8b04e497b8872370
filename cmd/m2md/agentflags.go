package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
)

// agentKeyEnvVar holds an agent's key (64 hex digits) for the agent
// commands when --agent-key-file is not given.
const agentKeyEnvVar = "M2MD_AGENT_KEY"

// agentFlags are the flags every agent command (demo provider, demo
// requester, upstream) takes: where the daemon is and how it is trusted, who
// the agent is, how it authenticates, and the log.
type agentFlags struct {
	url, pin, certFile, security string
	agent, role                  string
	org, keyFile, keyEnv         string
	log                          *logFlags
}

// registerAgentFlags defines the agent flags on fs; role names the agent in
// its default id, logLevel is its default --log-level.
func registerAgentFlags(fs *flag.FlagSet, role, logLevel string) *agentFlags {
	a := &agentFlags{role: role}
	certFile := ""
	if dir, err := certs.DefaultDevDir(); err == nil {
		certFile = filepath.Join(dir, certs.DevCertFile)
	}
	fs.StringVar(&a.url, "url", "quic://127.0.0.1:4433", "daemon `URL`: quic://host:port, ws://host:port/m2m or wss://…")
	fs.StringVar(&a.pin, "pin", "", "SHA-256 `fingerprint` of the daemon's certificate (default: read from --cert)")
	fs.StringVar(&a.certFile, "cert", certFile, "the daemon's development certificate `file`, to pin ('m2md serve' makes it there for this user)")
	fs.StringVar(&a.security, "security", "aead", "frame security `mode`: none, hmac or aead")
	fs.StringVar(&a.agent, "agent", "", "agent `id` on the mesh (default: "+role+"- and 6 random hex digits, new at each start, so that\ninstances never replace each other; required with --org, whose key is made for one id)")
	fs.StringVar(&a.org, "org", "", "`org` to authenticate as, when the daemon has --org-secrets-file (with --agent and the agent's key)")
	fs.StringVar(&a.keyFile, "agent-key-file", "", "`file` holding the agent's key for --org, 64 hex digits, mode 0600 ('m2md key agent' writes it);\ndefault: the variable --agent-key-env names")
	fs.StringVar(&a.keyEnv, "agent-key-env", agentKeyEnvVar, "environment `variable` holding the agent's key for --org when --agent-key-file is not given")
	a.log = registerLogFlags(fs, logLevel)
	return a
}

// options returns the client options the flags describe: the daemon's pin,
// the security mode, the agent id and its authentication.
func (a *agentFlags) options() (client.Options, error) {
	var opt client.Options
	var err error
	if opt.Security, err = parseSecurity("security", a.security); err != nil {
		return opt, err
	}
	if opt.AgentID, err = a.agentID(); err != nil {
		return opt, err
	}
	if opt.Org, opt.AgentKey, err = a.auth(); err != nil {
		return opt, err
	}
	if strings.HasPrefix(a.url, "ws://") {
		return opt, nil
	}
	opt.PinSHA256 = a.pin
	if opt.PinSHA256 == "" {
		fp, err := certFingerprint(a.certFile)
		if err != nil {
			return opt, fmt.Errorf("no --pin and no certificate to pin (%v): start 'm2md serve' first as the same user (it makes the certificate there), or pass --pin FINGERPRINT ('m2md serve' logs it) or --cert FILE", err)
		}
		opt.PinSHA256 = fp
	}
	return opt, nil
}

// agentID is --agent, or the role with a random suffix: two instances
// started with the defaults (two model servers behind two upstreams) must
// not take each other's id, since the daemon replaces an agent whose id
// connects again.
func (a *agentFlags) agentID() (string, error) {
	if a.agent != "" {
		return a.agent, nil
	}
	if a.org != "" {
		return "", usagef("--org %s needs --agent: the agent key is made for one agent id", a.org)
	}
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return a.role + "-" + hex.EncodeToString(b[:]), nil
}

// auth returns --org and the agent key from --agent-key-file, else the
// variable --agent-key-env names.
func (a *agentFlags) auth() (string, security.Secret, error) {
	var text, from string
	switch {
	case a.keyFile != "":
		b, err := readPrivateFile(a.keyFile)
		if err != nil {
			return "", nil, fmt.Errorf("--agent-key-file: %w", err)
		}
		text, from = strings.TrimSpace(string(b)), "--agent-key-file "+a.keyFile
		clear(b)
	case a.keyEnv != "" && os.Getenv(a.keyEnv) != "":
		text, from = strings.TrimSpace(os.Getenv(a.keyEnv)), "$"+a.keyEnv
	}
	switch {
	case a.org == "" && text == "":
		return "", nil, nil
	case a.org == "" && a.keyFile != "":
		return "", nil, usagef("--agent-key-file needs --org: the key authenticates an agent of one org")
	case a.org == "":
		// A key in the environment without --org is not used: the
		// daemon runs open or the agent is refused, and the variable
		// may be meant for another command.
		return "", nil, nil
	case text == "":
		return "", nil, usagef("--org %s needs the agent's key: --agent-key-file FILE or $%s ('m2md key agent' makes it from the org secret)", a.org, a.keyEnv)
	}
	k, err := hex.DecodeString(text)
	if err != nil || len(k) != len(security.Key{}) {
		return "", nil, usagef("%s must hold the agent key as 64 hex digits ('m2md key agent' makes it)", from)
	}
	return a.org, security.Secret(k), nil
}

// readPrivateFile reads a file holding a secret, refusing on Unix one that
// group or others may read: the secret is as good as published there.
func readPrivateFile(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if runtime.GOOS != "windows" && info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o; a file holding a key must not be readable by others (chmod 600 %s)", path, info.Mode().Perm(), path)
	}
	return os.ReadFile(path)
}

// agentEnded explains how an agent's session ended, when the user has
// something to change.
func agentEnded(err error, agent string) error {
	var ce *negotiate.CloseError
	if errors.As(err, &ce) && ce.Reason == negotiate.ReasonReplaced {
		return fmt.Errorf("another agent connected as %q and replaced this one: give each instance its own --agent (or leave --agent out: each start then picks its own id): %w", agent, err)
	}
	return err
}

// dialError explains a refused HELLO in the agent command's flags.
func (a *agentFlags) dialError(err error) error {
	var re *negotiate.RejectError
	if !errors.As(err, &re) || re.Code != negotiate.RejectSecurityPolicy {
		return err
	}
	switch {
	case a.org != "" && re.Message == "authentication failed":
		return fmt.Errorf("%w: the daemon did not accept this agent's key: the key must be the one 'm2md key agent --org %s --agent %s' makes from the org secret the daemon has (--agent-key-file or $%s)", err, a.org, a.agent, a.keyEnv)
	case a.org == "" && re.Message == "agent authentication required":
		return fmt.Errorf("%w: the daemon has --org-secrets-file: pass --org, --agent and the agent's key (docs/operations.md, \"Authenticated agents\")", err)
	}
	return err
}
