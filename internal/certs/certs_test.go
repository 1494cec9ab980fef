package certs

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestCreateAndLoad(t *testing.T) {
	dir := t.TempDir()
	ca, err := CreateCA(dir, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.CreateReplica(dir, []uint64{2, 1}, []string{"127.0.0.1", "host2"}, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	if err := ca.CreateClient(dir, "root", time.Hour, false); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(filepath.Join(dir, CACert), filepath.Join(dir, CAKey))
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Cert.Equal(ca.Cert) {
		t.Fatal("LoadCA read another certificate than CreateCA wrote")
	}
	roots := Pool(mustCAs(t, filepath.Join(dir, CACert)))

	crt, key := ReplicaFiles(2)
	pair, err := LoadPair(filepath.Join(dir, crt), filepath.Join(dir, key))
	if err != nil {
		t.Fatal(err)
	}
	if got := ReplicaIDs(pair.Leaf); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("replica certificate names %v, want [1 2]", got)
	}
	if !Names(pair.Leaf, 1) || Names(pair.Leaf, 3) {
		t.Fatal("Names disagrees with the certificate's ids")
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "host2", KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Fatalf("replica certificate for usage %v: %v", usage, err)
		}
	}

	crt, key = ClientFiles("root")
	pair, err = LoadPair(filepath.Join(dir, crt), filepath.Join(dir, key))
	if err != nil {
		t.Fatal(err)
	}
	if ids := ReplicaIDs(pair.Leaf); len(ids) != 0 {
		t.Fatalf("client certificate names replicas %v", ids)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Fatal("a client certificate verified as a server's")
	}
	fi, err := os.Stat(filepath.Join(dir, key))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	ca, err := CreateCA(dir, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CreateCA(dir, time.Hour, false); !errors.Is(err, ErrExists) {
		t.Fatalf("second CreateCA: %v, want ErrExists", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, CACert))
	if string(after) != string(before) {
		t.Fatal("a refused CreateCA changed ca.crt")
	}
	if err := ca.CreateReplica(dir, []uint64{1}, nil, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	if err := ca.CreateReplica(dir, []uint64{1}, nil, time.Hour, false); !errors.Is(err, ErrExists) {
		t.Fatalf("second replica 1: %v, want ErrExists", err)
	}
	if err := ca.CreateReplica(dir, []uint64{1}, nil, time.Hour, true); err != nil {
		t.Fatalf("overwrite: %v", err)
	}
	for _, bad := range []struct {
		name string
		err  error
	}{
		{"no ids", ca.CreateReplica(dir, nil, nil, time.Hour, false)},
		{"id 0", ca.CreateReplica(dir, []uint64{0}, nil, time.Hour, false)},
		{"client name with a slash", ca.CreateClient(dir, "../x", time.Hour, false)},
		{"empty client name", ca.CreateClient(dir, "", time.Hour, false)},
		{"zero lifetime", ca.CreateClient(dir, "bob", 0, false)},
	} {
		if bad.err == nil {
			t.Errorf("%s: accepted", bad.name)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "client.bob.crt")); err == nil {
		t.Error("a refused client certificate was written")
	}
	if _, err := LoadCA(filepath.Join(dir, "replica.1.crt"), filepath.Join(dir, "replica.1.key")); err == nil {
		t.Error("LoadCA accepted a replica certificate as a CA")
	}
	if _, err := ClientConfig(filepath.Join(dir, CACert), filepath.Join(dir, "replica.1.crt"), ""); err == nil {
		t.Error("ClientConfig accepted a certificate without its key")
	}
}

func mustCAs(t *testing.T, file string) []*x509.Certificate {
	t.Helper()
	cas, err := LoadCAs(file)
	if err != nil {
		t.Fatal(err)
	}
	return cas
}
