package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/redial"
	"github.com/correctables/correctables/internal/replica"
)

// peer sends this replica's messages to one other replica over a
// long-lived gRPC stream, reconnecting with backoff. Messages are encoded
// when queued, and the queue is bounded in messages and in bytes; when it is
// full they are dropped: raft retransmits and anti-entropy repairs gossip,
// so a slow or dead peer costs bounded memory.
type peer struct {
	s      *Server
	id     uint64
	addr   string
	queue  chan outgoing
	queued atomic.Int64  // bytes in queue (the buffers' capacity: outgoing.mem)
	quit   chan struct{} // closed when the peer leaves the cluster
	// kicked wakes run from its wait between streams: the peer has just
	// opened a stream to this replica, so it is up (see kick).
	kicked chan struct{}
	// down is when the link lost its stream (Unix nanoseconds; 0 while a
	// stream is open): past peerDownGrace the peer takes no message (see
	// enqueue).
	down atomic.Int64
}

// peerDownGrace is how long a link without a stream keeps queueing
// messages: a reconnection to a peer that is up takes milliseconds. Past
// it the peer is down, and what is sent to it is dropped, and what was
// queued too, as etcd's transport drops messages to a peer it cannot
// reach. Before, ten seconds of a dead peer's heartbeats, probes and
// gossip waited in its queue (up to PeerQueue messages, PeerQueueBytes);
// when it came back they were sent first, it answered each stale
// heartbeat, each answer made its leader send the probe again, and while
// it worked through them the queue was full and its leader's appends
// were dropped: a restarted former leader stayed fenced 74 ms to 3.9 s
// (TestSoakLeaderKills, 10 s down), where one round trip of appends lifts
// the fence (33-92 ms since).
// A variable for tests.
var peerDownGrace = 300 * time.Millisecond

// outgoing is a message in a peer's queue: encoded (b), or, a raft
// snapshot, to be encoded by the peer's stream (m, of about n bytes). A
// snapshot holds the whole state; encoding one of 256 MiB on the loop
// kept a leader from sending heartbeats for over a second.
type outgoing struct {
	b []byte
	m *replica.Message
	n int
}

// size is the message's bytes, as the size limits count them.
func (o outgoing) size() int {
	if o.m != nil {
		return o.n
	}
	return len(o.b)
}

// mem is the bytes the message holds while queued, as the queue's bound
// counts them: its buffer's capacity (a pooled buffer may be larger than
// the message in it).
func (o outgoing) mem() int {
	if o.m != nil {
		return o.n
	}
	return cap(o.b)
}

const (
	maxBatch = 256
	// maxBatchBytes bounds one envelope of messages; a message larger than
	// peerPartBytes goes in parts.
	maxBatchBytes = 4 << 20
	// maxWholeMessage bounds a message sent in parts.
	maxWholeMessage = 16 << 30
)

// maxPeerMessage bounds one envelope between replicas (gRPC's limit on
// the peer streams). A message larger than peerPartBytes, a raft snapshot
// of a large state, goes in parts of that size (PeerEnvelope.part),
// reassembled by the receiver, up to maxWholeMessage: a follower that fell
// behind the compacted log gets the snapshot whatever the state's size.
// Variables for tests only.
var (
	maxPeerMessage = 64 << 20
	peerPartBytes  = maxBatchBytes
)

// Flow-control windows of every gRPC connection a replica serves or
// dials. Set, they turn off gRPC's bandwidth-delay estimator, which sends a
// PING (and, before it, a WINDOW_UPDATE) on receiving data whenever no
// such ping is outstanding: once per round trip, so with the small
// messages of a store (a request and its reply, a gossip message) nearly
// every message cost the other end a ping to read and acknowledge, two
// more write and read syscalls a message on each side. The sizes are the
// estimator's own upper limit (16 MiB), so no transfer it would have
// widened the window for is slower, on loopback or across a WAN.
const (
	streamWindow = 16 << 20
	connWindow   = 32 << 20
)

// windowServerOptions and windowDialOptions set those windows.
func windowServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(connWindow)}
}

func windowDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(connWindow)}
}

// peerConnect bounds gRPC's own reconnection backoff to what run's loop
// allows (a second). With gRPC's default (1 s, growing 1.6 times per failed
// attempt, up to 2 minutes) a peer that was down for a while was dialed
// again only seconds to minutes after it came back, and every stream run
// opened meanwhile failed at once: the restarted replica heard from no one,
// so it could not catch up and, if it had led before, stayed fenced
// (replica/fence.go) all that time.
var peerConnect = redial.Params

func newPeer(s *Server, id uint64, addr string) *peer {
	return &peer{s: s, id: id, addr: addr, queue: make(chan outgoing, s.cfg.PeerQueue), kicked: make(chan struct{}, 1)}
}

// kick tells the link to the peer that the peer is up: it opened a stream
// to this replica. A link that was waiting to dial it again (gRPC's
// connection backoff, run's wait between streams: up to a second each
// once the peer has been down a while) dials at once (run). A restarted
// replica is heard from by its leader, caught up and, if it had led, let
// out of its fence (replica/fence.go) that much sooner.
func (p *peer) kick() {
	select {
	case p.kicked <- struct{}{}:
	default:
	}
}

// awaitReady waits, up to limit, for conn to be connected: a stream
// opened while it still connects would fail at once (and wait again in
// run). A connection that fails (a refused handshake) is left to the next
// stream to report.
func awaitReady(ctx context.Context, conn *grpc.ClientConn, limit time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	conn.Connect()
	for {
		st := conn.GetState()
		if st == connectivity.Ready || !conn.WaitForStateChange(ctx, st) {
			return
		}
	}
}

// Waits between two streams to a peer: the first after a failure, doubled
// at each failure in a row up to the last. Variables for tests only.
var (
	streamRetryFirst = 10 * time.Millisecond
	streamRetryMax   = time.Second
)

// enqueue queues m for the peer, or drops it; it reports whether m was
// queued. The caller tells raft of a raft message dropped (the peer is
// unreachable: raft probes it afresh rather than count the message as
// on its way).
func (p *peer) enqueue(m replica.Message) bool {
	if d := p.down.Load(); d != 0 && time.Since(time.Unix(0, d)) > peerDownGrace {
		// Down: nothing waits for it, and what waited goes.
		p.s.cfg.Metrics.peerDropped()
		p.discardQueued()
		return false
	}
	// A full queue (a peer that is down or slow) takes nothing: drop the
	// message before encoding it. A leader sends a follower that comes
	// back up to MaxInflightMsgs appends of up to 1 MB in one Ready; when
	// its stream to that follower was not up yet, encoding each one only to
	// drop it kept its loop busy for seconds (TestSoakLeaderKills: the
	// leader answered no Status for 30 s; goroutine dump: EncodeMessage).
	if p.queued.Load() >= int64(p.s.cfg.PeerQueueBytes) || len(p.queue) == cap(p.queue) {
		p.s.cfg.Metrics.peerDropped()
		return false
	}
	var o outgoing
	if m.Raft.GetType() == raftpb.MsgSnap {
		o = outgoing{m: &m, n: len(m.Raft.GetSnapshot().GetData()) + 1024}
	} else {
		b, err := replica.AppendMessage(getMsgBuf(), m)
		if err != nil {
			p.s.log.Error("encoding a peer message", "peer", p.id, "err", err)
			return false
		}
		o.b = b
	}
	if !p.sizeOK(o.size(), m.Type) {
		putMsgBuf(o.b)
		return false
	}
	// A message larger than the queue's byte bound goes when nothing else
	// is queued (a snapshot of a large state).
	if q := p.queued.Load(); q > 0 && q+int64(o.mem()) > int64(p.s.cfg.PeerQueueBytes) {
		p.s.cfg.Metrics.peerDropped()
		putMsgBuf(o.b)
		return false
	}
	select {
	case p.queue <- o:
		p.queued.Add(int64(o.mem()))
		return true
	default:
		p.s.cfg.Metrics.peerDropped()
		putMsgBuf(o.b)
		return false
	}
}

// msgBufs holds the buffers of peer messages sent (or dropped), for the
// next ones: a busy replica encodes tens of megabytes of messages a
// second, a third of what its loop allocated when each had its own.
var msgBufs sync.Pool

// maxPooledMsg bounds the buffers msgBufs keeps: larger messages (a
// leader's appends to a follower that lags) are rare, and a pool of them
// would hold their memory.
const maxPooledMsg = 64 << 10

// getMsgBuf returns an empty buffer for a message.
func getMsgBuf() []byte {
	if b, ok := msgBufs.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return nil
}

// putMsgBuf gives back the buffer of a message that is sent or dropped:
// nothing refers to it any more.
func putMsgBuf(b []byte) {
	if c := cap(b); c > 0 && c <= maxPooledMsg {
		msgBufs.Put(&b)
	}
}

// discardQueued drops what the queue holds (the peer is down).
func (p *peer) discardQueued() {
	for {
		select {
		case o := <-p.queue:
			p.queued.Add(-int64(o.mem()))
			p.s.cfg.Metrics.peerDropped()
			putMsgBuf(o.b)
		default:
			return
		}
	}
}

// sizeOK reports whether a message of n bytes may go (logging and
// counting it dropped if not).
func (p *peer) sizeOK(n int, t replica.MsgType) bool {
	if n <= maxWholeMessage {
		return true
	}
	p.s.log.Error("peer message over the size limit, dropped", "peer", p.id, "type", t, "bytes", n)
	p.s.cfg.Metrics.peerDropped()
	return false
}

// encoded returns o's bytes, encoding a message queued unencoded (nil if it
// cannot go).
func (p *peer) encoded(o outgoing) []byte {
	if o.m == nil {
		return o.b
	}
	b, err := replica.EncodeMessage(*o.m)
	if err != nil {
		p.s.log.Error("encoding a peer message", "peer", p.id, "err", err)
		return nil
	}
	if !p.sizeOK(len(b), o.m.Type) {
		return nil
	}
	return b
}

// run keeps a stream to the peer open until stop closes.
func (p *peer) run(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	creds, err := p.s.dialCreds(p.id, p.addr)
	if err != nil {
		p.s.log.Error("peer not dialed", "peer", p.id, "addr", p.addr, "err", err)
		return
	}
	dial := func() (*grpc.ClientConn, error) {
		return grpc.NewClient(p.addr, append(windowDialOptions(), grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(maxPeerMessage)),
			grpc.WithConnectParams(peerConnect))...)
	}
	conn, err := dial()
	if err != nil {
		p.s.log.Error("peer address unusable", "peer", p.id, "addr", p.addr, "err", err)
		return
	}
	defer func() { conn.Close() }() // the current one
	client := api.NewPeerClient(conn)
	backoff := streamRetryFirst
	var warned time.Time  // last authentication warning
	var refused time.Time // last warning that another cluster refused the stream
	for ctx.Err() == nil {
		sent, err := p.stream(ctx, client)
		if ctx.Err() != nil {
			return
		}
		p.down.CompareAndSwap(0, time.Now().UnixNano())
		if sent {
			backoff = streamRetryFirst // it worked: this failure is the first
		}
		p.s.log.Debug("peer stream ended", "peer", p.id, "err", err)
		if authFailure(err) && time.Since(warned) >= authWarnEvery {
			warned = time.Now()
			p.s.log.Warn("peer authentication failed", "peer", p.id, "addr", p.addr, "err", err)
		}
		p.noteClusterRefusal(err, &refused)
		if isRemovedStatus(err) {
			p.s.mem.told.CompareAndSwap(0, p.id)
		}
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, streamRetryMax)
		case <-p.kicked:
			backoff = streamRetryFirst
			// A connection that is not up may be waiting out gRPC's
			// backoff: a new one dials at once. (Not ResetConnectBackoff:
			// in gRPC 1.85 it reads the connection's subchannels without
			// its lock, a race with gRPC creating one.)
			if conn.GetState() != connectivity.Ready {
				if c, err := dial(); err == nil {
					conn.Close()
					conn, client = c, api.NewPeerClient(c)
				}
			}
			awaitReady(ctx, conn, time.Second)
		case <-ctx.Done():
			return
		}
	}
}

// stream sends the queue's messages on one stream until it fails; sent
// reports whether it sent any.
func (p *peer) stream(ctx context.Context, client api.PeerClient) (sent bool, err error) {
	st, err := client.Stream(p.s.peerStreamContext(ctx))
	if err != nil {
		return false, err
	}
	p.down.Store(0) // the peer takes messages again
	env := &api.PeerEnvelope{From: p.s.cfg.ID}
	var large []byte // taken from the queue, to go in parts after env
	size := 0
	// take moves b from the queue into env, or into large if it goes in
	// parts, and reports whether env may take more.
	take := func(o outgoing) bool {
		p.queued.Add(-int64(o.mem()))
		b := p.encoded(o)
		if b == nil {
			return true
		}
		if len(b) > peerPartBytes {
			large = b
			return false
		}
		env.Messages = append(env.Messages, b)
		size += len(b)
		return len(env.Messages) < maxBatch && size < maxBatchBytes
	}
	// sentMsgs gives back the buffers of env's messages: Send has marshalled
	// them (gRPC's codec copies them into its own buffers, and this link
	// installs no stats handler, which could read the message later).
	sentMsgs := func() {
		for i, b := range env.Messages {
			putMsgBuf(b)
			env.Messages[i] = nil
		}
	}
	send := func(e *api.PeerEnvelope) error {
		if err := st.Send(e); err != nil {
			if errors.Is(err, io.EOF) {
				_, err = st.CloseAndRecv()
			}
			return err
		}
		return nil
	}
	for {
		env.Messages, size, large = env.Messages[:0], 0, nil
		more := false
		select {
		case b := <-p.queue:
			more = take(b)
		case <-ctx.Done():
			_, _ = st.CloseAndRecv()
			return sent, ctx.Err()
		}
	batch:
		for more {
			select {
			case b := <-p.queue:
				more = take(b)
			default:
				break batch
			}
		}
		if len(env.Messages) > 0 {
			err := send(env)
			sentMsgs()
			if err != nil {
				return sent, err
			}
			sent = true
		}
		for off := 0; off < len(large); off += peerPartBytes {
			part := &api.PeerEnvelope{From: p.s.cfg.ID, Part: large[off:min(off+peerPartBytes, len(large))], Whole: uint64(len(large))}
			if err := send(part); err != nil {
				return sent, err // the rest is lost with the stream, as a message would be
			}
			sent = true
		}
	}
}

// Stream implements api.PeerServer: messages from one peer into the loop.
func (s *Server) Stream(st grpc.ClientStreamingServer[api.PeerEnvelope, api.PeerAck]) error {
	ids, err := s.peerIdentity(st.Context())
	if err != nil {
		s.log.Warn("peer stream refused", "err", err)
		return toStatus(err)
	}
	checked := false // the stream's cluster id (checkPeerCluster)
	var whole []byte // a message arriving in parts (PeerEnvelope.part)
	for {
		env, err := st.Recv()
		if err == io.EOF {
			return st.SendAndClose(&api.PeerAck{})
		}
		if err != nil {
			return err
		}
		if err := s.checkPeer(env.GetFrom()); err != nil {
			return err
		}
		if err := authorizePeer(ids, env.GetFrom(), s.cfg.TLS != nil); err != nil {
			s.log.Warn("peer stream refused", "err", err)
			return toStatus(err)
		}
		if !checked {
			if err := s.checkPeerCluster(st.Context(), env.GetFrom()); err != nil {
				return err
			}
			checked = true
			if p, ok := s.links.Load(env.GetFrom()); ok {
				p.(*peer).kick() // it is up: our link to it need not wait
			}
		}
		msgs := env.GetMessages()
		switch w := env.GetWhole(); {
		case w > 0:
			if len(msgs) > 0 || w > maxWholeMessage || (whole != nil && uint64(cap(whole)) != w) ||
				uint64(len(whole)+len(env.GetPart())) > w || len(env.GetPart()) == 0 {
				return toStatus(fmt.Errorf("%w: bad message part from %d (%d bytes of %d, %d received)", ErrInvalidRequest, env.GetFrom(), len(env.GetPart()), w, len(whole)))
			}
			if whole == nil {
				whole = make([]byte, 0, w)
			}
			whole = append(whole, env.GetPart()...)
			if uint64(len(whole)) < w {
				continue
			}
			msgs, whole = [][]byte{whole}, nil
		case whole != nil || len(env.GetPart()) > 0:
			return toStatus(fmt.Errorf("%w: message from %d cut short by another", ErrInvalidRequest, env.GetFrom()))
		}
		for _, b := range msgs {
			m, err := replica.DecodeMessage(b)
			if err != nil || m.From != env.GetFrom() || m.To != s.cfg.ID ||
				(m.Raft != nil && (m.Raft.GetFrom() != m.From || m.Raft.GetTo() != m.To)) {
				return toStatus(fmt.Errorf("%w: bad peer message from %d: %v", ErrInvalidRequest, env.GetFrom(), err))
			}
			select {
			case s.inbound <- m:
			case <-s.stop:
				return toStatus(ErrStopped)
			case <-s.done:
				return toStatus(ErrStopped)
			case <-st.Context().Done():
				return st.Context().Err()
			}
		}
	}
}
