package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/internal/replica"
)

// peer sends this replica's messages to one other replica over a
// long-lived gRPC stream, reconnecting with backoff. Messages are queued in
// a bounded channel; when it is full they are dropped: raft retransmits and
// anti-entropy repairs gossip, so a slow or dead peer costs memory nowhere.
type peer struct {
	s     *Server
	id    uint64
	addr  string
	queue chan replica.Message
}

const maxBatch = 256

func newPeer(s *Server, id uint64, addr string) *peer {
	return &peer{s: s, id: id, addr: addr, queue: make(chan replica.Message, s.cfg.PeerQueue)}
}

func (p *peer) enqueue(m replica.Message) {
	select {
	case p.queue <- m:
	default:
		p.s.cfg.Metrics.peerDropped()
	}
}

// run keeps a stream to the peer open until stop closes.
func (p *peer) run(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(maxMessage)))
	if err != nil {
		p.s.log.Error("peer address unusable", "peer", p.id, "addr", p.addr, "err", err)
		return
	}
	defer conn.Close()
	client := api.NewPeerClient(conn)
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		err := p.stream(ctx, client)
		if ctx.Err() != nil {
			return
		}
		p.s.log.Debug("peer stream ended", "peer", p.id, "err", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (p *peer) stream(ctx context.Context, client api.PeerClient) error {
	st, err := client.Stream(ctx)
	if err != nil {
		return err
	}
	env := &api.PeerEnvelope{From: p.s.cfg.ID}
	for {
		env.Messages = env.Messages[:0]
		select {
		case m := <-p.queue:
			if err := p.add(env, m); err != nil {
				return err
			}
		case <-ctx.Done():
			_, _ = st.CloseAndRecv()
			return ctx.Err()
		}
	batch:
		for len(env.Messages) < maxBatch {
			select {
			case m := <-p.queue:
				if err := p.add(env, m); err != nil {
					return err
				}
			default:
				break batch
			}
		}
		if err := st.Send(env); err != nil {
			if errors.Is(err, io.EOF) {
				_, err = st.CloseAndRecv()
			}
			return err
		}
	}
}

func (p *peer) add(env *api.PeerEnvelope, m replica.Message) error {
	b, err := replica.EncodeMessage(m)
	if err != nil {
		return err
	}
	env.Messages = append(env.Messages, b)
	return nil
}

// Stream implements api.PeerServer: messages from one peer into the loop.
func (s *Server) Stream(st grpc.ClientStreamingServer[api.PeerEnvelope, api.PeerAck]) error {
	for {
		env, err := st.Recv()
		if err == io.EOF {
			return st.SendAndClose(&api.PeerAck{})
		}
		if err != nil {
			return err
		}
		if _, ok := s.cfg.Peers[env.GetFrom()]; !ok || env.GetFrom() == s.cfg.ID {
			return toStatus(fmt.Errorf("%w: messages from unknown replica %d", ErrInvalidRequest, env.GetFrom()))
		}
		for _, b := range env.GetMessages() {
			m, err := replica.DecodeMessage(b)
			if err != nil || m.From != env.GetFrom() || m.To != s.cfg.ID {
				return toStatus(fmt.Errorf("%w: bad peer message from %d: %v", ErrInvalidRequest, env.GetFrom(), err))
			}
			select {
			case s.inbound <- m:
			case <-s.stop:
				return toStatus(ErrStopped)
			case <-st.Context().Done():
				return st.Context().Err()
			}
		}
	}
}
