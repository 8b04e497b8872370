package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/cluster"
)

// m2md cert: the certificates of a cluster on several machines, without
// other tools (docs/operations.md, "Cluster").

const certUsage = `Usage: m2md cert <ca|node|fingerprint> [flags]

The certificates of a cluster whose nodes run on several machines:

  ca           create the cluster CA (ca.pem, and its key ca.key: keep it off the nodes)
  node         issue a node's certificate, signed by the CA: the node id is its
               CommonName, its names and addresses (--host) its subject alternative names
  fingerprint  print a certificate file's SHA-256 fingerprint

Keys are written with mode 0600, certificates 0644; an existing file is never
replaced unless --force is given.
Run 'm2md cert ca --help' or 'm2md cert node --help' for the flags.
`

func runCert(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, certUsage)
		return usagef("cert needs a command: ca, node or fingerprint")
	}
	switch args[0] {
	case "ca":
		return runCertCA(args[1:], stdout, stderr)
	case "node":
		return runCertNode(args[1:], stdout, stderr)
	case "fingerprint":
		return runCertFingerprint(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		return helpError{certUsage}
	}
	return usagef("cert command must be ca, node or fingerprint, not %q (run 'm2md cert --help')", args[0])
}

// certOut are the files a cert command writes.
type certOut struct {
	cert, key string
	days      int
	force     bool
}

func (o *certOut) register(fs interface {
	StringVar(*string, string, string, string)
	IntVar(*int, string, int, string)
	BoolVar(*bool, string, bool, string)
}, cert, key string, days int) {
	fs.StringVar(&o.cert, "cert", cert, "certificate `file` to write (PEM, mode 0644; cert node: ID.pem)")
	fs.StringVar(&o.key, "key", key, "private key `file` to write (PEM, mode 0600; cert node: ID.key)")
	fs.IntVar(&o.days, "days", days, "validity in days")
	fs.BoolVar(&o.force, "force", false, "replace --cert and --key if they exist")
}

func (o *certOut) validity() (time.Duration, error) {
	if o.days <= 0 || o.days > 100*365 {
		return 0, usagef("--days must be 1 to 36500, not %d", o.days)
	}
	return time.Duration(o.days) * 24 * time.Hour, nil
}

// write writes the key first and the certificate last, both refused if
// either exists (so a refusal leaves nothing half replaced).
func (o *certOut) write(certPEM, keyPEM []byte) error {
	if !o.force {
		for _, p := range []string{o.key, o.cert} {
			if _, err := os.Lstat(p); err == nil {
				return existsHint(fmt.Errorf("%w: %s", certs.ErrExists, p))
			}
		}
	}
	if err := certs.WriteNew(o.key, keyPEM, 0o600, o.force); err != nil {
		return existsHint(err)
	}
	return existsHint(certs.WriteNew(o.cert, certPEM, 0o644, o.force))
}

func existsHint(err error) error {
	if errors.Is(err, certs.ErrExists) {
		return fmt.Errorf("%w: remove it or pass --force to replace it", err)
	}
	return err
}

func runCertCA(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cert ca", "cert ca [flags]\n\nCreates the cluster CA. Every node gets --cert (the cluster's --cluster-tls-ca);\nkeep --key on the machine that issues node certificates, never on the nodes.", stderr)
	var out certOut
	out.register(fs, "ca.pem", "ca.key", int(certs.DefaultCAValidity.Hours()/24))
	name := fs.String("name", "m2md cluster CA", "the CA's `name` (its CommonName)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	days, err := out.validity()
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := certs.NewCA(*name, days, time.Now())
	if err != nil {
		return err
	}
	if err := out.write(certPEM, keyPEM); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (the cluster CA: --cluster-tls-ca on every node) and %s (its key: keep it off the nodes)\n", out.cert, out.key)
	return nil
}

func runCertNode(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cert node", "cert node --node ID --host NAME,ADDRESS,... [flags]\n\nIssues a node certificate signed by the cluster CA, for the node's\n--cluster-tls-cert and --cluster-tls-key. Its CommonName is the node id\n(the node's --cluster-node); --host lists the names and addresses the\nother nodes reach it by (what its --cluster-routes entries name).", stderr)
	node := fs.String("node", "", "the node's `id` (its --cluster-node): letters, digits, '-' and '_'")
	hosts := fs.String("host", "", "comma-separated host `names` and IP addresses other nodes reach this node by")
	caCert := fs.String("ca", "ca.pem", "the cluster CA's certificate `file` (m2md cert ca)")
	caKey := fs.String("ca-key", "ca.key", "the cluster CA's key `file`")
	var out certOut
	out.register(fs, "", "", int(certs.DefaultNodeValidity.Hours()/24))
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !cluster.ValidNodeID(*node) {
		return usagef("--node must be the node id, 1 to 64 letters, digits, '-' or '_', not %q", *node)
	}
	hostList := splitList(*hosts)
	if len(hostList) == 0 {
		return usagef("--host is required: the names and addresses the other nodes reach node %s by", *node)
	}
	if out.cert == "" {
		out.cert = *node + ".pem"
	}
	if out.key == "" {
		out.key = *node + ".key"
	}
	days, err := out.validity()
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(*caCert)
	if err != nil {
		return fmt.Errorf("--ca: %w", err)
	}
	caKeyPEM, err := os.ReadFile(*caKey)
	if err != nil {
		return fmt.Errorf("--ca-key: %w", err)
	}
	certPEM, keyPEM, err := certs.IssueNode(caPEM, caKeyPEM, certs.NodeRequest{Node: *node, Hosts: hostList, Validity: days}, time.Now())
	if err != nil {
		return err
	}
	if err := out.write(certPEM, keyPEM); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s for node %s (--cluster-tls-cert, --cluster-tls-key)\n", out.cert, out.key, *node)
	return nil
}

func runCertFingerprint(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cert fingerprint", "cert fingerprint FILE\n\nPrints the SHA-256 fingerprint of the first certificate in a PEM file,\nin the form --pin and the daemon's start log use.", stderr)
	if err := fs.Parse(args); err != nil {
		return flagError(fs, err)
	}
	if fs.NArg() != 1 {
		return usagef("cert fingerprint takes one certificate file (run 'm2md cert fingerprint --help')")
	}
	fp, err := certFingerprint(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	_, err = fmt.Fprintln(stdout, fp)
	return err
}
