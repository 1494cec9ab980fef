package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/internal/certs"
)

// TLS secures a server's listener (clients and peers) and its connections
// to its peers. Peers authenticate each other both ways: each verifies the
// other's certificate against CA and checks that it names the replica id
// the other claims to be (certs.ReplicaURI).
type TLS struct {
	// Cert is this replica's certificate and key: served to clients and
	// peers, and presented to the peers it dials. It must be signed by CA
	// and name this replica's id.
	Cert tls.Certificate
	// CA holds the certificates of the authority that signs the replicas'
	// certificates. Required.
	CA []*x509.Certificate
	// ClientCA holds the authorities whose client certificates are
	// accepted. Default: CA.
	ClientCA []*x509.Certificate
	// RequireClientCert refuses clients that do not present a certificate
	// signed by ClientCA (mutual TLS for every client). Without it a client
	// may connect with server authentication only, and a certificate it
	// presents is verified.
	RequireClientCert bool
}

// ErrUnauthenticated: a peer stream without a valid certificate naming the
// replica it claims to be.
var ErrUnauthenticated = errors.New("server: peer not authenticated")

func (t *TLS) validate(id uint64) error {
	if len(t.CA) == 0 {
		return errors.New("server: config: TLS needs the CA that signs the replicas' certificates")
	}
	if len(t.Cert.Certificate) == 0 {
		return errors.New("server: config: TLS needs this replica's certificate")
	}
	leaf := t.Cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(t.Cert.Certificate[0]); err != nil {
			return fmt.Errorf("server: config: this replica's certificate: %w", err)
		}
		t.Cert.Leaf = leaf
	}
	if !certs.Names(leaf, id) {
		return fmt.Errorf("server: config: the certificate (%q) names replicas %v, not this one (%d)", leaf.Subject.CommonName, certs.ReplicaIDs(leaf), id)
	}
	if err := verifyChain(t.Cert.Certificate, certs.Pool(t.CA)); err != nil {
		return fmt.Errorf("server: config: this replica's certificate is not valid under the CA: %w", err)
	}
	if len(t.ClientCA) == 0 {
		t.ClientCA = t.CA
	}
	return nil
}

// verifyChain verifies a certificate chain (DER, leaf first, as sent in a
// handshake) against roots, for use on either side of a connection between
// replicas. Host names are not checked: a replica is identified by the id
// its certificate names, not by the address it was reached at.
func verifyChain(chain [][]byte, roots *x509.CertPool) error {
	if len(chain) == 0 {
		return errors.New("no certificate")
	}
	certsIn := make([]*x509.Certificate, len(chain))
	for i, der := range chain {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return err
		}
		certsIn[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certsIn[1:] {
		inter.AddCert(c)
	}
	_, err := certsIn[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	return err
}

// serverCreds are the credentials of the listener clients and peers share:
// the replica's certificate; client certificates verified against ClientCA
// and CA (peers present replica certificates on the same port), required
// only with RequireClientCert. Which replica a peer is, is checked per
// stream (authenticatePeer).
func (t *TLS) serverCreds() credentials.TransportCredentials {
	auth := tls.VerifyClientCertIfGiven
	if t.RequireClientCert {
		auth = tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(&tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{t.Cert},
		ClientCAs:    certs.Pool(t.CA, t.ClientCA),
		ClientAuth:   auth,
	})
}

// peerCreds are the credentials for dialing replica id: this replica's
// certificate, and the server's verified against CA and required to name
// id.
func (t *TLS) peerCreds(id uint64) credentials.TransportCredentials {
	roots := certs.Pool(t.CA)
	return credentials.NewTLS(&tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{t.Cert},
		// The chain and the id are verified below instead of the host
		// name.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("replica %d presented no certificate", id)
			}
			raw := make([][]byte, len(cs.PeerCertificates))
			for i, c := range cs.PeerCertificates {
				raw[i] = c.Raw
			}
			if err := verifyChain(raw, roots); err != nil {
				return fmt.Errorf("replica %d's certificate: %w", id, err)
			}
			if leaf := cs.PeerCertificates[0]; !certs.Names(leaf, id) {
				return fmt.Errorf("the server at replica %d's address has a certificate for replicas %v", id, certs.ReplicaIDs(leaf))
			}
			return nil
		},
	})
}

// dialCreds are the credentials for dialing replica id at addr: TLS if
// configured, else plaintext, only to an address on loopback or with
// Insecure (validate checks the peers known at start; this, the ones a
// membership change adds).
func (s *Server) dialCreds(id uint64, addr string) (credentials.TransportCredentials, error) {
	if s.cfg.TLS != nil {
		return s.cfg.TLS.peerCreds(id), nil
	}
	if !s.cfg.Insecure && !isLoopback(addr) {
		return nil, fmt.Errorf("server: plaintext to replica %d at %q, which is not on loopback: configure TLS (or set Insecure)", id, addr)
	}
	return insecure.NewCredentials(), nil
}

// peerIdentity returns the replica ids a peer stream's certificate names,
// once the certificate is verified against the replicas' CA; nil without
// TLS (any peer is accepted, as validate allows only on loopback or with
// Insecure).
func (s *Server) peerIdentity(ctx context.Context) ([]uint64, error) {
	if s.cfg.TLS == nil {
		return nil, nil
	}
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return nil, fmt.Errorf("%w: no connection information", ErrUnauthenticated)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil, fmt.Errorf("%w: %s presented no certificate", ErrUnauthenticated, p.Addr)
	}
	raw := make([][]byte, len(info.State.PeerCertificates))
	for i, c := range info.State.PeerCertificates {
		raw[i] = c.Raw
	}
	// The handshake verified the chain against CA and ClientCA together;
	// a peer's must be under CA.
	if err := verifyChain(raw, certs.Pool(s.cfg.TLS.CA)); err != nil {
		return nil, fmt.Errorf("%w: %s: certificate not signed by the replicas' CA: %v", ErrUnauthenticated, p.Addr, err)
	}
	ids := certs.ReplicaIDs(info.State.PeerCertificates[0])
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: %s: the certificate (%q) names no replica", ErrUnauthenticated, p.Addr, info.State.PeerCertificates[0].Subject.CommonName)
	}
	return ids, nil
}

// authorizePeer checks that a stream whose certificate names ids (nil:
// no TLS) may speak for replica from.
func authorizePeer(ids []uint64, from uint64, tlsOn bool) error {
	if !tlsOn || slices.Contains(ids, from) {
		return nil
	}
	return fmt.Errorf("%w: messages from replica %d over a connection whose certificate names replicas %v", ErrUnauthenticated, from, ids)
}

// authWarnEvery spaces the warnings about a peer that fails authentication
// (it is retried with backoff, up to every second).
const authWarnEvery = 30 * time.Second

// authFailure reports whether a peer stream ended because one side refused
// the other's certificate: in the handshake (a chain not under the CA, a
// certificate for another replica) or after it (Unauthenticated).
func authFailure(err error) bool {
	if err == nil {
		return false
	}
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	return st.Code() == codes.Unauthenticated ||
		(st.Code() == codes.Unavailable && strings.Contains(st.Message(), "handshake"))
}

// checkPlaintext refuses plaintext on any address that is not on loopback:
// what this replica listens on and the peers it dials.
func (c *Config) checkPlaintext() error {
	if c.TLS != nil || c.Insecure {
		return nil
	}
	addrs := []string{c.ClientAddr, c.PeerAddr}
	for _, a := range c.Peers {
		addrs = append(addrs, a)
	}
	for _, a := range addrs {
		if !isLoopback(a) {
			return fmt.Errorf("server: config: plaintext on %q, which is not on loopback: configure TLS (or set Insecure, on a network you trust)", a)
		}
	}
	return nil
}

// isLoopback reports whether host:port names this machine only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
