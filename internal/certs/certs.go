// Package certs creates and reads the certificates of a Correctables
// cluster: a certificate authority (CA), one certificate per replica that
// names the replica's id, and client certificates. `correctables cert`
// creates them for a test cluster (as CockroachDB's `cert create-ca`,
// `create-node` and `create-client` do); a production cluster may use
// certificates from any CA, as long as a replica's certificate carries the
// replica's id as a URI (ReplicaURI).
//
// The files in a certificates directory:
//
//	ca.crt, ca.key                  the CA (keep ca.key elsewhere in production)
//	replica.<id>.crt, .key          a replica's certificate and key
//	client.<name>.crt, .key         a client's certificate and key
package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// File names in a certificates directory.
const (
	CACert = "ca.crt"
	CAKey  = "ca.key"
)

// ReplicaFiles returns the names of replica id's certificate and key.
func ReplicaFiles(id uint64) (cert, key string) {
	return fmt.Sprintf("replica.%d.crt", id), fmt.Sprintf("replica.%d.key", id)
}

// ClientFiles returns the names of client name's certificate and key.
func ClientFiles(name string) (cert, key string) {
	return "client." + name + ".crt", "client." + name + ".key"
}

// Default lifetimes: long enough for a test cluster, short enough that a
// lost key of a test cluster does not stay valid for years.
const (
	DefaultCALifetime   = 5 * 365 * 24 * time.Hour
	DefaultCertLifetime = 365 * 24 * time.Hour
)

// replicaURIPrefix starts the URI a replica's certificate carries for each
// replica id it may act as: "urn:correctables:replica:3".
const replicaURIPrefix = "urn:correctables:replica:"

// ReplicaURI is the URI naming replica id in a certificate's subject
// alternative names.
func ReplicaURI(id uint64) *url.URL {
	u, _ := url.Parse(replicaURIPrefix + strconv.FormatUint(id, 10))
	return u
}

// ReplicaIDs returns the replica ids a certificate names (its
// urn:correctables:replica:<id> URIs), in order. A client certificate
// names none.
func ReplicaIDs(c *x509.Certificate) []uint64 {
	var ids []uint64
	for _, u := range c.URIs {
		s, ok := strings.CutPrefix(u.String(), replicaURIPrefix)
		if !ok {
			continue
		}
		if id, err := strconv.ParseUint(s, 10, 64); err == nil && id != 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// Names reports whether certificate c names replica id.
func Names(c *x509.Certificate, id uint64) bool {
	return slices.Contains(ReplicaIDs(c), id)
}

// CA is a certificate authority that signs replica and client certificates.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// ErrExists is returned when a file to create already exists (and
// overwriting was not asked for): nothing is written.
var ErrExists = errors.New("certs: file exists")

// CreateCA creates a CA in dir (ca.crt, ca.key) valid for lifetime.
func CreateCA(dir string, lifetime time.Duration, overwrite bool) (*CA, error) {
	if lifetime <= 0 {
		return nil, fmt.Errorf("certs: lifetime %v: want a positive duration", lifetime)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"Correctables"}, CommonName: "Correctables CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("certs: creating the CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if err := writePair(dir, CACert, CAKey, der, key, overwrite); err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCA reads a CA's certificate and key (PEM files).
func LoadCA(certFile, keyFile string) (*CA, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certs: loading the CA: %w", err)
	}
	if !pair.Leaf.IsCA {
		return nil, fmt.Errorf("certs: %s is not a CA certificate", certFile)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("certs: %s: the key cannot sign", keyFile)
	}
	return &CA{Cert: pair.Leaf, Key: signer}, nil
}

// CreateReplica creates a certificate for a replica in dir, named for the
// first of ids (replica.<id>.crt and .key). It names every one of ids (a
// process running several replicas, as `up` does, may use one certificate
// for all of them) and hosts (DNS names or IP addresses clients dial). It
// serves clients and peers and authenticates to peers.
func (ca *CA) CreateReplica(dir string, ids []uint64, hosts []string, lifetime time.Duration, overwrite bool) error {
	if len(ids) == 0 {
		return errors.New("certs: a replica certificate needs at least one replica id")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{Organization: []string{"Correctables"}, CommonName: "replica " + strconv.FormatUint(ids[0], 10)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, id := range ids {
		if id == 0 {
			return errors.New("certs: replica id 0: ids start at 1")
		}
		tmpl.URIs = append(tmpl.URIs, ReplicaURI(id))
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	cert, key := ReplicaFiles(ids[0])
	return ca.issue(dir, cert, key, tmpl, lifetime, overwrite)
}

// clientName is what a client certificate may be named: it becomes part of
// a file name.
var clientName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CreateClient creates a client certificate for user name in dir
// (client.<name>.crt and .key).
func (ca *CA) CreateClient(dir, name string, lifetime time.Duration, overwrite bool) error {
	if !clientName.MatchString(name) {
		return fmt.Errorf("certs: client name %q: want 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{Organization: []string{"Correctables"}, CommonName: name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	cert, key := ClientFiles(name)
	return ca.issue(dir, cert, key, tmpl, lifetime, overwrite)
}

func (ca *CA) issue(dir, certName, keyName string, tmpl *x509.Certificate, lifetime time.Duration, overwrite bool) error {
	if lifetime <= 0 {
		return fmt.Errorf("certs: lifetime %v: want a positive duration", lifetime)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(lifetime)
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter // not past the CA's own
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return fmt.Errorf("certs: signing %s: %w", certName, err)
	}
	return writePair(dir, certName, keyName, der, key, overwrite)
}

// writePair writes a certificate (0644) and its key (0600) into dir; it
// writes neither if either exists and overwrite is false.
func writePair(dir, certName, keyName string, der []byte, key *ecdsa.PrivateKey, overwrite bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	certPath, keyPath := filepath.Join(dir, certName), filepath.Join(dir, keyName)
	if !overwrite {
		for _, p := range []string{certPath, keyPath} {
			if _, err := os.Stat(p); err == nil {
				return fmt.Errorf("%w: %s (pass --overwrite to replace it)", ErrExists, p)
			}
		}
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return writeFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// writeFile writes through a temporary file and a rename, so a reader never
// sees half a file.
func writeFile(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("certs: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n.Add(n, big.NewInt(1))
}

// LoadCAs reads the CA certificates in a PEM file.
func LoadCAs(file string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	var out []*x509.Certificate
	for len(b) > 0 {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certs: %s: %w", file, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("certs: %s holds no PEM certificate", file)
	}
	return out, nil
}

// Pool is a certificate pool holding cas.
func Pool(cas ...[]*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, l := range cas {
		for _, c := range l {
			p.AddCert(c)
		}
	}
	return p
}

// LoadPair reads a certificate and its key (PEM files).
func LoadPair(certFile, keyFile string) (tls.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certs: %w", err)
	}
	return pair, nil
}

// ClientConfig is the TLS configuration of a client: servers are verified
// against the CAs in caFile (the system's roots if empty), and the client
// presents the certificate in certFile and keyFile if given (mutual TLS).
func ClientConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		cas, err := LoadCAs(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = Pool(cas)
	}
	switch {
	case certFile != "" && keyFile != "":
		pair, err := LoadPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	case certFile != "" || keyFile != "":
		return nil, errors.New("certs: a client certificate needs both the certificate and its key")
	}
	return cfg, nil
}
