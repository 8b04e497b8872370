package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
)

// RouteTLS builds the TLS configuration of the embedded routes from PEM
// files (--cluster-tls-cert, --cluster-tls-key, --cluster-tls-ca): each
// node presents its certificate, and when caFile is given both sides
// require the other's certificate to chain to it (mutual TLS), so only
// holders of a cluster certificate can join.
func RouteTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("cluster: route TLS needs both --cluster-tls-cert and --cluster-tls-key")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("cluster: route TLS: %w", err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("cluster: --cluster-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cluster: --cluster-tls-ca %s: no PEM certificates", caFile)
		}
		conf.RootCAs, conf.ClientCAs = pool, pool
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return conf, nil
}

func urlUser(user, password string) *url.Userinfo { return url.UserPassword(user, password) }
