package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correctables/correctables/client"
)

// TestNoPingPerRoundTrip: with gRPC's default flow control, its
// bandwidth-delay estimator sends a PING on receiving data whenever none of
// its pings is outstanding, once per round trip, so with a store's small
// messages almost every request, reply and gossip message made the other
// end read and acknowledge a ping. The windows set on every connection
// (windowServerOptions, windowDialOptions, the client's dial options) turn
// it off. Counted on the wire of one replica of three: every HTTP/2 frame
// it reads and writes, on its client and peer connections, while a client
// of the public library makes 300 weak puts through it one at a time.
// Without the windows, each side counts a few hundred pings.
func TestNoPingPerRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	peers := freePeers(t, 3)
	lis, ok := heldListeners.LoadAndDelete(peers[1]) // freeAddr's
	if !ok {
		t.Fatal("no listener held for", peers[1])
	}
	counted := &frameListener{Listener: lis.(net.Listener)}
	var servers []*Server
	for id := uint64(1); id <= 3; id++ {
		servers = append(servers, startOnPebble(t, dir, peers, id, true, func(c *Config) {
			if id == 1 {
				c.ClientListener = counted
			}
		}))
	}
	defer func() {
		for _, s := range servers {
			s.Stop()
		}
	}()
	waitLeader(ctx, t, servers)
	cli, err := client.Dial(ctx, []string{peers[1]})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put := func(i int) {
		if _, err := cli.InvokeWeak(ctx, client.Put(fmt.Sprintf("k%d", i%10), []byte("value"))).Final(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 { // connections up, windows settled
		put(i)
	}
	in0, out0 := counted.pings()
	const n = 300
	for i := range n {
		put(i)
	}
	in, out := counted.pings()
	in, out = in-in0, out-out0
	t.Logf("%d weak puts: PING frames read %d, written %d (acks excluded)", n, in, out)
	if in > n/10 || out > n/10 {
		t.Fatalf("%d weak puts cost %d pings read and %d written by one replica: a ping per round trip", n, in, out)
	}
}

// frameListener counts the HTTP/2 PING frames (not their acks) read and
// written on the connections it accepts.
type frameListener struct {
	net.Listener
	in, out atomic.Int64
}

func (l *frameListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &frameConn{Conn: c, in: frameCounter{skip: len(http2Preface), n: &l.in}, out: frameCounter{n: &l.out}}, nil
}

func (l *frameListener) pings() (in, out int64) { return l.in.Load(), l.out.Load() }

// http2Preface is what a client sends before its first frame.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

type frameConn struct {
	net.Conn
	rmu, wmu sync.Mutex
	in, out  frameCounter
}

func (c *frameConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.rmu.Lock()
	c.in.feed(b[:n])
	c.rmu.Unlock()
	return n, err
}

func (c *frameConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.wmu.Lock()
	c.out.feed(b[:n])
	c.wmu.Unlock()
	return n, err
}

// frameCounter follows a stream of HTTP/2 frames (a 9-byte header: 24-bit
// length, type, flags, stream) and counts the PINGs without the ACK flag.
type frameCounter struct {
	skip int // bytes still to skip: the preface, or a frame's payload
	hdr  []byte
	n    *atomic.Int64
}

func (f *frameCounter) feed(b []byte) {
	for len(b) > 0 {
		if f.skip > 0 {
			k := min(f.skip, len(b))
			f.skip -= k
			b = b[k:]
			continue
		}
		k := min(9-len(f.hdr), len(b))
		f.hdr = append(f.hdr, b[:k]...)
		b = b[k:]
		if len(f.hdr) < 9 {
			return
		}
		length := int(binary.BigEndian.Uint32(append([]byte{0}, f.hdr[:3]...)))
		const typePing, flagAck = 0x6, 0x1
		if f.hdr[3] == typePing && f.hdr[4]&flagAck == 0 {
			f.n.Add(1)
		}
		f.skip = length
		f.hdr = f.hdr[:0]
	}
}
