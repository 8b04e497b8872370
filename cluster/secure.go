package cluster

import (
	"errors"
	"net"
	"net/url"
	"strings"

	"github.com/m2md/m2md/internal/configerr"
)

// ErrInsecure is wrapped by every refusal (a ConfigError) of a cluster link
// that another machine could join or read: a route listener, a route or a
// NATS server beyond loopback without mutual authentication that a passive
// observer cannot steal (docs/operations.md, "Cluster").
var ErrInsecure = errors.New("cluster: insecure cluster link")

// Protections a cluster link can have, as the start log and the
// m2md_cluster_links metric name them.
const (
	ProtectMTLS     = "mtls"      // routes: mutual TLS, both ends verified against the cluster CA
	ProtectPassword = "password"  // routes: a shared password, in clear (loopback only)
	ProtectToken    = "token"     // the node's own connection to its embedded server, on loopback
	ProtectTLSCreds = "tls+creds" // external NATS: TLS and an nkey or credentials file
	ProtectTLS      = "tls"       // external NATS: TLS without node credentials (loopback only)
	ProtectCreds    = "creds"     // external NATS: credentials without TLS (loopback only)
	ProtectNone     = "none"      // no authentication at all (loopback only)
)

// Protections lists every protection, in the order metrics show them.
var Protections = []string{ProtectMTLS, ProtectTLSCreds, ProtectTLS, ProtectCreds, ProtectPassword, ProtectToken, ProtectNone}

// checkLinks refuses what would let another machine join or read the
// cluster. Loopback keeps its zero-configuration behaviour: everything on it
// is as trusted as the machine.
func (c Config) checkLinks() error {
	if c.Cert != nil && c.CA == nil {
		return configerr.New(fieldCA, "%w: "+fieldCert+" without "+fieldCA+": every node must verify the others' certificates against the cluster CA (m2md cert ca); set "+fieldCA, ErrInsecure)
	}
	if c.CA != nil && c.Cert == nil {
		return configerr.New(fieldCert, "%w: "+fieldCA+" without "+fieldCert+": set this node's certificate (m2md cert node)", ErrInsecure)
	}
	if c.Listen != "" {
		host, _, err := net.SplitHostPort(c.Listen)
		if err != nil {
			return configerr.New(fieldListen, "cluster: "+fieldListen+" %q: %w", c.Listen, err)
		}
		if !loopback(host) && c.Cert == nil {
			why := "anyone who can reach it could join"
			if c.User != "" {
				why = "a password alone crosses the network in clear, with every message"
			}
			return configerr.New(fieldListen, "%w: "+fieldListen+" %s is reachable from other machines and %s: set "+fieldCert+" and "+fieldCA+" (mutual TLS; m2md cert makes them), or listen on loopback", ErrInsecure, c.Listen, why)
		}
		for _, r := range c.Routes {
			u, err := parseRoute(r)
			if err != nil {
				return err
			}
			if !loopback(u.Hostname()) && c.Cert == nil {
				return configerr.New(fieldRoutes, "%w: "+fieldRoutes+" entry %s leaves this machine without TLS: set "+fieldCert+" and "+fieldCA+" (mutual TLS; m2md cert makes them)", ErrInsecure, redactRoute(u))
			}
		}
	}
	for _, raw := range c.URLs {
		u, err := parseNATSURL(raw)
		if err != nil {
			return err
		}
		if loopback(u.Hostname()) {
			continue
		}
		switch {
		case u.Scheme != "tls" && c.CAFile == "":
			return configerr.New(fieldURLs, "%w: "+fieldURLs+" %s is beyond loopback without TLS: use a tls:// URL or set "+fieldCAFile, ErrInsecure, redactRoute(u))
		case c.CredsFile == "" && c.NkeyFile == "":
			return configerr.New(fieldURLs, "%w: "+fieldURLs+" %s is beyond loopback: authenticate this node with "+fieldCredsFile+" or "+fieldNkeyFile+" (a user and password prove nothing an observer of the server cannot replay)", ErrInsecure, redactRoute(u))
		case c.Cert == nil:
			return configerr.New(fieldURLs, "%w: "+fieldURLs+" %s is beyond loopback: set "+fieldCert+" and "+fieldCA+", the node certificate the cluster's messages are signed with (m2md cert node)", ErrInsecure, redactRoute(u))
		}
	}
	return nil
}

// parseNATSURL reads an entry of Config.URLs as nats.go does: a URL, or a
// bare host:port taken as nats://.
func parseNATSURL(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s = "nats://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls") {
		return nil, configerr.New(fieldURLs, "cluster: "+fieldURLs+" entry %q: want nats://host:port or tls://host:port", redact(s))
	}
	return u, nil
}

// redactRoute names a URL in an error by its scheme and host alone: never
// its user, password, path or fragment.
func redactRoute(u *url.URL) string { return u.Scheme + "://" + u.Host }

// redact names an entry that may not parse as a URL without what precedes
// its last '@', where a password would be.
func redact(s string) string {
	i := strings.LastIndex(s, "@")
	if i < 0 {
		return s
	}
	scheme, _, ok := strings.Cut(s[:i], "://")
	if ok {
		return scheme + "://xxxxx" + s[i:]
	}
	return "xxxxx" + s[i:]
}

// routeProtection is what guards this node's routes.
func (c *Config) routeProtection() string {
	switch {
	case c.Cert != nil && c.CA != nil:
		return ProtectMTLS
	case c.User != "":
		return ProtectPassword
	}
	return ProtectNone
}

// natsProtection is what guards this node's connection to NATS: in
// embedded mode a random token on loopback; in external mode what the
// URLs and the other settings give.
func (c *Config) natsProtection() string {
	if c.Listen != "" {
		return ProtectToken
	}
	tlsOn := c.CAFile != ""
	userInURL := false
	for _, raw := range c.URLs {
		if u, err := parseNATSURL(raw); err == nil {
			tlsOn = tlsOn || u.Scheme == "tls"
			userInURL = userInURL || u.User != nil
		}
	}
	creds := c.CredsFile != "" || c.NkeyFile != ""
	switch {
	case tlsOn && creds:
		return ProtectTLSCreds
	case creds:
		return ProtectCreds
	case tlsOn:
		return ProtectTLS
	case userInURL:
		return ProtectPassword
	}
	return ProtectNone
}

// Links is how many of this node's cluster links have protection p now
// (one of Protections): its routes to other nodes (embedded mode) and its
// own connection to NATS.
func (c *Cluster) Links(p string) int {
	n := 0
	if c.srv != nil && c.cfg.routeProtection() == p {
		n += c.srv.NumRoutes()
	}
	if c.cfg.natsProtection() == p && c.nc.IsConnected() {
		n++
	}
	return n
}
