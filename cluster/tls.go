package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
)

// LoadIdentity reads a node's certificate and key and the cluster CA from PEM
// files (--cluster-tls-cert, --cluster-tls-key, --cluster-tls-ca), for
// Config.Cert and Config.CA. caFile may be empty (no CA: Config.CA nil).
func LoadIdentity(certFile, keyFile, caFile string) (*tls.Certificate, *x509.CertPool, error) {
	if certFile == "" || keyFile == "" {
		return nil, nil, errors.New("cluster: route TLS needs both --cluster-tls-cert and --cluster-tls-key")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: --cluster-tls-cert/--cluster-tls-key: %w", err)
	}
	if caFile == "" {
		return &cert, nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: --cluster-tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("cluster: --cluster-tls-ca %s: no PEM certificates", caFile)
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
