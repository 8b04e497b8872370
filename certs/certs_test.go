package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestEnsureDevCertCreatesThenReuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "certs")
	cert, fp, err := EnsureDevCert(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(fp) != 64 {
		t.Fatalf("fingerprint %q: want 64 hex digits", fp)
	}
	if got := Fingerprint(cert.Certificate[0]); got != fp {
		t.Fatalf("fingerprint %s does not match the leaf DER (%s)", fp, got)
	}
	leaf := cert.Leaf
	if err := leaf.VerifyHostname("localhost"); err != nil {
		t.Error(err)
	}
	if err := leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Error(err)
	}
	if err := leaf.VerifyHostname("::1"); err != nil {
		t.Error(err)
	}
	if _, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("public key is %T, want ECDSA", leaf.PublicKey)
	}
	if runtime.GOOS != "windows" {
		info, err := os.Stat(filepath.Join(dir, DevKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		if perm := info.Mode().Perm(); perm != 0o600 {
			t.Errorf("key mode %04o, want 0600", perm)
		}
	}
	// The PEM on disk is the certificate returned.
	certPEM, err := os.ReadFile(filepath.Join(dir, DevCertFile))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || !bytes.Equal(block.Bytes, cert.Certificate[0]) {
		t.Fatal("cert.pem does not hold the returned certificate")
	}

	cert2, fp2, err := EnsureDevCert(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fp2 != fp {
		t.Fatalf("second run made a new certificate: %s != %s", fp2, fp)
	}
	if !bytes.Equal(cert2.Certificate[0], cert.Certificate[0]) {
		t.Fatal("second run returned different DER")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("dir holds %v, want only cert.pem and key.pem (no temporary files)", names)
	}
}

func TestEnsureDevCertRecovery(t *testing.T) {
	t.Run("key without certificate is replaced", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, DevKeyFile), []byte("half-finished"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := EnsureDevCert(dir); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("certificate without key is an error", func(t *testing.T) {
		dir := t.TempDir()
		if _, _, err := EnsureDevCert(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, DevKeyFile)); err != nil {
			t.Fatal(err)
		}
		_, _, err := EnsureDevCert(dir)
		if err == nil || !strings.Contains(err.Error(), "does not") {
			t.Fatalf("err = %v, want a missing-key error", err)
		}
	})
	t.Run("group-readable key is refused", func(t *testing.T) {
		if runtime.GOOS == "windows" {
			t.Skip("no Unix permissions")
		}
		dir := t.TempDir()
		if _, _, err := EnsureDevCert(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, DevKeyFile), 0o640); err != nil {
			t.Fatal(err)
		}
		_, _, err := EnsureDevCert(dir)
		if err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("err = %v, want a permission error", err)
		}
	})
	t.Run("expired certificate is replaced", func(t *testing.T) {
		dir := t.TempDir()
		certPEM, keyPEM, err := newDevCert(time.Now().Add(-2 * devCertValidity))
		if err != nil {
			t.Fatal(err)
		}
		if err := writeFileAtomic(filepath.Join(dir, DevKeyFile), keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := writeFileAtomic(filepath.Join(dir, DevCertFile), certPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		old, err := parsePair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cert, fp, err := EnsureDevCert(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fp == Fingerprint(old.Leaf.Raw) {
			t.Fatal("expired certificate was reused")
		}
		if !time.Now().Before(cert.Leaf.NotAfter) {
			t.Fatal("replacement is expired too")
		}
	})
	t.Run("mismatched pair is an error", func(t *testing.T) {
		a, b := t.TempDir(), t.TempDir()
		if _, _, err := EnsureDevCert(a); err != nil {
			t.Fatal(err)
		}
		if _, _, err := EnsureDevCert(b); err != nil {
			t.Fatal(err)
		}
		_, err := Load(filepath.Join(a, DevCertFile), filepath.Join(b, DevKeyFile))
		if err == nil {
			t.Fatal("Load accepted a key that does not match the certificate")
		}
	})
}

func TestFingerprintParsing(t *testing.T) {
	const fp = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	formatted := FormatFingerprint(fp)
	if want := "00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF"; formatted != want {
		t.Fatalf("FormatFingerprint = %s", formatted)
	}
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{fp, true},
		{strings.ToUpper(fp), true},
		{formatted, true},
		{"  " + fp + "\n", true},
		{fp[:62], false},
		{fp + "00", false},
		{strings.Replace(fp, "0", "g", 1), false},
		{strings.Replace(formatted, ":", "-", 1), false},
		{"", false},
	} {
		sum, err := ParseFingerprint(tc.in)
		if tc.ok != (err == nil) {
			t.Errorf("ParseFingerprint(%q) err = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrBadFingerprint) {
				t.Errorf("ParseFingerprint(%q) err = %v, not ErrBadFingerprint", tc.in, err)
			}
			continue
		}
		if got := FormatFingerprint(strings.TrimSpace(tc.in)); got != formatted {
			t.Errorf("round trip of %q gave %s", tc.in, got)
		}
		if sum[0] != 0x00 || sum[31] != 0xff {
			t.Errorf("ParseFingerprint(%q) = %x", tc.in, sum)
		}
	}
	if got := FormatFingerprint("not a fingerprint"); got != "not a fingerprint" {
		t.Errorf("FormatFingerprint mangled bad input: %q", got)
	}
}

// handshake runs a real TLS handshake over loopback TCP between a server
// presenting serverCert and a client using clientCfg, and returns the
// client's error.
func handshake(t *testing.T, serverCert tls.Certificate, clientCfg *tls.Config) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", ServerTLSConfig(serverCert))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serverDone := make(chan struct{})
	go func() {
		defer close(serverDone)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		_ = c.(*tls.Conn).Handshake()
	}()
	defer func() { <-serverDone }()

	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(&d, "tcp", ln.Addr().String(), clientCfg)
	if err != nil {
		return err
	}
	return c.Close()
}

func TestPinnedHandshake(t *testing.T) {
	cert, fp, err := EnsureDevCert(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, otherFP, err := EnsureDevCert(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		opts    ClientOptions
		wantErr error // nil: must succeed; errAny: any error
	}{
		{"pin matches", ClientOptions{PinSHA256: fp}, nil},
		{"pin matches, colon form", ClientOptions{PinSHA256: FormatFingerprint(fp)}, nil},
		{"pin matches, server name not in certificate", ClientOptions{PinSHA256: fp, ServerName: "elsewhere.example"}, nil},
		{"pin differs", ClientOptions{PinSHA256: otherFP}, ErrPinMismatch},
		{"system roots reject self-signed", ClientOptions{}, errAny},
		{"insecure accepts anything", ClientOptions{InsecureSkipVerify: true}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ClientTLSConfig(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			err = handshake(t, cert, cfg)
			checkErr(t, err, tc.wantErr)
		})
	}
}

var errAny = errors.New("any error")

func checkErr(t *testing.T, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Fatalf("handshake failed: %v", err)
	case want == errAny && err == nil, want != nil && want != errAny && !errors.Is(err, want):
		t.Fatalf("handshake err = %v, want %v", err, want)
	}
}

// testCA makes a root CA and a leaf it signed for the given IPs and names.
func testCA(t *testing.T, dir string, ips []net.IP, names []string) (caFile string, leaf tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "m2md test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "daemon"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  ips,
		DNSNames:     names,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	leafParsed, err := x509.ParseCertificate(leafDER)
	if err != nil {
		t.Fatal(err)
	}
	return caFile, tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: leafKey, Leaf: leafParsed}
}

func TestCAVerifiedHandshake(t *testing.T) {
	dir := t.TempDir()
	caFile, leaf := testCA(t, dir, []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"daemon.test"})
	otherCAFile, _ := testCA(t, t.TempDir(), nil, nil)
	otherIPCA, otherIPLeaf := testCA(t, t.TempDir(), []net.IP{net.IPv4(127, 0, 0, 2)}, nil)
	devDir := t.TempDir()
	devCert, devFP, err := EnsureDevCert(devDir)
	if err != nil {
		t.Fatal(err)
	}
	leafFP := Fingerprint(leaf.Certificate[0])
	for _, tc := range []struct {
		name    string
		server  tls.Certificate
		opts    ClientOptions
		wantErr error
	}{
		{"CA signed leaf", leaf, ClientOptions{CAFile: caFile}, nil},
		{"CA signed leaf by name", leaf, ClientOptions{CAFile: caFile, ServerName: "daemon.test"}, nil},
		{"CA signed leaf, wrong name", leaf, ClientOptions{CAFile: caFile, ServerName: "other.test"}, errAny},
		{"other CA", leaf, ClientOptions{CAFile: otherCAFile}, errAny},
		{"dev cert not signed by CA", devCert, ClientOptions{CAFile: caFile}, errAny},
		{"dev cert as its own CA file", devCert, ClientOptions{CAFile: filepath.Join(devDir, DevCertFile)}, nil},
		{"CA and pin both pass", leaf, ClientOptions{CAFile: caFile, PinSHA256: leafFP}, nil},
		{"CA passes, pin does not", leaf, ClientOptions{CAFile: caFile, PinSHA256: devFP}, ErrPinMismatch},
		{"pin passes, CA does not", leaf, ClientOptions{CAFile: otherCAFile, PinSHA256: leafFP}, errAny},
		{"pin passes, name does not", leaf, ClientOptions{CAFile: caFile, PinSHA256: leafFP, ServerName: "other.test"}, errAny},
		{"pin passes, dialled IP not in certificate", otherIPLeaf, ClientOptions{CAFile: otherIPCA, PinSHA256: Fingerprint(otherIPLeaf.Certificate[0])}, errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ClientTLSConfig(tc.opts)
			if err != nil {
				if tc.wantErr == errAny {
					return // refusing to build the config is a refusal too
				}
				t.Fatal(err)
			}
			checkErr(t, handshake(t, tc.server, cfg), tc.wantErr)
		})
	}
}

func TestClientTLSConfigRefusesBadOptions(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []ClientOptions{
		{InsecureSkipVerify: true, PinSHA256: strings.Repeat("ab", 32)},
		{InsecureSkipVerify: true, CAFile: notPEM},
		{PinSHA256: "abcd"},
		{CAFile: filepath.Join(dir, "missing.pem")},
		{CAFile: notPEM},
	} {
		if _, err := ClientTLSConfig(opts); err == nil {
			t.Errorf("ClientTLSConfig(%+v) accepted", opts)
		}
	}
}
