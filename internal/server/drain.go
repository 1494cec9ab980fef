package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
)

// Draining before a removal (see replica's drain.go). member remove and
// member replace first commit a drain marker for the replica they remove,
// then wait until it confirms, through the log, that every operation it
// acknowledged is committed; only then do they propose the configuration
// change. A replica that does not confirm within the bound (it is down,
// or cut off) is removed all the same, and the reply says so: weak writes
// it acknowledged and had not gossiped may be lost with it.

// defaultDrainTimeout is Config.DrainTimeout's default.
const defaultDrainTimeout = 10 * time.Second

// changeMargin is the time a removal keeps for the change itself after
// the drain, out of the caller's deadline (or half of it, if less).
const changeMargin = 5 * time.Second

// drainBound is the bound of one removal's drain: the request's, else the
// server's; within the caller's deadline, with time left for the change
// itself (changeMargin).
func (c clusterService) drainBound(ctx context.Context, ms uint32) time.Duration {
	bound := c.s.cfg.DrainTimeout
	if ms > 0 {
		bound = time.Duration(ms) * time.Millisecond
	}
	if dl, ok := ctx.Deadline(); ok {
		rem := time.Until(dl)
		bound = min(bound, max(rem-changeMargin, rem/2))
	}
	return bound
}

// drainFor drains the replica chs removes (the first Remove) unless chs is
// not a valid change now (the change then fails as it would without a
// drain, and no replica is left draining). While another membership change
// is in progress (a joint configuration, which raft leaves on its own) it
// waits for it, within the request's deadline (memberTimeout without one),
// and drains nobody if it does not end: a change proposed then would wait
// too, and a drained replica refuses its clients until it is removed.
func (c clusterService) drainFor(ctx context.Context, chs []replica.MemberChange, ms uint32) (string, error) {
	i := slices.IndexFunc(chs, func(ch replica.MemberChange) bool { return ch.Kind == replica.Remove })
	if i < 0 {
		return "", nil
	}
	wctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, memberTimeout)
		defer cancel()
	}
	for {
		var cerr error
		if err := c.s.exec(wctx, func(r *replica.Replica) { cerr = r.CheckMembers(chs) }); err != nil {
			return "", toStatus(err)
		}
		switch {
		case cerr == nil:
			return c.drain(ctx, chs[i].ID, c.drainBound(ctx, ms))
		case !errors.Is(cerr, replica.ErrMemberChangePending):
			// Not a valid change (or removed already, a retry, which is
			// not an error): change() says so; nothing to drain.
			return "", nil
		}
		select {
		case <-wctx.Done():
			return "", status.Errorf(codes.Unavailable, "replica %d: another membership change is in progress (%v); nothing was drained or changed; check `member list` and retry", c.s.cfg.ID, strings.TrimPrefix(cerr.Error(), "replica: "))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// drain commits the drain marker of replica id (proposing it again while
// it is not applied here) and waits until this replica has applied id's
// "drained" marker, or bound passed. It returns the warning for the reply
// ("" once drained, or when there is nothing to drain: id is removed
// already or not a member, which the change then reports).
func (c clusterService) drain(ctx context.Context, id uint64, bound time.Duration) (string, error) {
	s := c.s
	deadline := time.Now().Add(bound)
	for attempt := 0; ; attempt++ {
		var done bool
		var perr error
		err := s.exec(ctx, func(r *replica.Replica) {
			switch {
			case slices.Contains(r.RemovedIDs(), id) || !slices.ContainsFunc(r.Members(), func(m replica.Member) bool { return m.ID == id }):
				done = true
			case r.Drained(id):
				done = true
			case !r.Draining(id) && attempt%25 == 0: // every half second
				perr = r.ProposeDrain(id)
			}
		})
		switch {
		case err != nil:
			return "", toStatus(err)
		case done:
			if attempt > 0 {
				s.log.Info("replica drained before its removal", "replica", id)
			}
			return "", nil
		case errors.Is(perr, replica.ErrBadMemberChange):
			return "", status.Error(codes.InvalidArgument, strings.TrimPrefix(perr.Error(), "replica: "))
		}
		if time.Now().After(deadline) {
			warning := fmt.Sprintf("replica %d did not confirm its drain within %v; weak writes it acknowledged and had not gossiped may be lost", id, bound)
			s.log.Warn("removing a replica that did not confirm its drain", "replica", id, "bound", bound, "warning", warning)
			return warning, nil
		}
		select {
		case <-ctx.Done():
			return "", status.Errorf(codes.Unavailable, "replica %d: the drain of replica %d was not confirmed before the request's deadline; check `member list` and retry", s.cfg.ID, id)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// withWarning returns the reply with its warning set (a copy: the reply
// may be the published member list).
func withWarning(out *api.MemberListReply, warning string) *api.MemberListReply {
	if out == nil || warning == "" {
		return out
	}
	out = proto.Clone(out).(*api.MemberListReply)
	out.Warning = warning
	return out
}
