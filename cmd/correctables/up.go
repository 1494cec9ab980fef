package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/cluster"
	"github.com/correctables/correctables/internal/server"
)

// endpointsFile is where `up` writes the client endpoints so that `invoke`,
// `get` and `put` find the cluster without flags.
const endpointsFile = "endpoints"

func newUpCmd() *cobra.Command {
	var (
		dir, wan, region, host string
		replicas, basePort     int
		verbose                bool
		sec                    tlsSettings
		token                  string
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the embedded cluster: three replicas in this process",
		Long: `up starts a cluster of replicas in this process, each with its own Pebble
store under --data, talking gRPC on loopback. It prints the client endpoints
and writes them to <data>/endpoints, where invoke, get and put find them.
Stop it with Ctrl-C; start it again and the data is still there.

With --certs-dir (see correctables cert) the replicas speak TLS to clients
and to each other, replica i with <certs-dir>/replica.<i>.crt (or one --cert
naming every replica id); clients then connect with --cacert (and --cert and
--key for mutual TLS). --host off loopback needs TLS or --insecure.

With --wan PRESET the replicas are placed in the preset's regions and every
link (client-replica and replica-replica) gets the round-trip time of the
preset, emulated on real TCP: ec2-2016 (FRK, IRL, VRG; Correctables §6.1)
or pileus-2013 (England, US-West, India; client region China).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if replicas < 1 || replicas > 9 {
				return fmt.Errorf("--replicas %d: want 1 to 9", replicas)
			}
			if basePort < 0 || basePort > 65535-replicas {
				return fmt.Errorf("--base-port %d: want 0 (any free ports) or at most %d", basePort, 65535-replicas)
			}
			if region != "" && wan == "" {
				return fmt.Errorf("--client-region needs --wan")
			}
			if err := sec.check(net.JoinHostPort(host, "0")); err != nil {
				return err
			}
			var tlsFor func(uint64) (*server.TLS, error)
			if sec.enabled() {
				tlsFor = sec.server
			}
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			c, err := cluster.Start(cluster.Options{
				Dir: dir, Replicas: replicas, Host: host, BasePort: basePort, WAN: wan, ClientRegion: region, Logger: log,
				TLS: tlsFor, Insecure: sec.Insecure, ClusterToken: token,
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			// Ready means a leader is elected: strong operations commit at
			// once from here on.
			wctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			lead, err := c.WaitLeader(wctx)
			if err == nil && wan != "" {
				// On a WAN, the leader goes where the clients are: strong
				// operations then cost one round trip to the nearest quorum
				// (what bench latency-gap measures), not two across the ocean.
				lead = c.Nearest()
				err = c.MoveLeader(wctx, lead)
			}
			cancel()
			if err != nil {
				c.Stop()
				return err
			}
			fmt.Fprintf(out, "correctables: %d replicas up, replica %d leads, cluster %s, data in %s\n", replicas, lead, api.FormatClusterID(c.Servers[0].ClusterID()), dir)
			for i, ep := range c.Endpoints {
				where := ""
				if len(c.Regions) > 0 {
					where = " (" + c.Regions[i] + ")"
				}
				fmt.Fprintf(out, "  replica %d%s: %s\n", i+1, where, ep)
			}
			if wan != "" {
				fmt.Fprintf(out, "  emulated WAN %s, endpoints as seen from region %s\n", wan, c.ClientRegion)
			}
			if err := os.WriteFile(filepath.Join(dir, endpointsFile), []byte(strings.Join(c.Endpoints, ",")+"\n"), 0o644); err != nil {
				c.Stop()
				return fmt.Errorf("writing endpoints: %w", err)
			}
			flags := ""
			if sec.enabled() {
				flags = " --cacert " + filepath.Join(sec.CertsDir, "ca.crt")
				if sec.CACert != "" {
					flags = " --cacert " + sec.CACert
				}
				flags += " --cert CLIENT.crt --key CLIENT.key"
			}
			fmt.Fprintf(out, "try:  go run ./cmd/correctables%s invoke put k v\n      go run ./cmd/correctables%s invoke get k\nCtrl-C stops the cluster.\n", flags, flags)
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
			<-sig
			fmt.Fprintln(out, "correctables: stopping")
			os.Remove(filepath.Join(dir, endpointsFile))
			return c.Stop()
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "data", "data", "data directory (one sub-directory per replica)")
	f.IntVar(&replicas, "replicas", 3, "number of replicas")
	f.StringVar(&host, "host", "127.0.0.1", "address to listen on")
	f.IntVar(&basePort, "base-port", 7100, "replica i listens on base-port+i; 0 picks free ports")
	f.StringVar(&wan, "wan", "", "emulate a WAN from a preset: ec2-2016 or pileus-2013")
	f.StringVar(&region, "client-region", "", "region the printed endpoints are seen from (with --wan)")
	f.BoolVarP(&verbose, "verbose", "v", false, "log replica events")
	f.StringVar(&token, "cluster-token", "", "a token that goes into the cluster id (see serve --cluster-token)")
	sec.register(f)
	return cmd
}
