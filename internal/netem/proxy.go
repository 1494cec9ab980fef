package netem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// PartitionMode says what a partition does to a link.
type PartitionMode int

const (
	// Blackhole is the default and the closest to a real partition: nothing
	// is delivered and nothing is reset. Bytes already sent (and any FIN)
	// are held back, as TCP would keep retransmitting them, and are delivered
	// on Heal if both ends still hold the connection. New connections are
	// accepted by the kernel but not forwarded until Heal (a SYN that is
	// retransmitted until the network comes back).
	Blackhole PartitionMode = iota
	// Cut resets every connection on the link and resets new ones as soon
	// as they are accepted, until Heal. It models a crashed middlebox or a
	// peer that rejects the connection rather than a silent network.
	Cut
)

// String returns the mode's name.
func (m PartitionMode) String() string {
	switch m {
	case Blackhole:
		return "blackhole"
	case Cut:
		return "cut"
	default:
		return fmt.Sprintf("PartitionMode(%d)", int(m))
	}
}

// Defaults and limits of Config.
const (
	DefaultListenAddr        = "127.0.0.1:0"
	DefaultMaxConns          = 256
	DefaultChunkSize         = 32 << 10
	DefaultMaxChunksInFlight = 128
	DefaultDialTimeout       = 5 * time.Second

	// MaxLatency bounds one-way latency and jitter: nothing on Earth is
	// further away, and a typo (seconds for milliseconds) should fail loudly.
	MaxLatency = 10 * time.Second
	// maxChunkSize and maxChunksInFlight bound per-connection memory.
	maxChunkSize      = 1 << 20
	maxChunksInFlight = 1 << 14
	maxConns          = 1 << 16
)

// ErrClosed is returned by operations on a closed Proxy or Network.
var ErrClosed = errors.New("netem: closed")

// Config configures one emulated link: a Proxy. The zero value is a
// loopback proxy with no added latency.
type Config struct {
	// ListenAddr is where the proxy listens. Default "127.0.0.1:0".
	ListenAddr string
	// Latency is the one-way delay added to each direction; a round trip
	// through the proxy takes at least twice this. For a link with a given
	// RTT use RTT/2.
	Latency time.Duration
	// Jitter spreads each chunk's delay uniformly over
	// [Latency-Jitter, Latency+Jitter] (never below zero). Bytes of one
	// connection are never reordered: a chunk is never due before the chunk
	// read before it, so jitter only ever adds delay to later chunks.
	Jitter time.Duration
	// Loss emulates packet loss as TCP shows it to the application: each
	// chunk is held LossStall longer with probability Loss, as a lost
	// segment waits for its retransmission (a fast retransmit or a
	// retransmission timeout), and, bytes never being reordered, the bytes
	// after it wait behind it (head-of-line blocking). A chunk is what one
	// read of the sender's bytes returns (up to ChunkSize), so the
	// probability is per burst of writes, not per packet. Zero: no loss.
	Loss float64
	// LossStall is how much longer a lost chunk takes. Required with Loss.
	LossStall time.Duration
	// Bandwidth in bytes per second per direction, shared by every
	// connection of the link. Zero means unlimited.
	Bandwidth int64
	// PartitionMode is what Partition does. Default Blackhole.
	PartitionMode PartitionMode
	// MaxConns bounds the connections served at once. Further
	// connections wait in the kernel's accept queue. Default 256.
	MaxConns int
	// ChunkSize is the read buffer per direction and connection, and the
	// largest unit the delay line stamps. Default 32 KiB.
	ChunkSize int
	// MaxChunksInFlight bounds the chunks held in each direction of each
	// connection; when it is full the proxy stops reading and TCP flow
	// control pushes back on the sender. ChunkSize*MaxChunksInFlight is the
	// emulated window: throughput per connection is at most that per
	// one-way Latency. Default 128 (4 MiB with the default ChunkSize;
	// small reads hold only their own size).
	MaxChunksInFlight int
	// DialTimeout bounds the dial to the target. Default 5 s.
	DialTimeout time.Duration
	// Seed seeds the jitter. Runs with the same seed draw the same jitter
	// sequence (timing of reads still differs from run to run).
	Seed uint64
	// Logger receives connection errors at debug level. Default: discard.
	Logger *slog.Logger
}

// withDefaults returns c with defaults filled in, or an error for an
// invalid field.
func (c Config) withDefaults() (Config, error) {
	if c.ListenAddr == "" {
		c.ListenAddr = DefaultListenAddr
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = DefaultChunkSize
	}
	if c.MaxChunksInFlight == 0 {
		c.MaxChunksInFlight = DefaultMaxChunksInFlight
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if err := checkLatency(c.Latency, c.Jitter); err != nil {
		return c, err
	}
	switch {
	case !(c.Loss >= 0 && c.Loss <= 1):
		return c, fmt.Errorf("netem: loss %v not in [0, 1]", c.Loss)
	case c.LossStall < 0 || c.LossStall > MaxLatency:
		return c, fmt.Errorf("netem: loss stall %v not in [0, %v]", c.LossStall, MaxLatency)
	case c.Loss > 0 && c.LossStall == 0:
		return c, errors.New("netem: loss without a loss stall")
	case c.Bandwidth < 0:
		return c, fmt.Errorf("netem: bandwidth %d B/s is negative", c.Bandwidth)
	case c.PartitionMode != Blackhole && c.PartitionMode != Cut:
		return c, fmt.Errorf("netem: unknown partition mode %d", int(c.PartitionMode))
	case c.MaxConns < 1 || c.MaxConns > maxConns:
		return c, fmt.Errorf("netem: max conns %d not in [1, %d]", c.MaxConns, maxConns)
	case c.ChunkSize < 1 || c.ChunkSize > maxChunkSize:
		return c, fmt.Errorf("netem: chunk size %d not in [1, %d]", c.ChunkSize, maxChunkSize)
	case c.MaxChunksInFlight < 1 || c.MaxChunksInFlight > maxChunksInFlight:
		return c, fmt.Errorf("netem: max chunks in flight %d not in [1, %d]", c.MaxChunksInFlight, maxChunksInFlight)
	case c.DialTimeout < 0:
		return c, fmt.Errorf("netem: dial timeout %v is negative", c.DialTimeout)
	}
	return c, nil
}

func checkLatency(latency, jitter time.Duration) error {
	if latency < 0 || latency > MaxLatency {
		return fmt.Errorf("netem: latency %v not in [0, %v]", latency, MaxLatency)
	}
	if jitter < 0 || jitter > MaxLatency {
		return fmt.Errorf("netem: jitter %v not in [0, %v]", jitter, MaxLatency)
	}
	return nil
}

// Stats counts a proxy's traffic since it started.
type Stats struct {
	Accepted  int64 // connections accepted
	Active    int64 // connections being served now
	BytesUp   int64 // bytes delivered client -> target
	BytesDown int64 // bytes delivered target -> client
}

// direction of a pipe, indexing per-direction state.
const (
	up   = 0 // client -> target
	down = 1 // target -> client
)

// Proxy is one emulated link: it listens on a loopback address and forwards
// every connection to a target through two delay lines, one per direction.
// Its methods are safe for concurrent use.
type Proxy struct {
	cfg    Config
	target string
	ln     net.Listener
	log    *slog.Logger
	bufs   sync.Pool
	sem    chan struct{} // one token per served connection
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup

	mu          sync.Mutex
	latency     time.Duration
	jitter      time.Duration
	rng         *rand.Rand
	txFree      [2]time.Time // when each direction's emulated wire is free (Bandwidth)
	partitioned bool
	mode        PartitionMode // of the current partition
	healed      chan struct{} // closed while the link is up
	conns       map[*conn]struct{}
	closed      bool

	accepted, active atomic.Int64
	bytes            [2]atomic.Int64
}

// NewProxy starts a proxy that forwards connections to target with the
// delays of cfg. Close stops it.
func NewProxy(target string, cfg Config) (*Proxy, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if target == "" {
		return nil, errors.New("netem: empty target address")
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("netem: listen %s: %w", cfg.ListenAddr, err)
	}
	healed := make(chan struct{})
	close(healed)
	p := &Proxy{
		cfg:     cfg,
		target:  target,
		ln:      ln,
		log:     cfg.Logger.With("netem_listen", ln.Addr().String(), "netem_target", target),
		sem:     make(chan struct{}, cfg.MaxConns),
		done:    make(chan struct{}),
		latency: cfg.Latency,
		jitter:  cfg.Jitter,
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		healed:  healed,
		conns:   make(map[*conn]struct{}),
	}
	size := cfg.ChunkSize
	p.bufs.New = func() any { b := make([]byte, size); return &b }
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the address clients dial to cross the link.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Latency returns the current one-way latency.
func (p *Proxy) Latency() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency
}

// Jitter returns the current jitter.
func (p *Proxy) Jitter() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.jitter
}

// SetLatency changes the one-way latency of bytes read from now on. Bytes
// already in flight keep their delivery time, and bytes are never
// reordered, so lowering the latency lets the queue drain first, as on a
// real path whose delay drops.
func (p *Proxy) SetLatency(oneWay time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := checkLatency(oneWay, p.jitter); err != nil {
		return err
	}
	p.latency = oneWay
	return nil
}

// SetJitter changes the jitter of bytes read from now on.
func (p *Proxy) SetJitter(jitter time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := checkLatency(p.latency, jitter); err != nil {
		return err
	}
	p.jitter = jitter
	return nil
}

// Partition cuts the link in the configured PartitionMode until Heal.
func (p *Proxy) Partition() { p.partition(p.cfg.PartitionMode) }

// Cut partitions the link in Cut mode whatever the configured mode:
// every connection is reset now and new ones are reset until Heal.
func (p *Proxy) Cut() { p.partition(Cut) }

// Blackhole partitions the link in Blackhole mode whatever the configured
// mode: nothing is delivered and nothing is reset until Heal.
func (p *Proxy) Blackhole() { p.partition(Blackhole) }

func (p *Proxy) partition(mode PartitionMode) {
	p.mu.Lock()
	if !p.partitioned {
		p.partitioned = true
		p.healed = make(chan struct{})
	}
	p.mode = mode
	var victims []*conn
	if mode == Cut {
		for c := range p.conns {
			victims = append(victims, c)
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		c.reset()
	}
}

// Heal ends a partition: held bytes are delivered (those already due at
// once, in order) and new connections are forwarded again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.partitioned {
		p.partitioned = false
		close(p.healed)
	}
}

// Partitioned reports whether the link is partitioned.
func (p *Proxy) Partitioned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.partitioned
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	return Stats{
		Accepted:  p.accepted.Load(),
		Active:    p.active.Load(),
		BytesUp:   p.bytes[up].Load(),
		BytesDown: p.bytes[down].Load(),
	}
}

// Close stops listening, closes every connection and waits for every
// goroutine of the proxy to return. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		// Take a slot first, so that beyond MaxConns connections wait in
		// the kernel's accept queue rather than in our memory.
		select {
		case p.sem <- struct{}{}:
		case <-p.done:
			return
		}
		nc, err := p.ln.Accept()
		if err != nil {
			<-p.sem
			select {
			case <-p.done:
				return
			default:
			}
			// Transient errors (EMFILE): back off instead of spinning.
			p.log.Debug("netem: accept", "err", err)
			t := time.NewTimer(50 * time.Millisecond)
			select {
			case <-t.C:
			case <-p.done:
				t.Stop()
				return
			}
			continue
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.serve(nc)
	}
}

// track registers c, or says that it must be refused (closed proxy, or
// link cut).
func (p *Proxy) track(c *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || (p.partitioned && p.mode == Cut) {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// waitUp blocks while the link is partitioned. It returns false if the
// connection ends first.
func (p *Proxy) waitUp(c *conn) bool {
	for {
		p.mu.Lock()
		healed := p.healed
		p.mu.Unlock()
		select {
		case <-healed:
			// A new partition may have started between the close of this
			// channel and now; checking again keeps the hold strict.
			p.mu.Lock()
			up := !p.partitioned
			p.mu.Unlock()
			if up {
				return true
			}
		case <-c.ctx.Done():
			return false
		}
	}
}

// stamp returns when n bytes read now in direction dir are due at the
// other end.
func (p *Proxy) stamp(dir, n int) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	d := p.latency
	if p.jitter > 0 {
		d += time.Duration(p.rng.Int64N(2*int64(p.jitter)+1)) - p.jitter
		d = max(d, 0)
	}
	if p.cfg.Loss > 0 && p.rng.Float64() < p.cfg.Loss {
		d += p.cfg.LossStall
	}
	sent := now
	if bw := p.cfg.Bandwidth; bw > 0 && n > 0 {
		// Serialisation delay on a shared wire: the chunk starts when the
		// previous one has left, and takes n/bw to leave.
		start := now
		if p.txFree[dir].After(start) {
			start = p.txFree[dir]
		}
		sent = start.Add(time.Duration(int64(n) * int64(time.Second) / bw))
		p.txFree[dir] = sent
	}
	return sent.Add(d)
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer func() { <-p.sem }()
	p.active.Add(1)
	defer p.active.Add(-1)

	c := newConn(client)
	defer c.cancel()
	if !p.track(c) {
		c.reset()
		return
	}
	defer p.untrack(c)

	// In a blackhole the connection is not forwarded until Heal, as a SYN
	// would be retransmitted until the path is back.
	if !p.waitUp(c) {
		c.close()
		return
	}
	d := net.Dialer{Timeout: p.cfg.DialTimeout}
	server, err := d.DialContext(c.ctx, "tcp", p.target)
	if err != nil {
		p.log.Debug("netem: dial target", "err", err)
		c.reset()
		return
	}
	if !c.setServer(server) {
		return
	}

	upQ := make(chan chunk, p.cfg.MaxChunksInFlight)
	downQ := make(chan chunk, p.cfg.MaxChunksInFlight)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); p.read(c, client, upQ, up) }()
	go func() { defer wg.Done(); p.write(c, server, upQ, up) }()
	go func() { defer wg.Done(); p.read(c, server, downQ, down) }()
	p.write(c, client, downQ, down)
	wg.Wait()
	c.close()
}

// chunk is one read from a source, stamped with its due time.
type chunk struct {
	buf  *[]byte
	n    int
	due  time.Time
	kind chunkKind
}

type chunkKind int

const (
	data  chunkKind = iota
	eof             // the source half-closed: pass the FIN on
	reset           // the source failed: reset both ends
)

// read is the input of a delay line: it stamps every chunk with its due
// time on arrival. Due times never go backwards, so bytes keep their order.
func (p *Proxy) read(c *conn, src net.Conn, q chan<- chunk, dir int) {
	var last time.Time
	send := func(ch chunk) bool {
		if ch.due.Before(last) {
			ch.due = last
		}
		last = ch.due
		select {
		case q <- ch:
			return true
		case <-c.ctx.Done():
			if ch.buf != nil && cap(*ch.buf) == p.cfg.ChunkSize {
				p.bufs.Put(ch.buf)
			}
			return false
		}
	}
	for {
		buf := p.bufs.Get().(*[]byte)
		n, err := src.Read(*buf)
		if n > 0 && n < len(*buf)/4 {
			// Small reads (most gRPC frames) get a buffer of their own
			// size, so that memory held follows the bytes in flight rather
			// than the number of chunks.
			small := make([]byte, n)
			copy(small, (*buf)[:n])
			p.bufs.Put(buf)
			buf = &small
		}
		if n > 0 {
			if !send(chunk{buf: buf, n: n, due: p.stamp(dir, n), kind: data}) {
				return
			}
		} else {
			p.bufs.Put(buf)
		}
		if err != nil {
			kind := reset
			if errors.Is(err, io.EOF) {
				kind = eof
			}
			if c.ctx.Err() == nil {
				send(chunk{due: p.stamp(dir, 0), kind: kind})
			}
			return
		}
	}
}

// write is the output of a delay line: it holds each chunk until its due
// time and until the link is up, then writes it.
func (p *Proxy) write(c *conn, dst net.Conn, q <-chan chunk, dir int) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var precise *preciseTimer // made on the first delayed chunk (nil if no timerfd)
	made := false
	defer func() { precise.close() }()
	for {
		var ch chunk
		select {
		case ch = <-q:
		case <-c.ctx.Done():
			return
		}
		if wait := time.Until(ch.due); wait > timerSlack {
			// The runtime's timers wake up to a millisecond late on
			// Linux (the netpoller waits in whole milliseconds): wait
			// on a timer for all but the last timerSlack, then on a
			// precise one.
			timer.Reset(wait - timerSlack)
			select {
			case <-timer.C:
			case <-c.ctx.Done():
				return
			}
		}
		if time.Until(ch.due) > 0 {
			if !made {
				precise, made = newPreciseTimer(), true
			}
			precise.sleepUntil(ch.due)
		}
		if !p.waitUp(c) {
			return
		}
		switch ch.kind {
		case data:
			n, err := dst.Write((*ch.buf)[:ch.n])
			if cap(*ch.buf) == p.cfg.ChunkSize {
				p.bufs.Put(ch.buf)
			}
			p.bytes[dir].Add(int64(n))
			if err != nil {
				p.log.Debug("netem: write", "err", err)
				c.reset()
				return
			}
		case eof:
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			c.halfClosed()
			return
		case reset:
			c.reset()
			return
		}
	}
}

// conn is one proxied connection: the accepted client side and, once
// dialled, the target side.
type conn struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	client net.Conn
	server net.Conn
	halves int
	ended  bool
}

func newConn(client net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{ctx: ctx, cancel: cancel, client: client}
}

// setServer attaches the dialled target, or closes it if the connection
// ended meanwhile.
func (c *conn) setServer(s net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		_ = s.Close()
		return false
	}
	c.server = s
	return true
}

// halfClosed records that one direction passed on its FIN; when both have,
// the connection is done.
func (c *conn) halfClosed() {
	c.mu.Lock()
	c.halves++
	both := c.halves == 2
	c.mu.Unlock()
	if both {
		c.close()
	}
}

// close ends the connection gracefully (FIN on both sides).
func (c *conn) close() { c.end(false) }

// reset ends the connection abruptly (RST on both sides).
func (c *conn) reset() { c.end(true) }

func (c *conn) end(rst bool) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended = true
	conns := []net.Conn{c.client, c.server}
	c.mu.Unlock()
	c.cancel()
	for _, nc := range conns {
		if nc == nil {
			continue
		}
		if tc, ok := nc.(*net.TCPConn); ok && rst {
			_ = tc.SetLinger(0)
		}
		_ = nc.Close()
	}
}
