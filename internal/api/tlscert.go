// SPDX-License-Identifier: Apache-2.0

package api

import (
	"crypto/tls"
	"fmt"
	"sync/atomic"
)

// Cert is a TLS certificate and key read from files, served through
// tls.Config.GetCertificate so Reload takes effect on the next handshake
// without a restart (a renewed or revoked certificate is replaced on
// SIGHUP). Connections already established keep the one they agreed on.
type Cert struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
}

// LoadCert reads a PEM certificate (chain) and its private key.
func LoadCert(certFile, keyFile string) (*Cert, error) {
	c := &Cert{certFile: certFile, keyFile: keyFile}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload re-reads the files. On failure the certificate served so far
// stays: unlike a revoked token, an old certificate gives a client no
// access it should no longer have, and refusing every handshake would
// take the API down for a typo.
func (c *Cert) Reload() error {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("load tls certificate %s: %w", c.certFile, err)
	}
	c.cur.Store(&cert)
	return nil
}

// Config returns a server config that serves the current certificate.
func (c *Cert) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.cur.Load(), nil
		},
	}
}
