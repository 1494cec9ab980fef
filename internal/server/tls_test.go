package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/certs"
)

// testCerts is a certificates directory as `correctables cert` makes it:
// a CA, replicas 1..n (for 127.0.0.1), client "alice"; and a second CA
// ("other") with its own certificate for replica 1.
type testCerts struct {
	dir, other string
}

func makeCerts(t *testing.T, n int) testCerts {
	t.Helper()
	tc := testCerts{dir: t.TempDir(), other: t.TempDir()}
	ca, err := certs.CreateCA(tc.dir, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= uint64(n); id++ {
		if err := ca.CreateReplica(tc.dir, []uint64{id}, []string{"127.0.0.1", "localhost"}, time.Hour, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := ca.CreateClient(tc.dir, "alice", time.Hour, false); err != nil {
		t.Fatal(err)
	}
	other, err := certs.CreateCA(tc.other, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.CreateReplica(tc.other, []uint64{1}, []string{"127.0.0.1"}, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	return tc
}

// serverTLS is replica id's TLS configuration from dir.
func serverTLS(t *testing.T, dir string, id uint64, requireClientCert bool) *TLS {
	t.Helper()
	crt, key := certs.ReplicaFiles(id)
	pair, err := certs.LoadPair(filepath.Join(dir, crt), filepath.Join(dir, key))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certs.LoadCAs(filepath.Join(dir, certs.CACert))
	if err != nil {
		t.Fatal(err)
	}
	return &TLS{Cert: pair, CA: ca, RequireClientCert: requireClientCert}
}

// clientTLS is a client's TLS configuration: the CA of dir, and the
// certificate named by crt and key in dir if crt is not empty.
func clientTLS(t *testing.T, dir, crt, key string) credentials.TransportCredentials {
	t.Helper()
	var cf, kf string
	if crt != "" {
		cf, kf = filepath.Join(dir, crt), filepath.Join(dir, key)
	}
	cfg, err := certs.ClientConfig(filepath.Join(dir, certs.CACert), cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	return credentials.NewTLS(cfg)
}

// TestTLSCluster runs three replicas with TLS over loopback TCP and checks,
// with real handshakes: a client with a certificate (mutual TLS) writes
// through one replica and reads strongly at another; a plaintext client is
// refused; and a peer stream is refused when its certificate names another
// replica than the one it speaks for, names no replica, is signed by
// another CA, or is missing, while the same stream with the right
// certificate is accepted.
func TestTLSCluster(t *testing.T) {
	tc := makeCerts(t, 3)
	peers := freePeers(t, 3)
	var cfgs []Config
	for id := uint64(1); id <= 3; id++ {
		cfgs = append(cfgs, Config{
			ID: id, Peers: peers, ClientAddr: peers[id], Storage: reviewMem(), Logger: reviewQuiet(), Seed: id,
			TLS: serverTLS(t, tc.dir, id, false),
		})
	}
	servers := startServers(t, cfgs...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("client mTLS", func(t *testing.T) {
		crt, key := certs.ClientFiles("alice")
		creds := clientTLS(t, tc.dir, crt, key)
		// A long dial timeout: TLS handshakes under -race on a loaded
		// machine took longer than the default.
		c1, err := client.Dial(ctx, []string{peers[1]}, client.WithTransportCredentials(creds), client.WithDialTimeout(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Close()
		// Strong puts until one gets its final view: the replicas elect a
		// leader over their TLS peer streams first.
		for {
			v, err := c1.Put(ctx, "k", []byte("secret"), correctable.Strong).Final(ctx)
			if err == nil && v.Value.Err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("strong put over TLS never completed: %v %v", err, v.Value.Err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c3, err := client.Dial(ctx, []string{peers[3]}, client.WithTransportCredentials(creds), client.WithDialTimeout(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer c3.Close()
		v, err := c3.Get(ctx, "k", correctable.Strong).Final(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !v.Value.Found || string(v.Value.Value) != "secret" {
			t.Fatalf("strong get at replica 3 = %+v, want secret", v.Value)
		}
	})

	t.Run("plaintext client refused", func(t *testing.T) {
		dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
		defer dcancel()
		c, err := client.Dial(dctx, []string{peers[1]}, client.WithDialTimeout(2*time.Second), client.WithInitialProbes(1))
		if err == nil {
			c.Close()
			t.Fatal("a plaintext client reached a TLS replica")
		}
		if !errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("plaintext dial: %v, want ErrUnavailable", err)
		}
	})

	t.Run("client with a certificate of another CA refused", func(t *testing.T) {
		crt, key := certs.ReplicaFiles(1)
		cfg, err := certs.ClientConfig(filepath.Join(tc.dir, certs.CACert), filepath.Join(tc.other, crt), filepath.Join(tc.other, key))
		if err != nil {
			t.Fatal(err)
		}
		dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
		defer dcancel()
		c, err := client.Dial(dctx, []string{peers[1]}, client.WithTransportCredentials(credentials.NewTLS(cfg)),
			client.WithDialTimeout(2*time.Second), client.WithInitialProbes(1))
		if err == nil {
			c.Close()
			t.Fatal("a client certificate of another CA was accepted")
		}
	})

	// rogue opens a peer stream to replica 1 with the given credentials,
	// says it is replica from, and returns the stream's outcome. The
	// envelope holds no message, so an accepted stream changes nothing.
	rogue := func(t *testing.T, creds credentials.TransportCredentials, from uint64) error {
		t.Helper()
		conn, err := grpc.NewClient(peers[1], grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		defer scancel()
		st, err := api.NewPeerClient(conn).Stream(sctx)
		if err != nil {
			return err
		}
		if err := st.Send(&api.PeerEnvelope{From: from}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err = st.CloseAndRecv()
		return err
	}
	peerCreds := func(t *testing.T, dir string, id uint64) credentials.TransportCredentials {
		crt, key := certs.ReplicaFiles(id)
		return clientTLS(t, dir, crt, key)
	}
	wantCode := func(t *testing.T, err error, code codes.Code, substr string) {
		t.Helper()
		if status.Code(err) != code || !strings.Contains(err.Error(), substr) {
			t.Fatalf("peer stream: %v, want %v mentioning %q", err, code, substr)
		}
		if !authFailure(err) {
			t.Fatalf("authFailure(%v) = false: a replica would not warn about it", err)
		}
	}

	t.Run("peer with its own certificate accepted", func(t *testing.T) {
		if err := rogue(t, peerCreds(t, tc.dir, 3), 3); err != nil {
			t.Fatalf("replica 3's certificate speaking for replica 3: %v", err)
		}
	})
	t.Run("peer with a certificate for another id refused", func(t *testing.T) {
		err := rogue(t, peerCreds(t, tc.dir, 2), 3)
		wantCode(t, err, codes.Unauthenticated, "names replicas [2]")
	})
	t.Run("peer without a certificate refused", func(t *testing.T) {
		err := rogue(t, clientTLS(t, tc.dir, "", ""), 3)
		wantCode(t, err, codes.Unauthenticated, "presented no certificate")
	})
	t.Run("peer with a client certificate refused", func(t *testing.T) {
		crt, key := certs.ClientFiles("alice")
		err := rogue(t, clientTLS(t, tc.dir, crt, key), 3)
		wantCode(t, err, codes.Unauthenticated, "names no replica")
	})
	t.Run("peer with a certificate of another CA refused", func(t *testing.T) {
		err := rogue(t, peerCreds(t, tc.other, 1), 3)
		if err == nil || status.Code(err) == codes.OK {
			t.Fatal("a replica certificate of another CA was accepted")
		}
	})
	t.Run("plaintext peer refused", func(t *testing.T) {
		err := rogue(t, insecure.NewCredentials(), 3)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("plaintext peer stream to a TLS replica: %v, want Unavailable", err)
		}
	})
	t.Run("replica dialing a peer whose certificate names another id", func(t *testing.T) {
		// Replica 1's certificate as seen by a replica that expects
		// replica 2 at that address.
		conn, err := grpc.NewClient(peers[1], grpc.WithTransportCredentials(servers[2].cfg.TLS.peerCreds(2)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		defer scancel()
		_, err = api.NewStoreClient(conn).Status(sctx, &api.StatusRequest{})
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate for replicas [1]") {
			t.Fatalf("dialing replica 1's address as replica 2: %v, want Unavailable naming the certificate", err)
		}
		if !authFailure(err) {
			t.Fatalf("authFailure(%v) = false: a replica would not warn about it", err)
		}
		if authFailure(nil) || authFailure(status.Error(codes.Unavailable, "connection refused")) {
			t.Fatal("authFailure holds for no error or a refused connection")
		}
	})
}

// TestTLSRequireClientCert: with RequireClientCert, a client without a
// certificate fails its handshake and one with a certificate is served.
func TestTLSRequireClientCert(t *testing.T) {
	tc := makeCerts(t, 1)
	addr := freeAddr(t)
	startServers(t, Config{ID: 1, Peers: map[uint64]string{1: addr}, ClientAddr: addr, Storage: reviewMem(), Logger: reviewQuiet(),
		TLS: serverTLS(t, tc.dir, 1, true)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.Dial(ctx, []string{addr}, client.WithTransportCredentials(clientTLS(t, tc.dir, "", "")),
		client.WithDialTimeout(2*time.Second), client.WithInitialProbes(1))
	if err == nil {
		c.Close()
		t.Fatal("a client without a certificate was served under RequireClientCert")
	}
	crt, key := certs.ClientFiles("alice")
	c, err = client.Dial(ctx, []string{addr}, client.WithTransportCredentials(clientTLS(t, tc.dir, crt, key)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for {
		v, err := c.Put(ctx, "k", []byte("v"), correctable.Strong).Final(ctx)
		if err == nil && v.Value.Err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("strong put with a client certificate: %v %v", err, v.Value.Err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTLSConfigRefused: plaintext on an address that is not on loopback,
// and a certificate that does not fit the replica, are refused before the
// server opens anything.
func TestTLSConfigRefused(t *testing.T) {
	tc := makeCerts(t, 2)
	mk := func(tweak func(*Config)) error {
		cfg := Config{ID: 1, Peers: map[uint64]string{1: "127.0.0.1:7101", 2: "127.0.0.1:7102"}, ClientAddr: "127.0.0.1:7101",
			Storage: &memStorage{MemoryStorage: raft.NewMemoryStorage()}, Logger: reviewQuiet()}
		tweak(&cfg)
		_, err := New(cfg)
		return err
	}
	for _, tt := range []struct {
		name  string
		tweak func(*Config)
		want  string // "" means accepted
	}{
		{"plaintext on loopback", func(*Config) {}, ""},
		{"plaintext listening on every interface", func(c *Config) { c.ClientAddr = "0.0.0.0:7101" }, "not on loopback"},
		{"plaintext peer on another host", func(c *Config) { c.Peers[2] = "host2:7101" }, "not on loopback"},
		{"plaintext with Insecure", func(c *Config) { c.ClientAddr = "0.0.0.0:7101"; c.Peers[2] = "host2:7101"; c.Insecure = true }, ""},
		{"TLS on every interface", func(c *Config) { c.ClientAddr = "0.0.0.0:7101"; c.TLS = serverTLS(t, tc.dir, 1, false) }, ""},
		{"certificate for another replica", func(c *Config) { c.TLS = serverTLS(t, tc.dir, 2, false) }, "names replicas [2], not this one (1)"},
		{"certificate of another CA", func(c *Config) {
			c.TLS = serverTLS(t, tc.other, 1, false)
			c.TLS.CA = serverTLS(t, tc.dir, 1, false).CA
		}, "not valid under the CA"},
		{"no CA", func(c *Config) { c.TLS = serverTLS(t, tc.dir, 1, false); c.TLS.CA = nil }, "needs the CA"},
		{"no certificate", func(c *Config) { c.TLS = serverTLS(t, tc.dir, 1, false); c.TLS.Cert = tls.Certificate{} }, "needs this replica's certificate"},
	} {
		err := mk(tt.tweak)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want an error mentioning %q", tt.name, err, tt.want)
		}
	}
}

// TestDialCredsPlaintextOffLoopback: a peer that a membership change adds
// at an address off loopback is not dialed in plaintext.
func TestDialCredsPlaintextOffLoopback(t *testing.T) {
	tc := makeCerts(t, 1)
	mk := func(tweak func(*Config)) *Server {
		cfg := Config{ID: 1, Peers: map[uint64]string{1: "127.0.0.1:7101"}, ClientAddr: "127.0.0.1:7101",
			Storage: reviewMem(), Logger: reviewQuiet()}
		tweak(&cfg)
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	plain := mk(func(*Config) {})
	if _, err := plain.dialCreds(2, "127.0.0.1:7102"); err != nil {
		t.Fatalf("plaintext to a loopback peer: %v", err)
	}
	if _, err := plain.dialCreds(2, "host2:7101"); err == nil || !strings.Contains(err.Error(), "not on loopback") {
		t.Fatalf("plaintext to host2: %v, want a refusal", err)
	}
	if _, err := mk(func(c *Config) { c.Insecure = true }).dialCreds(2, "host2:7101"); err != nil {
		t.Fatalf("plaintext to host2 with Insecure: %v", err)
	}
	creds, err := mk(func(c *Config) { c.TLS = serverTLS(t, tc.dir, 1, false) }).dialCreds(2, "host2:7101")
	if err != nil || creds.Info().SecurityProtocol != "tls" {
		t.Fatalf("TLS to host2: %v, %v", creds, err)
	}
}
