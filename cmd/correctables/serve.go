package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/correctables/correctables/internal/server"
	"github.com/correctables/correctables/internal/storage"
)

// serveConfig is what `serve` reads from flags or from a JSON file
// (--config); flags given on the command line override the file.
type serveConfig struct {
	ID      uint64            `json:"id"`
	Peers   map[string]string `json:"peers"` // id -> address peers dial
	Listen  string            `json:"listen"`
	Data    string            `json:"data"`
	Metrics string            `json:"metrics"`
	Tick    string            `json:"tick"`
	// Join: this replica was added with `member add`; with an empty data
	// directory it learns the cluster from the leader.
	Join bool `json:"join"`
	// Transport security (serve_tls.go): certs_dir, cacert, cert, key,
	// client_cacert, client_cert_auth, insecure.
	tlsSettings
	// The cluster id (serve_cluster.go): cluster_token, initial_cluster.
	clusterSettings
}

func parsePeers(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, addr, ok := strings.Cut(part, "=")
		if !ok || addr == "" {
			return nil, fmt.Errorf("--peers: %q is not ID=HOST:PORT", part)
		}
		m[id] = addr
	}
	return m, nil
}

func newServeCmd() *cobra.Command {
	var (
		file, peers string
		cfg         serveConfig
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run one replica (one per host), for clusters across machines",
		Long: `serve runs one replica of a cluster, storing its data under --data. Every
replica gets the same --peers list (every replica's id and the address the
others reach it at, this one included) and its own --id. Clients and peers
use the same port (--listen).

Off loopback, connections use TLS: --certs-dir holds ca.crt and this
replica's replica.<id>.crt/.key (see correctables cert). Peers verify each
other's certificate against the CA and check that it names the replica id
they claim; clients verify the replica's certificate and may present their
own (required with --client-cert-auth). Plaintext off loopback needs
--insecure.

  correctables serve --id 1 --listen 0.0.0.0:7101 --data /var/lib/correctables \
      --certs-dir certs --peers 1=host1:7101,2=host2:7101,3=host3:7101

The same settings can come from a JSON file (--config), e.g.
  {"id": 1, "listen": "0.0.0.0:7101", "data": "/data", "certs_dir": "/certs",
   "peers": {"1": "host1:7101", "2": "host2:7101", "3": "host3:7101"}}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var fc serveConfig
			if file != "" {
				b, err := os.ReadFile(file)
				if err != nil {
					return fmt.Errorf("--config: %w", err)
				}
				dec := json.NewDecoder(strings.NewReader(string(b)))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&fc); err != nil {
					return fmt.Errorf("--config %s: %w", file, err)
				}
				if dec.More() {
					return fmt.Errorf("--config %s: unexpected data after the JSON object", file)
				}
			}
			fl := cmd.Flags()
			if fl.Changed("id") || fc.ID == 0 {
				fc.ID = cfg.ID
			}
			if fl.Changed("listen") || fc.Listen == "" {
				fc.Listen = cfg.Listen
			}
			if fl.Changed("data") || fc.Data == "" {
				fc.Data = cfg.Data
			}
			if fl.Changed("metrics") || fc.Metrics == "" {
				fc.Metrics = cfg.Metrics
			}
			if fl.Changed("tick") || fc.Tick == "" {
				fc.Tick = cfg.Tick
			}
			if fl.Changed("join") {
				fc.Join = cfg.Join
			}
			fc.tlsSettings = fc.tlsSettings.merge(fl, cfg.tlsSettings)
			fc.clusterSettings = fc.clusterSettings.merge(fl, cfg.clusterSettings)
			if fl.Changed("peers") || fc.Peers == nil {
				m, err := parsePeers(peers)
				if err != nil {
					return err
				}
				fc.Peers = m
			}
			return serve(cmd, fc)
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "config", "", "JSON file with id, listen, data, peers, metrics, tick, join, cluster_token, initial_cluster and the TLS settings")
	f.Uint64Var(&cfg.ID, "id", 0, "this replica's id (1..n), required")
	f.StringVar(&peers, "peers", "", "every replica as ID=HOST:PORT, comma-separated, required")
	f.StringVar(&cfg.Listen, "listen", "", "address to serve clients and peers on (default: this replica's --peers address)")
	f.StringVar(&cfg.Data, "data", "data", "data directory")
	f.StringVar(&cfg.Metrics, "metrics", "", "serve Prometheus metrics (/metrics) and Go profiles (/debug/pprof/) on this address (e.g. 127.0.0.1:9101)")
	f.StringVar(&cfg.Tick, "tick", "10ms", "replica tick (raft heartbeat is 3 ticks, election timeout 30-60 ticks)")
	f.BoolVar(&cfg.Join, "join", false, "join a running cluster that added this replica (member add): with an empty --data, learn the members and the data from its leader; --peers names this replica and replicas of the cluster")
	cfg.tlsSettings.register(f)
	cfg.clusterSettings.register(f)
	return cmd
}

func serve(cmd *cobra.Command, fc serveConfig) error {
	if fc.ID == 0 {
		return errors.New("--id is required (1..n)")
	}
	if len(fc.Peers) == 0 {
		return errors.New("--peers is required: every replica as ID=HOST:PORT")
	}
	peers := map[uint64]string{}
	for k, v := range fc.Peers {
		id, err := strconv.ParseUint(k, 10, 64)
		if err != nil || id == 0 {
			return fmt.Errorf("--peers: id %q is not a positive integer", k)
		}
		peers[id] = v
	}
	if _, ok := peers[fc.ID]; !ok {
		return fmt.Errorf("--peers has no address for this replica (--id %d)", fc.ID)
	}
	if fc.Listen == "" {
		fc.Listen = peers[fc.ID]
	}
	addrs := []string{fc.Listen}
	for _, a := range peers {
		addrs = append(addrs, a)
	}
	if err := fc.tlsSettings.check(addrs...); err != nil {
		return err
	}
	tlsCfg, err := fc.tlsSettings.server(fc.ID)
	if err != nil {
		return err
	}
	tick, err := time.ParseDuration(fc.Tick)
	if err != nil || tick <= 0 {
		return fmt.Errorf("--tick %q: want a positive duration such as 10ms", fc.Tick)
	}
	initial, err := fc.clusterSettings.initialCluster()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	st, err := storage.Open(storage.Options{Dir: fc.Data, Logger: log, AsyncSnapshotReads: true})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	s, err := server.New(server.Config{
		ID: fc.ID, Peers: peers, ClientAddr: fc.Listen, PeerAddr: fc.Listen, Storage: st, Tick: tick,
		Logger: log, Metrics: server.NewMetrics(reg, strconv.FormatUint(fc.ID, 10)),
		TLS: tlsCfg, Insecure: fc.Insecure, Join: fc.Join,
		ClusterToken: fc.ClusterToken, InitialCluster: initial,
	})
	if err != nil {
		st.Close()
		if errors.Is(err, server.ErrRemoved) {
			return fmt.Errorf("%w (data directory %s)", err, fc.Data)
		}
		return err
	}
	if err := s.Start(); err != nil {
		st.Close()
		return err
	}
	security := "plaintext"
	if tlsCfg != nil {
		security = "TLS"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "correctables: replica %d serving on %s (%s), data in %s\n", fc.ID, s.ClientAddr(), security, fc.Data)
	var hs *http.Server
	if fc.Metrics != "" {
		ml, err := net.Listen("tcp", fc.Metrics)
		if err != nil {
			s.Stop()
			return fmt.Errorf("--metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		// Profiles as etcd serves them: go tool pprof http://ADDR/debug/pprof/profile
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		hs = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := hs.Serve(ml); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "err", err)
			}
		}()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-sig:
	case <-s.Done():
		// Removed from the cluster (member remove), or the replica failed.
		if errors.Is(s.Err(), server.ErrRemoved) {
			// The member remove that removed this replica may have been
			// sent to it: give its answer a moment to leave.
			time.Sleep(time.Second)
		}
	}
	if hs != nil {
		hs.Close()
	}
	stopErr := s.Stop()
	if err := s.Err(); errors.Is(err, server.ErrRemoved) {
		return fmt.Errorf("%w: it does not start again; its data directory %s is kept for inspection, and a replacement joins under a new id (member add, then serve --join with an empty --data)", err, fc.Data)
	}
	return stopErr
}
