package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
)

// Membership in the server: the loop follows the replica's configuration
// (peer connections to the current members only, streams accepted from
// them), stops the replica once it is removed, and serves the Cluster
// service. The membership itself is replicated state of the core (see
// replica.Members).

// ErrRemoved: this replica was removed from the cluster; it stopped, or it
// does not start again. The error also matches replica.ErrRemoved.
var ErrRemoved = errors.New("server: this replica was removed from the cluster")

// removedError is why a removed replica stopped or does not start; it
// matches ErrRemoved and replica.ErrRemoved.
type removedError struct{ msg string }

func (e removedError) Error() string { return e.msg }

func (e removedError) Is(target error) bool {
	return target == ErrRemoved || target == replica.ErrRemoved
}

// removalRecord is the part of a Storage that keeps a removal durably
// (storage.Store has it): once removed, a replica does not start again on
// the same data, even when its log does not hold its removal.
type removalRecord interface {
	MarkRemoved(why string) error
	Removed() (why string, removed bool, err error)
}

// checkNotRemoved refuses to start a replica whose storage records its
// removal.
func checkNotRemoved(cfg Config) error {
	rr, ok := cfg.Storage.(removalRecord)
	if !ok {
		return nil
	}
	why, removed, err := rr.Removed()
	if err != nil {
		return fmt.Errorf("server: reading the removal record: %w", err)
	}
	if removed {
		return refuseRemoved(cfg.ID, why)
	}
	return nil
}

// refuseRemoved is the error a removed replica's restart fails with.
func refuseRemoved(id uint64, why string) error {
	return removedError{fmt.Sprintf("replica %d was removed from the cluster (%s) and does not start again: "+
		"its data directory is kept for inspection; a replacement joins under a new id with an empty data directory "+
		"(member add, then serve --join)", id, why)}
}

// stopRemoved records the removal in storage, logs it, and returns the
// error the loop stops with; why says how this replica learnt it.
func (s *Server) stopRemoved(why string) error {
	why = fmt.Sprintf("%s; stopped at %s", why, time.Now().UTC().Format(time.RFC3339))
	if rr, ok := s.cfg.Storage.(removalRecord); ok {
		if err := rr.MarkRemoved(why); err != nil {
			s.log.Error("could not record the removal in the data directory", "err", err)
		}
	}
	s.log.Error("removed from the cluster: this replica stopped and does not start again; its data directory is kept for inspection, and a replacement joins under a new id",
		"how", why)
	return removedError{fmt.Sprintf("replica %d was removed from the cluster (%s)", s.cfg.ID, why)}
}

// removedMarker is in the message of the status a replica answers a removed
// replica's stream with; the removed replica stops when it reads it.
const removedMarker = "was removed from the cluster"

// memberTimeout bounds how long a membership RPC waits for its change to be
// applied when the caller set no deadline.
const memberTimeout = 10 * time.Second

// membership is the server's view of the configuration, owned by the loop
// and published for the peer service.
type membership struct {
	gen  uint64 // the replica's MembershipGen at the last sync
	view atomic.Pointer[memberView]
	// told is the id of a member that refused this replica's stream
	// because it was removed (it may have been removed while it was down),
	// or 0.
	told atomic.Uint64
}

// memberView is what incoming peer streams are checked against.
type memberView struct {
	allowed map[uint64]bool // current members, and the ids of Config.Peers
	removed map[uint64]bool
	list    *api.MemberListReply
}

func newMembership(s *Server) *membership {
	m := &membership{}
	allowed := map[uint64]bool{}
	for id := range s.cfg.Peers {
		allowed[id] = true
	}
	m.view.Store(&memberView{allowed: allowed, removed: map[uint64]bool{}, list: &api.MemberListReply{Id: s.cfg.ID}})
	return m
}

// checkPeer says whether a stream from replica from is accepted.
func (s *Server) checkPeer(from uint64) error {
	v := s.mem.view.Load()
	if v.removed[from] {
		return status.Errorf(codes.FailedPrecondition, "replica %d %s; it must stop (a replacement joins under a new id)", from, removedMarker)
	}
	if !v.allowed[from] || from == s.cfg.ID {
		return toStatus(fmt.Errorf("%w: messages from unknown replica %d", ErrInvalidRequest, from))
	}
	return nil
}

// isRemovedStatus reports whether a peer refused this replica's stream
// because it was removed.
func isRemovedStatus(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.FailedPrecondition && strings.Contains(st.Message(), removedMarker)
}

// startPeer starts the connection to a member; it runs until the server
// stops or the member leaves (stopPeer).
func (s *Server) startPeer(id uint64, addr string) {
	p := newPeer(s, id, addr)
	p.quit = make(chan struct{})
	s.peers[id] = p
	s.links.Store(id, p)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		stop := make(chan struct{})
		go func() {
			select {
			case <-s.stop:
			case <-p.quit:
			}
			close(stop)
		}()
		p.run(stop)
	}()
}

// startPeers starts the connections to the peers known at start.
func (s *Server) startPeers() {
	for _, id := range slices.Sorted(maps.Keys(s.cfg.Peers)) {
		if id != s.cfg.ID {
			s.startPeer(id, s.cfg.Peers[id])
		}
	}
}

// syncMembers runs on the loop after every Ready: once the replica's
// membership changed, it starts connections to new members (at the address
// of this replica's configuration, else the one the change announced),
// stops those to departed ones, and publishes the view for the peer
// service. It returns ErrRemoved once this replica is removed.
func (s *Server) syncMembers() error {
	if by := s.mem.told.Load(); by != 0 {
		return s.stopRemoved(fmt.Sprintf("member %d refused its messages: the cluster's configuration lists it as removed", by))
	}
	gen := s.rep.MembershipGen()
	if gen == s.mem.gen {
		return nil
	}
	s.mem.gen = gen
	members := s.rep.Members()
	removed := s.rep.RemovedIDs()
	allowed := map[uint64]bool{}
	for id := range s.cfg.Peers {
		allowed[id] = true
	}
	want := map[uint64]string{}
	for _, m := range members {
		allowed[m.ID] = true
		if m.ID == s.cfg.ID {
			continue
		}
		addr := s.cfg.Peers[m.ID]
		if addr == "" {
			addr = m.Addr
		}
		if addr == "" {
			s.log.Warn("member without a peer address: give it in --peers", "member", m.ID)
			continue
		}
		want[m.ID] = addr
	}
	v := &memberView{allowed: allowed, removed: map[uint64]bool{}, list: s.memberList(members, removed)}
	for _, id := range removed {
		v.removed[id] = true
		delete(allowed, id)
	}
	// Before this replica knows a configuration that includes it (it
	// joins), it keeps talking to the peers it was started with: one of
	// them leads and sends it the log.
	self := slices.ContainsFunc(members, func(m replica.Member) bool { return m.ID == s.cfg.ID })
	for id, p := range s.peers {
		if _, ok := want[id]; !ok && (self || v.removed[id]) {
			close(p.quit)
			delete(s.peers, id)
			s.links.CompareAndDelete(id, p)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(want)) {
		if p, ok := s.peers[id]; ok && p.addr == want[id] {
			continue
		} else if ok {
			close(p.quit)
		}
		s.startPeer(id, want[id])
	}
	s.mem.view.Store(v)
	s.log.Info("members", "members", memberIDs(members), "removed", removed, "joint", s.rep.Joint())
	if s.rep.Removed() {
		return s.stopRemoved("it applied the configuration change that removed it")
	}
	return nil
}

func memberIDs(ms []replica.Member) []uint64 {
	ids := make([]uint64, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return ids
}

// memberList is the Cluster service's reply, built on the loop.
func (s *Server) memberList(members []replica.Member, removed []uint64) *api.MemberListReply {
	applied, _, _ := s.rep.Progress()
	out := &api.MemberListReply{Id: s.cfg.ID, Leader: s.rep.Leader(), Removed: removed, Joint: s.rep.Joint(), AppliedIndex: applied}
	for _, m := range members {
		addr := m.Addr
		if addr == "" {
			addr = s.cfg.Peers[m.ID]
		}
		out.Members = append(out.Members, &api.Member{Id: m.ID, PeerAddr: addr, Learner: m.Learner, Draining: s.rep.Draining(m.ID)})
	}
	return out
}

// Done is closed when the replica stopped: Stop was called, storage failed,
// or the replica was removed from the cluster (Err says which).
func (s *Server) Done() <-chan struct{} { return s.loopDone() }

// Err returns why the replica stopped, once Done is closed (nil after Stop).
func (s *Server) Err() error {
	select {
	case <-s.done:
		return s.loopErr
	default:
		return nil
	}
}

// clusterService implements api.ClusterServer on a Server.
type clusterService struct {
	api.UnimplementedClusterServer
	s *Server
}

// MemberList implements api.ClusterServer.
func (c clusterService) MemberList(ctx context.Context, _ *api.MemberListRequest) (*api.MemberListReply, error) {
	var out *api.MemberListReply
	err := c.s.exec(ctx, func(r *replica.Replica) { out = c.s.memberList(r.Members(), r.RemovedIDs()) })
	return out, toStatus(err)
}

// MemberAdd implements api.ClusterServer.
func (c clusterService) MemberAdd(ctx context.Context, in *api.MemberAddRequest) (*api.MemberListReply, error) {
	if in.GetPeerAddr() == "" {
		return nil, status.Error(codes.InvalidArgument, "member add: the new replica's peer address (HOST:PORT) is required")
	}
	kind := replica.AddVoter
	if in.GetLearner() {
		kind = replica.AddLearner
	}
	id, err := c.newID(ctx, in.GetId())
	if err != nil {
		return nil, err
	}
	ch := replica.MemberChange{Kind: kind, ID: id, Addr: in.GetPeerAddr()}
	return c.change(ctx, []replica.MemberChange{ch}, func(ms []replica.Member, _ []uint64) bool {
		i := slices.IndexFunc(ms, func(m replica.Member) bool { return m.ID == id })
		return i >= 0 && ms[i].Learner == in.GetLearner()
	})
}

// newID returns id, or if it is 0 one above every id the cluster has used:
// members, removed ones, and origins of operations.
func (c clusterService) newID(ctx context.Context, id uint64) (uint64, error) {
	if id != 0 {
		return id, nil
	}
	err := c.s.exec(ctx, func(r *replica.Replica) {
		for _, m := range r.Members() {
			id = max(id, m.ID)
		}
		for _, o := range r.RemovedIDs() {
			id = max(id, o)
		}
		for o := range r.Stamp().VV {
			id = max(id, o)
		}
		id++
	})
	return id, toStatus(err)
}

// MemberReplace implements api.ClusterServer: one change that removes a
// voter and adds another, through joint consensus.
func (c clusterService) MemberReplace(ctx context.Context, in *api.MemberReplaceRequest) (*api.MemberListReply, error) {
	if in.GetPeerAddr() == "" {
		return nil, status.Error(codes.InvalidArgument, "member replace: the new replica's peer address (HOST:PORT) is required")
	}
	old := in.GetRemove()
	id, err := c.newID(ctx, in.GetId())
	if err != nil {
		return nil, err
	}
	chs := []replica.MemberChange{{Kind: replica.Remove, ID: old}, {Kind: replica.AddVoter, ID: id, Addr: in.GetPeerAddr()}}
	// The voter replaced drains first, as with member remove.
	warning, err := c.drainFor(ctx, chs, in.GetDrainTimeoutMs())
	if err != nil {
		return nil, err
	}
	out, err := c.change(ctx, chs, func(ms []replica.Member, removed []uint64) bool {
		i := slices.IndexFunc(ms, func(m replica.Member) bool { return m.ID == id })
		return i >= 0 && !ms[i].Learner && slices.Contains(removed, old) && !c.s.rep.Joint()
	})
	return withWarning(out, warning), err
}

// MemberPromote implements api.ClusterServer.
func (c clusterService) MemberPromote(ctx context.Context, in *api.MemberPromoteRequest) (*api.MemberListReply, error) {
	id := in.GetId()
	return c.change(ctx, []replica.MemberChange{{Kind: replica.Promote, ID: id}}, func(ms []replica.Member, _ []uint64) bool {
		i := slices.IndexFunc(ms, func(m replica.Member) bool { return m.ID == id })
		return i >= 0 && !ms[i].Learner
	})
}

// MemberRemove implements api.ClusterServer.
// The replica removed drains first (drain.go): the change is proposed once
// it confirmed that every operation it acknowledged is committed, or once
// the drain's bound passed (the reply's warning then says so).
func (c clusterService) MemberRemove(ctx context.Context, in *api.MemberRemoveRequest) (*api.MemberListReply, error) {
	id := in.GetId()
	chs := []replica.MemberChange{{Kind: replica.Remove, ID: id}}
	warning, err := c.drainFor(ctx, chs, in.GetDrainTimeoutMs())
	if err != nil {
		return nil, err
	}
	out, err := c.change(ctx, chs, func(_ []replica.Member, removed []uint64) bool {
		return slices.Contains(removed, id)
	})
	return withWarning(out, warning), err
}

// change proposes chs (one entry) and waits until this replica has applied it (done
// reports that), proposing again while it has not: raft drops a proposal
// when there is no leader or an earlier change is not applied yet, and a
// change proposed twice is applied once (the second fails the check at
// apply, at every replica alike). A change that is not valid now fails at
// once with InvalidArgument and changes nothing.
func (c clusterService) change(ctx context.Context, chs []replica.MemberChange, done func([]replica.Member, []uint64) bool) (*api.MemberListReply, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, memberTimeout)
		defer cancel()
	}
	s := c.s
	var lastErr error
	for attempt := 0; ; attempt++ {
		var (
			out     *api.MemberListReply
			applied bool
			perr    error
		)
		err := s.exec(ctx, func(r *replica.Replica) {
			ms, removed := r.Members(), r.RemovedIDs()
			if attempt == 0 {
				if len(chs) == 1 && chs[0].Kind == replica.Remove && done(ms, removed) {
					// Removed already (a retry): nothing to do.
					applied, out = true, s.memberList(ms, removed)
					return
				}
				perr = r.ProposeMembers(chs)
				return
			}
			if applied = done(ms, removed); applied {
				out = s.memberList(ms, removed)
				return
			}
			if attempt%25 == 0 { // every half second
				perr = r.ProposeMembers(chs)
			}
		})
		switch {
		case applied:
			return out, nil
		case errors.Is(err, ErrStopped) && errors.Is(s.Err(), ErrRemoved):
			// This replica removed itself; the change took effect.
			return s.mem.view.Load().list, nil
		case err != nil:
			return nil, toStatus(err)
		case errors.Is(perr, replica.ErrBadMemberChange):
			return nil, status.Error(codes.InvalidArgument, strings.TrimPrefix(perr.Error(), "replica: "))
		case perr != nil:
			lastErr = perr
		}
		select {
		case <-ctx.Done():
			why := "no leader, or another membership change is in progress"
			if lastErr != nil {
				why = strings.TrimPrefix(lastErr.Error(), "replica: ")
			}
			return nil, status.Errorf(codes.Unavailable, "membership change not applied by replica %d in time (%s); check `member list` and retry", s.cfg.ID, why)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
