package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// Etcd is an etcd cluster reached with go.etcd.io/etcd/client/v3, each
// connection one clientv3.Client (one gRPC connection balancing over the
// endpoints). The modes map to etcd's operations as closely as it allows:
//
//	read   strong, invoke: linearizable Get;  weak: serializable Get
//	write  Put in every mode (etcd has no weaker write)
//
// etcd has one view per operation: it is reported as the final view in
// strong and invoke mode, as the preliminary one in weak mode, so that each
// column compares with the view our store returns in that mode.
type Etcd struct {
	Endpoints []string
}

func (s *Etcd) Name() string { return "etcd" }

func (s *Etcd) Dial(ctx context.Context) (Conn, error) {
	c := &etcdConn{}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   s.Endpoints,
		DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithStatsHandler(&byteCounter{c: c})},
		Logger:      zap.NewNop(),
		Context:     context.WithoutCancel(ctx),
	})
	if err != nil {
		return nil, err
	}
	c.cli = cli
	return c, nil
}

type etcdConn struct {
	cli            *clientv3.Client
	sent, received atomic.Uint64
}

func (c *etcdConn) Close() error { return c.cli.Close() }

// Bytes are the gRPC wire bytes of every RPC of the client (the KV calls,
// and whatever else the client sends, which under load is negligible),
// counted like the Correctables client's: messages with gRPC's framing,
// without HTTP/2 framing.
func (c *etcdConn) Bytes() (LinkBytes, bool) {
	return LinkBytes{Sent: c.sent.Load(), Received: c.received.Load()}, true
}

func (c *etcdConn) Do(ctx context.Context, op Op, mode Mode) (Sample, error) {
	if mode == CPQ {
		return Sample{}, errors.New("etcd: mode cpq runs on our store only")
	}
	start := time.Now()
	var err error
	if op.Read {
		var opts []clientv3.OpOption
		if mode == Weak {
			opts = append(opts, clientv3.WithSerializable())
		}
		_, err = c.cli.Get(ctx, op.Key, opts...)
	} else {
		_, err = c.cli.Put(ctx, op.Key, string(op.Value))
	}
	d := time.Since(start)
	if err != nil {
		return Sample{}, err
	}
	if mode == Weak {
		return Sample{HasPrelim: true, Prelim: d}, nil
	}
	return Sample{HasFinal: true, Final: d}, nil
}

// byteCounter is a gRPC stats handler counting payload wire bytes.
type byteCounter struct{ c *etcdConn }

func (b *byteCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (b *byteCounter) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch s := s.(type) {
	case *stats.OutPayload:
		b.c.sent.Add(uint64(s.WireLength))
	case *stats.InPayload:
		b.c.received.Add(uint64(s.WireLength))
	}
}
func (b *byteCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (b *byteCounter) HandleConn(context.Context, stats.ConnStats) {}

// EtcdMember configures one member of an etcd cluster run with
// go.etcd.io/etcd/server/v3/embed, with etcd's defaults otherwise (fsync on,
// no auto-compaction unless AutoCompaction is set).
type EtcdMember struct {
	Name, Dir          string
	ClientURL, PeerURL string
	// InitialCluster lists every member as name=peerURL, comma-separated
	// (default: this member alone).
	InitialCluster string
	// Token is the initial cluster token (default "correctables-bench").
	Token string
	// LogLevel is etcd's log level (default "error"); logs go to stderr.
	LogLevel string
	// AutoCompaction, if positive, turns on etcd's periodic auto-compaction
	// with this retention (--auto-compaction-mode=periodic). Without it
	// etcd keeps every revision of every key, so a stream of large values
	// fills its backend quota (2 GiB by default) within minutes and etcd
	// refuses writes ("mvcc: database space exceeded").
	AutoCompaction time.Duration
}

// StartEtcdMember starts the member and returns once it has started
// serving or failed; ready is closed when it is ready to serve clients
// (for a cluster: once it has joined a quorum).
func StartEtcdMember(m EtcdMember) (e *embed.Etcd, err error) {
	cu, err := url.Parse(m.ClientURL)
	if err != nil || cu.Host == "" {
		return nil, fmt.Errorf("etcd member: client URL %q: want http://HOST:PORT", m.ClientURL)
	}
	pu, err := url.Parse(m.PeerURL)
	if err != nil || pu.Host == "" {
		return nil, fmt.Errorf("etcd member: peer URL %q: want http://HOST:PORT", m.PeerURL)
	}
	if m.Name == "" || m.Dir == "" {
		return nil, errors.New("etcd member: name and data directory are required")
	}
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = m.Dir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = m.InitialCluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = m.Name + "=" + m.PeerURL
	}
	cfg.InitialClusterToken = m.Token
	if cfg.InitialClusterToken == "" {
		cfg.InitialClusterToken = "correctables-bench"
	}
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.Logger = "zap"
	cfg.LogLevel = m.LogLevel
	if cfg.LogLevel == "" {
		cfg.LogLevel = "error"
	}
	cfg.LogOutputs = []string{"stderr"}
	if m.AutoCompaction > 0 {
		cfg.AutoCompactionMode = "periodic"
		cfg.AutoCompactionRetention = m.AutoCompaction.String()
	}
	return embed.StartEtcd(cfg)
}

// WaitEtcd waits until a linearizable read succeeds on the cluster (a
// leader is elected and has a quorum).
func WaitEtcd(ctx context.Context, endpoints []string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Get(rctx, "correctables-bench-ready")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd: no answer from %v: %w (last: %v)", endpoints, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
