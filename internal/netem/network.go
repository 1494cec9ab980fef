package netem

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// ErrUnknownReplica is returned for a replica name the Network does not know.
var ErrUnknownReplica = errors.New("netem: unknown replica")

// Replica is a node that others dial: its name, its region and the address
// it really listens on.
type Replica struct {
	Name   string
	Region string
	Addr   string
}

// NetworkConfig configures a Network.
type NetworkConfig struct {
	// Topology gives the regions and the RTT between them.
	Topology Topology
	// Replicas are the nodes to put behind the emulated WAN.
	Replicas []Replica
	// Sources are the regions from which nodes dial replicas. Default: every
	// region of the topology (a client region such as Pileus' China needs no
	// replica).
	Sources []string
	// Link is the template of every proxy. Latency is set from the topology
	// (half the RTT); Seed is offset per link so links draw distinct jitter;
	// the other fields apply as they are.
	Link Config
}

type linkKey struct{ from, replica string }

// Network is a set of proxies, one per (source region, replica) pair, that
// emulates a WAN between the regions of a Topology. Its methods are safe for
// concurrent use.
type Network struct {
	topo     Topology
	replicas map[string]Replica
	sources  []string

	mu      sync.Mutex
	proxies map[linkKey]*Proxy
	closed  bool
}

// NewNetwork starts a proxy for every source region and replica. A node in
// region R reaches replica X by dialling Addr(R, X). Close stops them all.
func NewNetwork(cfg NetworkConfig) (*Network, error) {
	t := cfg.Topology
	if len(t.regions) == 0 {
		return nil, errors.New("netem: network without a topology")
	}
	if len(cfg.Replicas) == 0 {
		return nil, errors.New("netem: network without replicas")
	}
	sources := cfg.Sources
	if len(sources) == 0 {
		sources = t.Regions()
	}
	for _, s := range sources {
		if !t.Has(s) {
			return nil, t.unknown(s)
		}
	}
	n := &Network{
		topo:     t,
		replicas: make(map[string]Replica, len(cfg.Replicas)),
		sources:  slices.Clone(sources),
		proxies:  make(map[linkKey]*Proxy),
	}
	for _, r := range cfg.Replicas {
		switch {
		case r.Name == "":
			return nil, errors.New("netem: replica without a name")
		case r.Addr == "":
			return nil, fmt.Errorf("netem: replica %s without an address", r.Name)
		case !t.Has(r.Region):
			return nil, fmt.Errorf("replica %s: %w", r.Name, t.unknown(r.Region))
		}
		if _, dup := n.replicas[r.Name]; dup {
			return nil, fmt.Errorf("netem: replica %s listed twice", r.Name)
		}
		n.replicas[r.Name] = r
	}
	var i uint64
	for _, s := range n.sources {
		for _, r := range cfg.Replicas {
			rtt, _ := t.RTT(s, r.Region)
			lc := cfg.Link
			lc.Latency = rtt / 2
			lc.Seed = cfg.Link.Seed + i
			i++
			p, err := NewProxy(r.Addr, lc)
			if err != nil {
				_ = n.Close()
				return nil, fmt.Errorf("netem: link %s -> %s: %w", s, r.Name, err)
			}
			n.proxies[linkKey{s, r.Name}] = p
		}
	}
	return n, nil
}

// Topology returns the network's topology.
func (n *Network) Topology() Topology { return n.topo }

// Addr is the address a node in region from dials to reach the replica.
func (n *Network) Addr(from, replica string) (string, error) {
	p, err := n.Proxy(from, replica)
	if err != nil {
		return "", err
	}
	return p.Addr(), nil
}

// Proxy returns the link from region from to the replica, to change its
// latency or partition it alone.
func (n *Network) Proxy(from, replica string) (*Proxy, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	if _, ok := n.replicas[replica]; !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownReplica, replica)
	}
	p, ok := n.proxies[linkKey{from, replica}]
	if !ok {
		if err := n.topo.unknown(from); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("netem: region %s is not a source of this network (sources: %v)", from, n.sources)
	}
	return p, nil
}

// between returns the links between regions a and b, both ways.
func (n *Network) between(a, b string) ([]*Proxy, error) {
	if err := n.topo.unknown(a, b); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	var ps []*Proxy
	for k, p := range n.proxies {
		r := n.replicas[k.replica].Region
		if (k.from == a && r == b) || (k.from == b && r == a) {
			ps = append(ps, p)
		}
	}
	return ps, nil
}

// Partition partitions regions a and b from each other, both ways, in the
// configured PartitionMode. With a == b it partitions the nodes of the
// region from its own replicas.
func (n *Network) Partition(a, b string) error {
	ps, err := n.between(a, b)
	for _, p := range ps {
		p.Partition()
	}
	return err
}

// Cut partitions a and b in Cut mode: their connections are reset.
func (n *Network) Cut(a, b string) error {
	ps, err := n.between(a, b)
	for _, p := range ps {
		p.Cut()
	}
	return err
}

// Heal ends a partition between a and b.
func (n *Network) Heal(a, b string) error {
	ps, err := n.between(a, b)
	for _, p := range ps {
		p.Heal()
	}
	return err
}

// Isolate partitions region from every other region.
func (n *Network) Isolate(region string) error {
	for _, r := range n.topo.regions {
		if r == region {
			continue
		}
		if err := n.Partition(region, r); err != nil {
			return err
		}
	}
	return nil
}

// HealAll ends every partition.
func (n *Network) HealAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.proxies {
		p.Heal()
	}
}

// SetRTT changes the round-trip time between regions a and b (both ways)
// for bytes sent from now on.
func (n *Network) SetRTT(a, b string, rtt time.Duration) error {
	if err := checkRTT(rtt); err != nil {
		return fmt.Errorf("netem: %s-%s: %w", a, b, err)
	}
	ps, err := n.between(a, b)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if err := p.SetLatency(rtt / 2); err != nil {
			return err
		}
	}
	return nil
}

// SetJitter changes the jitter of the links between regions a and b (both
// ways, see Config.Jitter) for bytes read from now on. Each one-way delay
// then spreads over [RTT/2-jitter, RTT/2+jitter], so a round trip over
// [RTT-2*jitter, RTT+2*jitter].
func (n *Network) SetJitter(a, b string, jitter time.Duration) error {
	ps, err := n.between(a, b)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if err := p.SetJitter(jitter); err != nil {
			return fmt.Errorf("netem: %s-%s: %w", a, b, err)
		}
	}
	return nil
}

// Close stops every proxy and waits for their goroutines. It is idempotent.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	ps := make([]*Proxy, 0, len(n.proxies))
	for _, p := range n.proxies {
		ps = append(ps, p)
	}
	n.mu.Unlock()
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}
