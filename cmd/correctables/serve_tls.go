package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/correctables/correctables/internal/certs"
	"github.com/correctables/correctables/internal/loopback"
	"github.com/correctables/correctables/internal/server"
)

// tlsSettings are the transport security settings of `serve` and `up`,
// from flags or (for serve) the JSON config file.
type tlsSettings struct {
	// CertsDir holds ca.crt and replica.<id>.crt/.key as `correctables
	// cert` writes them; CACert, Cert and Key override single files.
	CertsDir string `json:"certs_dir,omitempty"`
	CACert   string `json:"cacert,omitempty"`
	Cert     string `json:"cert,omitempty"`
	Key      string `json:"key,omitempty"`
	// ClientCACert verifies client certificates (default: CACert).
	ClientCACert string `json:"client_cacert,omitempty"`
	// ClientCertAuth requires every client to present a certificate.
	ClientCertAuth bool `json:"client_cert_auth,omitempty"`
	// Insecure allows plaintext off loopback.
	Insecure bool `json:"insecure,omitempty"`
}

func (t *tlsSettings) register(fs *pflag.FlagSet) {
	fs.StringVar(&t.CertsDir, "certs-dir", "", "TLS: directory with ca.crt and replica.<id>.crt/.key (as `correctables cert` writes them)")
	fs.StringVar(&t.CACert, "cacert", "", "TLS: CA that signs the replicas' certificates (default: <certs-dir>/ca.crt)")
	fs.StringVar(&t.Cert, "cert", "", "TLS: this replica's certificate, naming its id (default: <certs-dir>/replica.<id>.crt)")
	fs.StringVar(&t.Key, "key", "", "TLS: the key of --cert (default: <certs-dir>/replica.<id>.key)")
	fs.StringVar(&t.ClientCACert, "client-cacert", "", "TLS: CA that signs client certificates (default: --cacert)")
	fs.BoolVar(&t.ClientCertAuth, "client-cert-auth", false, "TLS: require a client certificate from every client (mutual TLS)")
	fs.BoolVar(&t.Insecure, "insecure", false, "allow plaintext on addresses that are not on loopback (a network you trust)")
}

// merge returns t (from a config file) with the flags given on the command
// line (in fl, values in flags) taking precedence.
func (t tlsSettings) merge(fl *pflag.FlagSet, flags tlsSettings) tlsSettings {
	set := func(name string, dst *string, v string) {
		if fl.Changed(name) {
			*dst = v
		}
	}
	set("certs-dir", &t.CertsDir, flags.CertsDir)
	set("cacert", &t.CACert, flags.CACert)
	set("cert", &t.Cert, flags.Cert)
	set("key", &t.Key, flags.Key)
	set("client-cacert", &t.ClientCACert, flags.ClientCACert)
	if fl.Changed("client-cert-auth") {
		t.ClientCertAuth = flags.ClientCertAuth
	}
	if fl.Changed("insecure") {
		t.Insecure = flags.Insecure
	}
	return t
}

func (t tlsSettings) enabled() bool {
	return t.CertsDir != "" || t.CACert != "" || t.Cert != "" || t.Key != ""
}

// check refuses contradictions, and plaintext on any address off loopback
// (what the replica listens on, what it dials) unless --insecure.
func (t tlsSettings) check(addrs ...string) error {
	if !t.enabled() {
		if t.ClientCertAuth || t.ClientCACert != "" {
			return errors.New("--client-cert-auth and --client-cacert need TLS: give --certs-dir (or --cacert, --cert and --key)")
		}
		if t.Insecure {
			return nil
		}
		for _, a := range addrs {
			if !loopback.Is(a) {
				return fmt.Errorf("%s is not on loopback: plaintext refused; give --certs-dir (or --cacert, --cert and --key), or --insecure on a network you trust", a)
			}
		}
		return nil
	}
	if t.Insecure {
		return errors.New("--insecure and TLS flags together: choose one")
	}
	return nil
}

// server returns replica id's TLS configuration, nil without TLS.
func (t tlsSettings) server(id uint64) (*server.TLS, error) {
	if !t.enabled() {
		return nil, nil
	}
	crtName, keyName := certs.ReplicaFiles(id)
	pick := func(flag, file, name string) (string, error) {
		if file != "" {
			return file, nil
		}
		if t.CertsDir == "" {
			return "", fmt.Errorf("TLS needs --%s (or --certs-dir)", flag)
		}
		return filepath.Join(t.CertsDir, name), nil
	}
	caFile, err := pick("cacert", t.CACert, certs.CACert)
	if err != nil {
		return nil, err
	}
	crtFile, err := pick("cert", t.Cert, crtName)
	if err != nil {
		return nil, err
	}
	keyFile, err := pick("key", t.Key, keyName)
	if err != nil {
		return nil, err
	}
	ca, err := certs.LoadCAs(caFile)
	if err != nil {
		return nil, err
	}
	pair, err := certs.LoadPair(crtFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("replica %d: %w", id, err)
	}
	if !certs.Names(pair.Leaf, id) {
		return nil, fmt.Errorf("%s names replicas %v, not this one (%d)", crtFile, certs.ReplicaIDs(pair.Leaf), id)
	}
	cfg := &server.TLS{Cert: pair, CA: ca, RequireClientCert: t.ClientCertAuth}
	if t.ClientCACert != "" {
		if cfg.ClientCA, err = certs.LoadCAs(t.ClientCACert); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}
