// Package cluster starts a whole cluster of replicas in one process: the
// embedded default behind `correctables up`, the latency-gap benchmark and
// the tests. Each replica has its own Pebble store in a directory of its
// own and talks to the others over real gRPC on loopback, optionally
// through an emulated WAN (internal/netem).
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/correctables/correctables/internal/netem"
	"github.com/correctables/correctables/internal/server"
	"github.com/correctables/correctables/internal/storage"
)

// Options configures a cluster. Zero fields get defaults.
type Options struct {
	// Dir holds one sub-directory per replica (r1, r2, ...). Required.
	Dir string
	// Replicas is the number of replicas. Default 3.
	Replicas int
	// Host is the address replicas listen on. Default 127.0.0.1.
	Host string
	// BasePort: replica i serves on BasePort+i (clients and peers share
	// the port). 0 picks free ports.
	BasePort int
	// WAN names a netem preset (ec2-2016, pileus-2013); empty means no
	// emulated latency. Replica i is placed in the preset's i-th region.
	WAN string
	// ClientRegion is the region clients dial from (with WAN). Default: the
	// first replica's region.
	ClientRegion string
	// Tick and ElectionTicks tune the replicas (see server.Config).
	Tick          time.Duration
	ElectionTicks int
	// NoSync disables fsync (tests and benchmarks only).
	NoSync bool
	Logger *slog.Logger
}

// Cluster is a running in-process cluster.
type Cluster struct {
	Servers []*server.Server
	// Endpoints are what a client in ClientRegion dials, one per replica.
	Endpoints []string
	// Regions[i] is replica i+1's region (with WAN).
	Regions []string
	// ClientRegion is the region Endpoints are seen from (with WAN).
	ClientRegion string
	Net          *netem.Network
	opts         Options
}

// Start starts the cluster, recovering each replica from its directory.
func Start(opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("cluster: Dir is required")
	}
	if opts.Replicas == 0 {
		opts.Replicas = 3
	}
	if opts.Replicas < 1 || opts.Replicas > 9 {
		return nil, fmt.Errorf("cluster: %d replicas; want 1 to 9", opts.Replicas)
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Cluster{opts: opts}
	n := opts.Replicas
	// The real listen addresses.
	listen := make([]string, n)
	for i := range n {
		if opts.BasePort > 0 {
			listen[i] = net.JoinHostPort(opts.Host, strconv.Itoa(opts.BasePort+i+1))
		} else {
			addr, err := freeAddr(opts.Host)
			if err != nil {
				return nil, err
			}
			listen[i] = addr
		}
	}
	// Who dials what: with a WAN, replica i reaches replica j through the
	// proxy for (region i -> j), and clients through (client region -> j).
	peersOf := func(int) map[uint64]string {
		m := map[uint64]string{}
		for j := range n {
			m[uint64(j+1)] = listen[j]
		}
		return m
	}
	c.Endpoints = listen
	if opts.WAN != "" {
		topo, err := netem.Preset(opts.WAN)
		if err != nil {
			return nil, err
		}
		regions := topo.Regions()
		if len(regions) < n {
			return nil, fmt.Errorf("cluster: preset %s has %d regions for %d replicas", opts.WAN, len(regions), n)
		}
		c.Regions = regions[:n]
		if opts.ClientRegion == "" {
			opts.ClientRegion = c.Regions[0]
		}
		if !topo.Has(opts.ClientRegion) {
			return nil, fmt.Errorf("cluster: client region %q is not in preset %s (regions: %s)", opts.ClientRegion, opts.WAN, strings.Join(regions, ", "))
		}
		var reps []netem.Replica
		for i := range n {
			reps = append(reps, netem.Replica{Name: name(i), Region: c.Regions[i], Addr: listen[i]})
		}
		sources := append([]string{}, c.Regions...)
		if !contains(sources, opts.ClientRegion) {
			sources = append(sources, opts.ClientRegion)
		}
		nw, err := netem.NewNetwork(netem.NetworkConfig{Topology: topo, Replicas: reps, Sources: sources})
		if err != nil {
			return nil, err
		}
		c.Net = nw
		c.Endpoints = make([]string, n)
		for j := range n {
			if c.Endpoints[j], err = nw.Addr(opts.ClientRegion, name(j)); err != nil {
				nw.Close()
				return nil, err
			}
		}
		peersOf = func(i int) map[uint64]string {
			m := map[uint64]string{uint64(i + 1): listen[i]}
			for j := range n {
				if j != i {
					m[uint64(j+1)], _ = nw.Addr(c.Regions[i], name(j))
				}
			}
			return m
		}
	}
	c.opts = opts
	c.ClientRegion = opts.ClientRegion
	for i := range n {
		id := uint64(i + 1)
		dir := filepath.Join(opts.Dir, name(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			c.Stop()
			return nil, fmt.Errorf("cluster: %w", err)
		}
		st, err := storage.Open(storage.Options{Dir: dir, NoSync: opts.NoSync, Logger: opts.Logger.With("replica", id)})
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("cluster: replica %d: %w", id, err)
		}
		s, err := server.New(server.Config{
			ID: id, Peers: peersOf(i), ClientAddr: listen[i], PeerAddr: listen[i], Storage: st,
			Tick: opts.Tick, ElectionTicks: opts.ElectionTicks, Logger: opts.Logger,
		})
		if err != nil {
			st.Close()
			c.Stop()
			return nil, err
		}
		if err := s.Start(); err != nil {
			st.Close()
			c.Stop()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	return c, nil
}

// Stop stops every replica and the emulated network.
func (c *Cluster) Stop() error {
	var errs []error
	for _, s := range c.Servers {
		errs = append(errs, s.Stop())
	}
	if c.Net != nil {
		errs = append(errs, c.Net.Close())
	}
	return errors.Join(errs...)
}

func name(i int) string { return "r" + strconv.Itoa(i+1) }

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func freeAddr(host string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("cluster: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// WaitLeader waits until every replica knows the same leader and returns it.
func (c *Cluster) WaitLeader(ctx context.Context) (uint64, error) {
	for {
		var lead uint64
		agree := true
		for _, s := range c.Servers {
			l, err := s.Leader(ctx)
			if err != nil {
				return 0, err
			}
			if l == 0 || (lead != 0 && l != lead) {
				agree = false
			}
			lead = l
		}
		if agree {
			return lead, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("cluster: no leader: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// MoveLeader makes replica id the leader (raft leadership transfer) and
// waits until every replica knows it.
func (c *Cluster) MoveLeader(ctx context.Context, id uint64) error {
	for {
		lead, err := c.WaitLeader(ctx)
		if err != nil {
			return err
		}
		if lead == id {
			return nil
		}
		if err := c.Servers[lead-1].TransferLeadership(ctx, id); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: moving leadership to %d: %w", id, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// RTT returns the emulated round-trip time between two replicas' regions, or
// between the client region and a replica (from = 0); zero without a WAN.
func (c *Cluster) RTT(from, to uint64) time.Duration {
	if c.Net == nil {
		return 0
	}
	a := c.ClientRegion
	if from != 0 {
		a = c.Regions[from-1]
	}
	d, _ := c.Net.Topology().RTT(a, c.Regions[to-1])
	return d
}

// Nearest returns the replica with the smallest emulated round trip from
// the client region (replica 1 without a WAN).
func (c *Cluster) Nearest() uint64 {
	nearest := uint64(1)
	for id := uint64(1); id <= uint64(len(c.Servers)); id++ {
		if c.RTT(0, id) < c.RTT(0, nearest) {
			nearest = id
		}
	}
	return nearest
}
