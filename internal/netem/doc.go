// Package netem emulates a wide-area network on real TCP, in user space,
// for `correctables up --wan` and the benchmarks: Linux netem is not
// available on the machines we run on.
//
// # Model
//
// A Proxy is one emulated link. It listens on a loopback address and
// forwards each accepted connection to a target address. Each direction of
// each connection is a delay line: a reader stamps every chunk it reads with
// the time it is due at the other end (now + one-way latency ± jitter, plus
// serialisation time if a bandwidth is set), and a writer writes the chunk
// when that time comes. The delay is therefore added once per byte, not per
// chunk cumulatively: a stream of back-to-back chunks arrives back to back,
// one latency later, and both directions run concurrently, so an HTTP/2
// (gRPC) connection with many streams sees the latency and nothing else.
// Due times never go backwards within a connection, so bytes keep their
// order even with jitter; jitter therefore only ever delays later chunks.
//
// A Topology is a symmetric round-trip-time matrix between named regions,
// plus the RTT within a region. Preset returns the set-ups of the papers:
// "ec2-2016" (Correctables §6.1: FRK, IRL, VRG) and "pileus-2013" (Pileus
// §5.1: England, US-West, India, and the client region China). A Network
// starts one Proxy per (source region, replica) pair with half the RTT as
// one-way latency; a node in region R dials Network.Addr(R, replica).
//
// # Partitions
//
// Partition stops delivery on a link. In Blackhole mode (the default, and
// the closest to a real partition) nothing is delivered and nothing is
// reset: bytes already sent, and FINs, are held back, as TCP would keep
// retransmitting them, and are delivered on Heal if both ends still hold
// the connection; once the per-connection window (ChunkSize *
// MaxChunksInFlight) is full the proxy stops reading and the sender blocks,
// as on a real path. New connections are accepted by the kernel (we cannot
// drop a SYN from user space) but are not forwarded until Heal, so the
// client sees a connection that carries nothing; a dial through a
// blackholed link succeeds, its first request hangs. Timeouts and
// keepalives of the application decide when to give up, exactly as on a
// real network. In Cut mode every connection is reset (RST to both ends)
// and new connections are reset as soon as they are accepted, until Heal.
//
// # Limits
//
//   - No packet loss, reordering or duplication: the proxies sit on TCP,
//     which hides them. Loss shows up on a real WAN as added latency and
//     lower throughput; model that with Jitter and Bandwidth.
//   - The TCP handshake is not delayed: connect completes on loopback and
//     the target is dialled at once, so a fresh connection's first request
//     is one RTT faster than on a real WAN. Long-lived gRPC connections do
//     not notice.
//   - Throughput per connection is bounded by the emulated window
//     (ChunkSize * MaxChunksInFlight per one-way latency, 4 MiB by default),
//     not by TCP's congestion control; slow start is not emulated.
//   - Timers are those of the Go runtime: delays are late by the scheduling
//     and timer granularity of the machine (tens of microseconds idle, more
//     under load), never early.
//   - Each Proxy is one listener: partitions and latencies are per link, and
//     a Network's partitions are between regions, both ways. One-way
//     (asymmetric) partitions are not modelled.
package netem
