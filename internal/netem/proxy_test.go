package netem

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// slack bounds how late a delayed message may be: generous, so that a slow
// or loaded machine does not fail the tests; the lower bounds are strict.
const slack = 500 * time.Millisecond

// echoServer echoes every connection until EOF, then half-closes, so a
// client that half-closes reads back all it sent followed by EOF.
type echoServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startEcho(t testing.TB) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln, conns: make(map[net.Conn]struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer func() {
					s.mu.Lock()
					delete(s.conns, c)
					s.mu.Unlock()
					c.Close()
				}()
				if _, err := io.Copy(c, c); err == nil {
					_ = c.(*net.TCPConn).CloseWrite()
					_, _ = io.Copy(io.Discard, c)
				}
			}()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *echoServer) addr() string { return s.ln.Addr().String() }

func (s *echoServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func startProxy(t testing.TB, target string, cfg Config) *Proxy {
	t.Helper()
	p, err := NewProxy(target, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends msg and waits for its echo, returning the time it took.
func roundTrip(t testing.TB, c net.Conn, msg []byte) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Time{})
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo %q, want %q", got, msg)
	}
	return time.Since(start)
}

// expectSilence asserts that nothing arrives on c for d.
func expectSilence(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	n, err := c.Read(b[:])
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read during partition = %d, %v; want nothing until timeout", n, err)
	}
}

func TestRoundTripIsAtLeastTheRTT(t *testing.T) {
	const rtt = 40 * time.Millisecond
	p := startProxy(t, startEcho(t).addr(), Config{Latency: rtt / 2})
	c := dial(t, p.Addr())
	best := time.Hour
	for i := range 5 {
		d := roundTrip(t, c, []byte("ping"))
		t.Logf("round trip %d: %v", i, d)
		if d < rtt {
			t.Fatalf("round trip %v, want >= %v", d, rtt)
		}
		best = min(best, d)
	}
	// The ceiling applies to the best sample: one scheduling hiccup on a
	// loaded machine must not fail the test.
	if best > rtt+slack {
		t.Fatalf("best round trip %v, want <= %v", best, rtt+slack)
	}
}

// TestDelayIsNotCumulative checks the delay line: a burst of writes arrives
// one RTT later, not one RTT per write.
func TestDelayIsNotCumulative(t *testing.T) {
	const rtt = 40 * time.Millisecond
	const writes = 50 // per-chunk cumulative delay would take >= 1 s each way
	p := startProxy(t, startEcho(t).addr(), Config{Latency: rtt / 2, ChunkSize: 16})
	c := dial(t, p.Addr())
	start := time.Now()
	for range writes {
		if _, err := c.Write([]byte("0123456789abcdef")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := io.ReadFull(c, make([]byte, 16*writes)); err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	if d < rtt || d > rtt+slack {
		t.Fatalf("burst of %d writes took %v, want in [%v, %v]", writes, d, rtt, rtt+slack)
	}
}

// TestIntegrityConcurrent sends large random payloads over several
// connections at once, both directions concurrently (writes and echoes
// overlap), with jitter and small chunks to stress ordering.
func TestIntegrityConcurrent(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	p := startProxy(t, startEcho(t).addr(), Config{
		Latency: 2 * time.Millisecond, Jitter: 2 * time.Millisecond,
		ChunkSize: 4096, MaxChunksInFlight: 64, Seed: seed,
	})
	const conns, size = 4, 2 << 20
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		payload := make([]byte, size)
		for j := range payload {
			payload[j] = byte(rng.Uint32())
		}
		c := dial(t, p.Addr())
		wg.Add(2)
		go func() { // writer: random-sized writes, then half-close
			defer wg.Done()
			for rest := payload; len(rest) > 0; {
				n := min(len(rest), 1+rng.IntN(64<<10))
				if _, err := c.Write(rest[:n]); err != nil {
					errs <- err
					return
				}
				rest = rest[n:]
			}
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				errs <- err
			}
		}()
		go func() { // reader: everything back, then EOF
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			got, err := io.ReadAll(c)
			if err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got, payload) {
				errs <- errors.New("echoed payload differs from what was sent")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s := p.Stats()
	if s.BytesUp != conns*size || s.BytesDown != conns*size {
		t.Errorf("stats %+v, want %d bytes each way", s, conns*size)
	}
}

// TestHalfClose: the client half-closes and still reads the reply; the FIN
// arrives after the data, one latency later.
func TestHalfClose(t *testing.T) {
	const rtt = 20 * time.Millisecond
	p := startProxy(t, startEcho(t).addr(), Config{Latency: rtt / 2})
	c := dial(t, p.Addr())
	start := time.Now()
	if _, err := c.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "last words" {
		t.Fatalf("read %q, %v; want the echo then EOF", got, err)
	}
	if d := time.Since(start); d < rtt {
		t.Fatalf("echo and EOF after %v, want >= %v", d, rtt)
	}
}

func TestSetLatency(t *testing.T) {
	p := startProxy(t, startEcho(t).addr(), Config{})
	c := dial(t, p.Addr())
	if d := roundTrip(t, c, []byte("a")); d > slack {
		t.Fatalf("round trip at 0 latency %v", d)
	}
	if err := p.SetLatency(30 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := roundTrip(t, c, []byte("b")); d < 60*time.Millisecond || d > 60*time.Millisecond+slack {
		t.Fatalf("round trip after SetLatency(30ms) %v, want >= 60ms", d)
	}
	if err := p.SetLatency(-time.Second); err == nil {
		t.Fatal("negative latency accepted")
	}
	if got := p.Latency(); got != 30*time.Millisecond {
		t.Fatalf("latency after a rejected change %v, want 30ms", got)
	}
}

func TestBandwidth(t *testing.T) {
	const bw, size = 4 << 20, 1 << 20 // 1 MiB at 4 MiB/s: >= 250 ms one way
	p := startProxy(t, startEcho(t).addr(), Config{Bandwidth: bw})
	c := dial(t, p.Addr())
	start := time.Now()
	go func() {
		c.Write(make([]byte, size))
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	// Both directions are limited, but they overlap: the floor is one
	// transmission time.
	if d, want := time.Since(start), time.Second*size/bw; d < want {
		t.Fatalf("1 MiB at %d B/s echoed in %v, want >= %v", bw, d, want)
	}
}

func TestPartitionBlackholeHoldsAndHealDelivers(t *testing.T) {
	p := startProxy(t, startEcho(t).addr(), Config{Latency: 5 * time.Millisecond})
	old := dial(t, p.Addr())
	roundTrip(t, old, []byte("before"))

	p.Partition()
	if !p.Partitioned() {
		t.Fatal("not partitioned")
	}
	if _, err := old.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	// A new connection is accepted (the kernel does that) but carries
	// nothing.
	fresh := dial(t, p.Addr())
	if _, err := fresh.Write([]byte("queued")); err != nil {
		t.Fatal(err)
	}
	expectSilence(t, old, 200*time.Millisecond)
	expectSilence(t, fresh, 50*time.Millisecond)

	p.Heal()
	for _, tc := range []struct {
		c    net.Conn
		want string
	}{{old, "held"}, {fresh, "queued"}} {
		got := make([]byte, len(tc.want))
		tc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(tc.c, got); err != nil || string(got) != tc.want {
			t.Fatalf("after heal read %q, %v; want %q", got, err, tc.want)
		}
	}
	roundTrip(t, old, []byte("after"))
}

func TestPartitionCutResetsConnections(t *testing.T) {
	p := startProxy(t, startEcho(t).addr(), Config{PartitionMode: Cut})
	old := dial(t, p.Addr())
	roundTrip(t, old, []byte("before"))

	p.Partition()
	old.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := old.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("read on a cut connection = %d, %v; want a reset or EOF", n, err)
	}
	// New connections are reset as soon as they are accepted. On loopback
	// the reset can arrive before connect returns, so connect itself may
	// fail with ECONNRESET: that is the same reset, seen earlier.
	fresh, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("dial while cut: %v; want success or a reset", err)
		}
	} else {
		defer fresh.Close()
		fresh.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := fresh.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
			t.Fatalf("read on a connection made while cut = %d, %v; want a reset or EOF", n, err)
		}
	}

	p.Heal()
	roundTrip(t, dial(t, p.Addr()), []byte("after"))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestBlackholeThenCut: Cut overrides a blackhole and drops held bytes.
func TestBlackholeThenCut(t *testing.T) {
	p := startProxy(t, startEcho(t).addr(), Config{})
	c := dial(t, p.Addr())
	roundTrip(t, c, []byte("x"))
	p.Blackhole()
	c.Write([]byte("lost"))
	p.Cut()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 4)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("read = %d, %v; want a reset or EOF", n, err)
	}
	p.Heal()
	roundTrip(t, dial(t, p.Addr()), []byte("y"))
}

func TestMaxConnsQueuesFurtherConnections(t *testing.T) {
	p := startProxy(t, startEcho(t).addr(), Config{MaxConns: 1})
	first := dial(t, p.Addr())
	roundTrip(t, first, []byte("1"))
	second := dial(t, p.Addr()) // waits in the accept queue
	if _, err := second.Write([]byte("2")); err != nil {
		t.Fatal(err)
	}
	expectSilence(t, second, 100*time.Millisecond)
	first.Close()
	second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(second, make([]byte, 1)); err != nil {
		t.Fatalf("second connection not served after the first closed: %v", err)
	}
}

func TestCloseStopsEveryGoroutine(t *testing.T) {
	echo := startEcho(t)
	ignore := goleak.IgnoreCurrent()
	p, err := NewProxy(echo.addr(), Config{Latency: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for range 5 {
		c := dial(t, p.Addr())
		roundTrip(t, c, []byte("hello"))
		conns = append(conns, c)
	}
	// Leave bytes in flight and others held by a partition.
	conns[0].Write([]byte("in flight"))
	p.Partition()
	conns[1].Write([]byte("held"))
	held := dial(t, p.Addr()) // accepted, never forwarded
	held.Write([]byte("never"))

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, c := range append(conns, held) {
		c.Close()
	}
	goleak.VerifyNone(t, ignore)
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("proxy still accepts after Close")
	}
}

func TestDialFailureResetsClient(t *testing.T) {
	// A listener closed at once gives an address that refuses.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := startProxy(t, dead, Config{})
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		return // the reset came before connect returned: fine
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("read through a proxy whose target refuses = %d, %v; want reset", n, err)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Latency: -1}, "latency"},
		{Config{Latency: time.Minute}, "latency"},
		{Config{Jitter: -1}, "jitter"},
		{Config{Bandwidth: -1}, "bandwidth"},
		{Config{PartitionMode: 7}, "partition mode"},
		{Config{MaxConns: -1}, "max conns"},
		{Config{ChunkSize: 1 << 30}, "chunk size"},
		{Config{MaxChunksInFlight: -2}, "chunks in flight"},
		{Config{ListenAddr: "256.0.0.1:0"}, "listen"},
		{Config{Loss: -0.1, LossStall: time.Millisecond}, "loss"},
		{Config{Loss: 1.5, LossStall: time.Millisecond}, "loss"},
		{Config{Loss: 0.1}, "loss stall"},
		{Config{Loss: 0.1, LossStall: time.Hour}, "loss stall"},
	} {
		_, err := NewProxy("127.0.0.1:1", tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewProxy(%+v) = %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
	if _, err := NewProxy("", Config{}); err == nil {
		t.Error("empty target accepted")
	}
}

// TestJitterKeepsOrderAndFloor: with jitter, the round trip is never below
// 2*(Latency-Jitter), and bytes arrive in order (see also
// TestIntegrityConcurrent).
func TestJitterKeepsOrderAndFloor(t *testing.T) {
	const latency, jitter = 20 * time.Millisecond, 10 * time.Millisecond
	p := startProxy(t, startEcho(t).addr(), Config{Latency: latency, Jitter: jitter, Seed: 1})
	c := dial(t, p.Addr())
	for i := range 10 {
		if d := roundTrip(t, c, []byte{byte(i), 1, 2, 3}); d < 2*(latency-jitter) {
			t.Fatalf("round trip %v, want >= %v", d, 2*(latency-jitter))
		}
	}
}

// TestBlackholeIsBounded: a sender into a blackhole is blocked by flow
// control once the kernel buffers and the proxy's window are full; the
// proxy does not buffer without limit.
func TestBlackholeIsBounded(t *testing.T) {
	p := startProxy(t, startEcho(t).addr(), Config{ChunkSize: 1024, MaxChunksInFlight: 4})
	c := dial(t, p.Addr())
	roundTrip(t, c, []byte("up"))
	p.Partition()
	const size = 64 << 20
	c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
	n, err := c.Write(make([]byte, size))
	if !isTimeout(err) || n >= size {
		t.Fatalf("wrote %d of %d bytes into a blackhole, err %v; want a timeout", n, size, err)
	}
	t.Logf("%d bytes accepted before flow control stopped the sender", n)
}

// TestLossStallsAndKeepsOrder: a lost chunk arrives LossStall late and the
// bytes after it wait behind it, in order; with Loss 1 every chunk is late
// in both directions, with Loss 0.5 some round trips are clean.
func TestLossStallsAndKeepsOrder(t *testing.T) {
	const stall = 200 * time.Millisecond
	all := startProxy(t, startEcho(t).addr(), Config{Loss: 1, LossStall: stall, Seed: 1})
	c := dial(t, all.Addr())
	for i := range 3 {
		if d := roundTrip(t, c, []byte{byte(i), 1, 2, 3}); d < 2*stall {
			t.Fatalf("round trip %v with every chunk lost, want >= %v", d, 2*stall)
		}
	}
	half := startProxy(t, startEcho(t).addr(), Config{Loss: 0.5, LossStall: stall, Seed: 2})
	c = dial(t, half.Addr())
	var clean, stalled int
	for i := range 16 {
		switch d := roundTrip(t, c, []byte{byte(i), 4, 5, 6}); {
		case d < stall:
			clean++
		default:
			stalled++
		}
	}
	if clean == 0 || stalled == 0 {
		t.Fatalf("with loss 0.5: %d clean and %d stalled round trips of 16, want some of each", clean, stalled)
	}
}

// TestLossKeepsOrderInABurst: with chunks in flight, some of them lost,
// the bytes behind a lost chunk wait for it: the echo is the stream sent.
func TestLossKeepsOrderInABurst(t *testing.T) {
	p := startProxy(t, startEcho(t).addr(), Config{Loss: 0.3, LossStall: 30 * time.Millisecond, Seed: 3})
	c := dial(t, p.Addr())
	var sent []byte
	for i := range 40 {
		msg := []byte{byte(i), byte(i), byte(i), byte(i)}
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, msg...)
		time.Sleep(time.Millisecond) // separate reads at the proxy, mostly
	}
	got := make([]byte, len(sent))
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sent) {
		t.Fatalf("echo out of order:\n got %v\nwant %v", got, sent)
	}
}
