package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"os"

	"github.com/m2md/m2md/internal/configerr"
)

// LoadIdentity reads a node's certificate and key and the cluster CA from PEM
// files, for Config.Cert and Config.CA; an error is a ConfigError naming the
// field the files were for. caFile may be empty (no CA: Config.CA nil).
func LoadIdentity(certFile, keyFile, caFile string) (*tls.Certificate, *x509.CertPool, error) {
	if certFile == "" || keyFile == "" {
		return nil, nil, configerr.New(fieldCert, "cluster: route TLS needs both the certificate and the key file of "+fieldCert)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, configerr.New(fieldCert, "cluster: "+fieldCert+": %w", err)
	}
	if caFile == "" {
		return &cert, nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, configerr.New(fieldCA, "cluster: "+fieldCA+": %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, configerr.New(fieldCA, "cluster: "+fieldCA+" %s: no PEM certificates", caFile)
	}
	return &cert, pool, nil
}

// routeTLS is the embedded routes' TLS configuration: the node presents
// Cert, and with a CA both sides require the other's certificate to chain
// to it (mutual TLS), so only holders of a cluster certificate can join.
func routeTLS(cfg *Config) *tls.Config {
	if cfg.Cert == nil {
		return nil
	}
	conf := &tls.Config{Certificates: []tls.Certificate{*cfg.Cert}, MinVersion: tls.VersionTLS12}
	if cfg.CA != nil {
		conf.RootCAs, conf.ClientCAs = cfg.CA, cfg.CA
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return conf
}

func urlUser(user, password string) *url.Userinfo { return url.UserPassword(user, password) }
