package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/correctables/correctables/internal/cluster"
)

// runTLSCLI runs the root command with args and returns its output and
// error.
func runTLSCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := executeWithin(t, 2*time.Minute, newRootCmd(), nil, &out, io.Discard, args...)
	return out.String(), err
}

// TestCertAndTLSFlags creates a CA, three replica certificates and a client
// certificate with `cert`, runs three replicas with TLS and client
// certificates required (as `up --certs-dir DIR --client-cert-auth` does),
// and checks that the client flags reach them: with the client certificate
// a strong put and get work; with the CA alone (no client certificate), or
// in plaintext, the client is refused.
func TestCertAndTLSFlags(t *testing.T) {
	dir := t.TempDir()
	certsDir := filepath.Join(dir, "certs")
	steps := [][]string{
		{"cert", "create-ca", "--certs-dir", certsDir},
		{"cert", "create-replica", "--certs-dir", certsDir, "--id", "1", "127.0.0.1", "localhost"},
		{"cert", "create-node", "--certs-dir", certsDir, "--id", "2", "127.0.0.1"},
		{"cert", "create-replica", "--certs-dir", certsDir, "--id", "3", "127.0.0.1"},
		{"cert", "create-client", "--certs-dir", certsDir, "root"},
	}
	for _, args := range steps {
		if out, err := runTLSCLI(t, args...); err != nil || !strings.HasPrefix(out, "wrote ") {
			t.Fatalf("correctables %s: %q, %v", strings.Join(args, " "), out, err)
		}
	}
	if _, err := runTLSCLI(t, "cert", "create-ca", "--certs-dir", certsDir); err == nil || !strings.Contains(err.Error(), "--overwrite") {
		t.Fatalf("a second create-ca: %v, want a refusal naming --overwrite", err)
	}

	sec := tlsSettings{CertsDir: certsDir, ClientCertAuth: true}
	c, err := cluster.Start(cluster.Options{Dir: filepath.Join(dir, "data"), Replicas: 3, NoSync: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), TLS: sec.server})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	eps := strings.Join(c.Endpoints, ",")
	ca := filepath.Join(certsDir, "ca.crt")
	// A long dial timeout: TLS handshakes under -race on a loaded machine
	// took longer than the default 5 s.
	mtls := []string{"--endpoints", eps, "--cacert", ca, "--dial-timeout", "60s",
		"--cert", filepath.Join(certsDir, "client.root.crt"), "--key", filepath.Join(certsDir, "client.root.key")}

	out, err := runTLSCLI(t, append(mtls, "invoke", "--strong", "put", "k", "over-tls")...)
	if err != nil || !strings.Contains(out, "final") {
		t.Fatalf("strong put with a client certificate: %q, %v", out, err)
	}
	out, err = runTLSCLI(t, append(mtls, "invoke", "--strong", "get", "k")...)
	if err != nil || !strings.Contains(out, "over-tls") {
		t.Fatalf("strong get with a client certificate: %q, %v", out, err)
	}

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no client certificate", []string{"--endpoints", eps, "--cacert", ca, "--dial-timeout", "2s"}, ""},
		// Without a client certificate, or in plaintext, the handshake
		// fails and the client finds no replica (how the message words it
		// is the client's business: any error will do).
		{"plaintext", []string{"--endpoints", eps, "--dial-timeout", "2s"}, ""},
		{"certificate without key", []string{"--endpoints", eps, "--cacert", ca, "--cert", filepath.Join(certsDir, "client.root.crt")}, "--cert and --key"},
		{"insecure with TLS flags", []string{"--endpoints", eps, "--cacert", ca, "--insecure"}, "choose one"},
		{"plaintext off loopback", []string{"--endpoints", "192.0.2.1:7101"}, "plaintext refused (give TLS flags, or --insecure)"},
	} {
		_, err := runTLSCLI(t, append(tt.args, "invoke", "get", "k")...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error mentioning %q", tt.name, err, tt.want)
		}
	}
}

// TestServeRefusesPlaintextOffLoopback: serve will not speak plaintext on
// an address other hosts reach, nor to peers on other hosts, without
// --insecure; and a certificate for another replica is refused at start.
func TestServeRefusesPlaintextOffLoopback(t *testing.T) {
	certsDir := t.TempDir()
	for _, args := range [][]string{
		{"cert", "create-ca", "--certs-dir", certsDir},
		{"cert", "create-replica", "--certs-dir", certsDir, "--id", "2", "127.0.0.1"},
	} {
		if _, err := runTLSCLI(t, args...); err != nil {
			t.Fatal(err)
		}
	}
	data := t.TempDir()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"listen on every interface", []string{"--listen", "0.0.0.0:0", "--peers", "1=127.0.0.1:1"}, "0.0.0.0:0 is not on loopback: plaintext refused"},
		{"peer on another host", []string{"--listen", "127.0.0.1:0", "--peers", "1=127.0.0.1:1,2=host2:7101"}, "host2:7101 is not on loopback"},
		{"client-cert-auth without TLS", []string{"--listen", "127.0.0.1:0", "--peers", "1=127.0.0.1:1", "--client-cert-auth"}, "need TLS"},
		{"insecure with TLS", []string{"--listen", "0.0.0.0:0", "--peers", "1=127.0.0.1:1", "--certs-dir", certsDir, "--insecure"}, "choose one"},
		{"no certificate for this replica", []string{"--listen", "0.0.0.0:0", "--peers", "1=127.0.0.1:1", "--certs-dir", certsDir}, "replica.1.crt"},
		{"certificate of another replica", []string{"--listen", "0.0.0.0:0", "--peers", "1=127.0.0.1:1",
			"--certs-dir", certsDir, "--cert", filepath.Join(certsDir, "replica.2.crt"), "--key", filepath.Join(certsDir, "replica.2.key")}, "names replicas [2], not this one (1)"},
	} {
		args := append([]string{"serve", "--id", "1", "--data", filepath.Join(data, strings.ReplaceAll(tt.name, " ", "-"))}, tt.args...)
		_, err := runTLSCLI(t, args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error mentioning %q", tt.name, err, tt.want)
		}
	}
}
