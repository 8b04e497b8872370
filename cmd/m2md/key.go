package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/m2md/m2md/security"
)

const keyUsage = `Usage: m2md key <org|agent> [flags]

The secrets of an authenticated mesh (docs/operations.md, "Authenticated agents"):

  org    makes an org's master secret: a line 'ORG HEX' of the daemon's
         --org-secrets-file
  agent  derives an agent's key from its org's secret (docs/protocol.md §5),
         what 'm2md demo' and 'm2md upstream' read from --agent-key-file

Run 'm2md key org --help' or 'm2md key agent --help' for the flags.
`

// orgSecretLen is the length of the org secrets 'm2md key org' makes: the
// HKDF-SHA256 key size, twice security.MinMasterLen.
const orgSecretLen = 32

func runKey(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, keyUsage)
		return usagef("key needs a kind: org or agent")
	}
	switch args[0] {
	case "org":
		return runKeyOrg(args[1:], stdout, stderr)
	case "agent":
		return runKeyAgent(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		return helpError{keyUsage}
	}
	return usagef("key kind must be org or agent, not %q (run 'm2md key --help')", args[0])
}

func runKeyOrg(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("key org", `key org --org ORG [--out FILE]

Makes a new random master secret for ORG and writes it as the line 'ORG HEX',
the format of 'm2md serve --org-secrets-file'. With --out, the line is added
to FILE (made with mode 0600, its folder 0700); an org FILE already lists is
refused, since replacing its secret changes every agent key of the org.
Without --out it is printed on stdout.`, stderr)
	org := fs.String("org", "", "the org's `id` (letters, digits, '-' and '_')")
	out := fs.String("out", "", "org secrets `file` to add the line to (default: stdout)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := security.ValidateID(*org); err != nil {
		return usagef("--org %q: %v", *org, err)
	}
	secret := make([]byte, orgSecretLen)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	line := []byte(*org + " " + hex.EncodeToString(secret) + "\n")
	clear(secret)
	defer clear(line)
	if *out == "" {
		_, err := stdout.Write(line)
		return err
	}
	if _, err := os.Stat(*out); err == nil {
		secrets, err := readOrgSecrets(*out)
		if err != nil {
			return err
		}
		if _, ok := secrets[*org]; ok {
			return fmt.Errorf("%s already holds a secret for org %s: keep it (every key of the org derives from it), or remove its line first", *out, *org)
		}
	}
	if err := appendPrivate(*out, line); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	fmt.Fprintf(stderr, "added org %s to %s\n", *org, *out)
	return nil
}

func runKeyAgent(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("key agent", `key agent --org ORG --agent ID --org-secrets-file FILE [--out FILE]

Derives the key of agent ID of ORG from the org's master secret (HKDF-SHA256,
docs/protocol.md §5) and writes it as 64 hex digits: to --out (a new file,
mode 0600, its folder 0700; an existing file is never overwritten), or on
stdout. Agents read it with --agent-key-file FILE or $M2MD_AGENT_KEY.`, stderr)
	org := fs.String("org", "", "the agent's org `id`")
	agent := fs.String("agent", "", "the agent's `id`, as it will pass to --agent")
	secretsFile := fs.String("org-secrets-file", "", "`file` of 'org hex-secret' lines ('m2md key org' writes it)")
	out := fs.String("out", "", "`file` to write the key to (default: stdout)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *org == "":
		return usagef("--org is required")
	case *agent == "":
		return usagef("--agent is required: the key is made for one agent id")
	case *secretsFile == "":
		return usagef("--org-secrets-file is required ('m2md key org --org %s --out FILE' makes one)", *org)
	}
	if _, err := readPrivateFile(*secretsFile); err != nil {
		return fmt.Errorf("--org-secrets-file: %w", err)
	}
	secrets, err := readOrgSecrets(*secretsFile)
	if err != nil {
		return err
	}
	secret, ok := secrets[*org]
	if !ok {
		return fmt.Errorf("--org-secrets-file %s has no secret for org %s", *secretsFile, *org)
	}
	k, err := security.AgentKey(secret, *org, *agent)
	if err != nil {
		return usagef("--org %s --agent %s: %v", *org, *agent, err)
	}
	text := []byte(hex.EncodeToString(k[:]) + "\n")
	k.Wipe()
	defer clear(text)
	if *out == "" {
		_, err := stdout.Write(text)
		return err
	}
	if err := createPrivate(*out, text); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	fmt.Fprintf(stderr, "wrote the key of agent %s of org %s to %s\n", *agent, *org, *out)
	return nil
}

// createPrivate writes a new file readable by its owner only, in a folder
// made private if it does not exist; an existing file is an error.
func createPrivate(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists: remove it first to replace it", path)
	}
	if err != nil {
		return err
	}
	return writeClose(f, data)
}

// appendPrivate adds data to a file readable by its owner only, made (with
// a private folder) if it does not exist.
func appendPrivate(path string, data []byte) error {
	if _, err := os.Stat(path); err == nil {
		if _, err := readPrivateFile(path); err != nil {
			return err
		}
	} else if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	return writeClose(f, data)
}

func writeClose(f *os.File, data []byte) error {
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
