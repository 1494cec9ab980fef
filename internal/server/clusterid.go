package server

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
)

// Cluster identity. Replicas and clients find each other by address only;
// on a machine or network that runs several clusters, an address freed by
// one cluster's replica may be taken by another cluster's. Every cluster
// therefore has an id, fixed when it bootstraps and kept in each replica's
// storage, and every peer stream and every client reply carries it (gRPC
// metadata api.ClusterIDMetadata), as etcd's cluster ID does:
//
//   - a replica refuses a peer stream that names another cluster
//     (FailedPrecondition, before stepping any of its messages), and logs
//     the refusal once per sending replica and cluster;
//   - a replica answers every client call with its cluster id in the
//     response header, and refuses a call whose metadata expects another
//     cluster, before running it;
//   - a stream or call without a cluster id (an older version, or a joining
//     replica that has not learnt it yet) is accepted.

// ComputeClusterID is the id of a cluster bootstrapped with members (id ->
// peer address) and token (empty without one): a hash of the sorted ids,
// their addresses and the token. Every founding replica computes the same
// id from the same list, without coordination; two clusters on the same
// addresses at different times differ by their tokens. It is never 0.
func ComputeClusterID(members map[uint64]string, token string) uint64 {
	h := sha256.New()
	var b []byte
	b = append(b, "correctables cluster\x00"...)
	for _, id := range slices.Sorted(maps.Keys(members)) {
		b = binary.BigEndian.AppendUint64(b, id)
		b = binary.AppendUvarint(b, uint64(len(members[id])))
		b = append(b, members[id]...)
	}
	b = append(b, 0xff) // ends the members
	b = binary.AppendUvarint(b, uint64(len(token)))
	b = append(b, token...)
	h.Write(b)
	id := binary.BigEndian.Uint64(h.Sum(nil))
	if id == 0 {
		id = 1
	}
	return id
}

// clusterIDStore is the part of a Storage that keeps the cluster id
// (storage.Store has it); without it the id lives in memory only.
type clusterIDStore interface {
	ClusterID() (uint64, bool, error)
	SetClusterID(uint64) error
}

// clusterIdentity is a server's cluster id and what it logged about
// streams from other clusters.
type clusterIdentity struct {
	id    atomic.Uint64 // 0 until known (a joining replica)
	store clusterIDStore
	mu    sync.Mutex // serializes learning the id
	// refused holds the "replica/cluster" pairs whose streams were
	// refused and logged: each is logged once.
	refused sync.Map
	// header is the response header that carries id, built once per id
	// (gRPC copies a header it is given: the map is never written).
	header atomic.Pointer[clusterHeader]
}

type clusterHeader struct {
	id uint64
	md metadata.MD
}

// headerFor returns the response header that carries the cluster id id.
func (c *clusterIdentity) headerFor(id uint64) metadata.MD {
	if h := c.header.Load(); h != nil && h.id == id {
		return h.md
	}
	h := &clusterHeader{id: id, md: metadata.Pairs(api.ClusterIDMetadata, api.FormatClusterID(id))}
	c.header.Store(h)
	return h.md
}

// ClusterID returns the id of this replica's cluster; 0 while a joining
// replica has not learnt it from a member.
func (s *Server) ClusterID() uint64 { return s.cluster.id.Load() }

// initCluster loads the cluster id from storage or, if the storage has
// none, fixes it: Config.ClusterID if set, else computed from
// Config.InitialCluster (default Peers) and Config.ClusterToken, and
// persists it. A joining replica without one learns it from the first
// stream a member of its Peers opens to it (learnCluster).
func (s *Server) initCluster() error {
	st, _ := s.cfg.Storage.(clusterIDStore)
	s.cluster.store = st
	if st != nil {
		id, ok, err := st.ClusterID()
		if err != nil {
			return fmt.Errorf("server: reading the cluster id: %w", err)
		}
		if ok {
			if s.cfg.ClusterID != 0 && s.cfg.ClusterID != id {
				return fmt.Errorf("server: the data directory belongs to cluster %s, not to cluster %s as configured",
					api.FormatClusterID(id), api.FormatClusterID(s.cfg.ClusterID))
			}
			s.cluster.id.Store(id)
			s.log.Info("cluster", "cluster_id", api.FormatClusterID(id))
			return nil
		}
	}
	id := s.cfg.ClusterID
	if id == 0 && s.cfg.Join {
		s.log.Info("joining: the cluster id comes with the first stream from a member")
		return nil
	}
	if id == 0 {
		founders := s.cfg.InitialCluster
		if len(founders) == 0 {
			founders = s.cfg.Peers
		}
		id = ComputeClusterID(founders, s.cfg.ClusterToken)
	}
	if st != nil {
		if err := st.SetClusterID(id); err != nil {
			return fmt.Errorf("server: recording the cluster id: %w", err)
		}
	}
	s.cluster.id.Store(id)
	s.log.Info("cluster", "cluster_id", api.FormatClusterID(id))
	return nil
}

// learnCluster gives a replica that has no cluster id yet (it joins) the
// id a member's stream carries, and persists it. It returns the id this
// replica has afterwards.
func (s *Server) learnCluster(id, from uint64) uint64 {
	s.cluster.mu.Lock()
	defer s.cluster.mu.Unlock()
	if cur := s.cluster.id.Load(); cur != 0 {
		return cur
	}
	if st := s.cluster.store; st != nil {
		if err := st.SetClusterID(id); err != nil {
			s.log.Error("could not record the cluster id in the data directory", "cluster_id", api.FormatClusterID(id), "err", err)
		}
	}
	s.cluster.id.Store(id)
	s.log.Info("joined cluster", "cluster_id", api.FormatClusterID(id), "from", from)
	return id
}

// clusterMismatch is the status a replica refuses a peer stream or a client
// call of another cluster with.
// who is "the peer says" or "the client expects".
func clusterMismatch(mine, theirs uint64, who string) error {
	return status.Errorf(codes.FailedPrecondition, "cluster id mismatch: this is cluster %s, %s %s",
		api.FormatClusterID(mine), who, api.FormatClusterID(theirs))
}

// isClusterMismatch reports whether err is a refusal by clusterMismatch.
func isClusterMismatch(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.FailedPrecondition && strings.HasPrefix(st.Message(), "cluster id mismatch:")
}

// checkPeerCluster runs on a peer stream's first envelope, from a replica
// that checkPeer and authorizePeer accepted: it refuses a stream that names
// another cluster (logging it once per sending replica and cluster), and
// gives a replica that has no cluster id yet the stream's.
func (s *Server) checkPeerCluster(ctx context.Context, from uint64) error {
	md, _ := metadata.FromIncomingContext(ctx)
	theirs, err := api.ClusterIDFromMetadata(md.Get(api.ClusterIDMetadata))
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "peer stream from replica %d: %v", from, err)
	}
	if theirs == 0 {
		return nil // an older version, or a replica that joins
	}
	mine := s.cluster.id.Load()
	if mine == 0 {
		mine = s.learnCluster(theirs, from)
	}
	if mine == theirs {
		return nil
	}
	if _, logged := s.cluster.refused.LoadOrStore(fmt.Sprintf("%d/%x", from, theirs), true); !logged {
		s.log.Warn("peer stream refused: it comes from a replica of another cluster (an address of this cluster's replica is used by another cluster's, or --peers names a wrong address); none of its messages is stepped",
			"peer", from, "cluster_id", api.FormatClusterID(mine), "peer_cluster_id", api.FormatClusterID(theirs))
	}
	return clusterMismatch(mine, theirs, "the peer says")
}

// peerStreamContext adds this replica's cluster id (if it has one) and its
// id to the metadata of a stream it opens to a peer.
func (s *Server) peerStreamContext(ctx context.Context) context.Context {
	kv := []string{api.ReplicaIDMetadata, strconv.FormatUint(s.cfg.ID, 10)}
	if id := s.cluster.id.Load(); id != 0 {
		kv = append(kv, api.ClusterIDMetadata, api.FormatClusterID(id))
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// peerRefusedWarnEvery spaces the warnings about a peer that refuses this
// replica's streams as another cluster's (they are retried with backoff, up
// to every second: the right replica may come back on that address).
const peerRefusedWarnEvery = 30 * time.Second

// noteClusterRefusal logs, at most every peerRefusedWarnEvery, that the
// replica at the peer's address refused this replica's stream because it
// belongs to another cluster; last is when it last did.
func (p *peer) noteClusterRefusal(err error, last *time.Time) {
	if !isClusterMismatch(err) || time.Since(*last) < peerRefusedWarnEvery {
		return
	}
	*last = time.Now()
	p.s.log.Warn("peer refused this replica's stream: the replica at its address belongs to another cluster; retrying with backoff until this cluster's replica answers there",
		"peer", p.id, "addr", p.addr, "err", status.Convert(err).Message())
}

// clusterServerOptions are the interceptors of the client-facing services
// (Store, Cluster): each reply carries this replica's cluster id in its
// header, and a call that expects another cluster is refused before it
// runs. Peer streams have their own check (checkPeerCluster).
func (s *Server) clusterServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := s.clientCluster(ctx, func(md metadata.MD) error { return grpc.SetHeader(ctx, md) }); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if info.FullMethod != api.Peer_Stream_FullMethodName {
				if err := s.clientCluster(ss.Context(), ss.SetHeader); err != nil {
					return err
				}
			}
			return h(srv, ss)
		}),
	}
}

// clientCluster sets the cluster id in a client call's response header and
// refuses the call if its metadata expects another cluster.
func (s *Server) clientCluster(ctx context.Context, setHeader func(metadata.MD) error) error {
	mine := s.cluster.id.Load()
	if mine == 0 {
		return nil
	}
	_ = setHeader(s.cluster.headerFor(mine))
	// The one key, not a copy of the whole incoming metadata.
	want, err := api.ClusterIDFromMetadata(metadata.ValueFromIncomingContext(ctx, api.ClusterIDMetadata))
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "request metadata: %v", err)
	}
	if want != 0 && want != mine {
		return clusterMismatch(mine, want, "the client expects")
	}
	return nil
}
