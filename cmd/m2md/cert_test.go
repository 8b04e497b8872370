package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/daemon"
)

// certFiles runs m2md cert ca and m2md cert node for each node in dir.
func certFiles(t *testing.T, dir string, nodes ...string) {
	t.Helper()
	ca, caKey := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca.key")
	if code, _, stderr := runCLI(t, nil, "cert", "ca", "--cert", ca, "--key", caKey); code != exitOK {
		t.Fatalf("cert ca: exit %d: %s", code, stderr)
	}
	for _, n := range nodes {
		code, _, stderr := runCLI(t, nil, "cert", "node", "--node", n, "--host", "127.0.0.1,localhost", "--ca", ca, "--ca-key", caKey,
			"--cert", filepath.Join(dir, n+".pem"), "--key", filepath.Join(dir, n+".key"))
		if code != exitOK {
			t.Fatalf("cert node %s: exit %d: %s", n, code, stderr)
		}
	}
}

// TestCLICertFiles: the files m2md cert writes have the promised modes, an
// existing one is refused (naming --force) and left as it was, --force
// replaces it, and fingerprint prints the form pins use.
func TestCLICertFiles(t *testing.T) {
	dir := t.TempDir()
	certFiles(t, dir, "host-a")
	if runtime.GOOS != "windows" {
		for name, want := range map[string]os.FileMode{"ca.key": 0o600, "host-a.key": 0o600, "ca.pem": 0o644, "host-a.pem": 0o644} {
			info, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if info.Mode().Perm() != want {
				t.Errorf("%s: mode %04o, want %04o", name, info.Mode().Perm(), want)
			}
		}
	}
	before, _ := os.ReadFile(filepath.Join(dir, "ca.key"))
	for _, args := range [][]string{
		{"cert", "ca", "--cert", filepath.Join(dir, "ca.pem"), "--key", filepath.Join(dir, "ca.key")},
		{"cert", "ca", "--cert", filepath.Join(dir, "new.pem"), "--key", filepath.Join(dir, "ca.key")},
		{"cert", "node", "--node", "host-a", "--host", "127.0.0.1", "--ca", filepath.Join(dir, "ca.pem"), "--ca-key", filepath.Join(dir, "ca.key"),
			"--cert", filepath.Join(dir, "host-a.pem"), "--key", filepath.Join(dir, "other.key")},
	} {
		code, _, stderr := runCLI(t, nil, args...)
		if code != exitBadInput || !bytes.Contains(stderr, []byte("--force")) {
			t.Fatalf("%v over existing files: exit %d, stderr %s", args, code, stderr)
		}
	}
	for _, name := range []string{"new.pem", "other.key"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Errorf("a refused command wrote %s", name)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.key")); !bytes.Equal(before, after) {
		t.Fatal("a refused command changed ca.key")
	}
	if code, _, stderr := runCLI(t, nil, "cert", "ca", "--force", "--cert", filepath.Join(dir, "ca.pem"), "--key", filepath.Join(dir, "ca.key")); code != exitOK {
		t.Fatalf("--force: exit %d: %s", code, stderr)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.key")); bytes.Equal(before, after) {
		t.Fatal("--force did not replace ca.key")
	}

	code, out, stderr := runCLI(t, nil, "cert", "fingerprint", filepath.Join(dir, "host-a.pem"))
	if code != exitOK {
		t.Fatalf("fingerprint: exit %d: %s", code, stderr)
	}
	cert, err := certs.Load(filepath.Join(dir, "host-a.pem"), filepath.Join(dir, "host-a.key"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(out)), certs.Fingerprint(cert.Leaf.Raw); got != want {
		t.Fatalf("fingerprint %q, want %q", got, want)
	}
	if cert.Leaf.Subject.CommonName != "host-a" {
		t.Fatalf("CommonName %q, want the node id", cert.Leaf.Subject.CommonName)
	}
}

func TestCLICertUsage(t *testing.T) {
	dir := t.TempDir()
	certFiles(t, dir)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"cert"}, exitUsage, "ca, node or fingerprint"},
		{[]string{"cert", "sign"}, exitUsage, "ca, node or fingerprint"},
		{[]string{"cert", "node", "--host", "h"}, exitUsage, "--node"},
		{[]string{"cert", "node", "--node", "a.b", "--host", "h"}, exitUsage, "--node"},
		{[]string{"cert", "node", "--node", "a"}, exitUsage, "--host"},
		{[]string{"cert", "node", "--node", "a", "--host", "h", "--ca", filepath.Join(dir, "none.pem")}, exitBadInput, "--ca"},
		{[]string{"cert", "ca", "--days", "0", "--cert", filepath.Join(dir, "x.pem"), "--key", filepath.Join(dir, "x.key")}, exitUsage, "--days"},
		{[]string{"cert", "fingerprint"}, exitUsage, "one certificate file"},
		{[]string{"cert", "fingerprint", filepath.Join(dir, "ca.key")}, exitBadInput, "ca.key"},
	} {
		code, _, stderr := runCLI(t, nil, tc.args...)
		if code != tc.code || !bytes.Contains(stderr, []byte(tc.want)) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

// TestCLICertCluster: certificates from m2md cert form a real two-node
// cluster with mutual TLS on its routes.
func TestCLICertCluster(t *testing.T) {
	dir := t.TempDir()
	certFiles(t, dir, "host-a", "host-b")
	node := func(id string, routes ...string) func(*daemon.Config) {
		return func(c *daemon.Config) {
			cert, ca, err := cluster.LoadIdentity(filepath.Join(dir, id+".pem"), filepath.Join(dir, id+".key"), filepath.Join(dir, "ca.pem"))
			if err != nil {
				t.Fatal(err)
			}
			c.Cluster = cluster.Config{Listen: "127.0.0.1:0", Routes: routes, Node: id, Cert: cert, CA: ca}
		}
	}
	a := startTestDaemon(t, node("host-a"))
	b := startTestDaemon(t, node("host-b", "nats://"+a.Cluster().RouteAddr.String()))
	deadline := time.Now().Add(10 * time.Second)
	for a.Cluster().Nodes != 1 || b.Cluster().Nodes != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("nodes hear %d and %d others, want 1 each", a.Cluster().Nodes, b.Cluster().Nodes)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
