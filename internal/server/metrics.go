package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"

	"github.com/correctables/correctables/internal/driver"
	"github.com/correctables/correctables/internal/replica"
)

// Metrics are a server's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	ops        *prometheus.CounterVec
	viewLat    *prometheus.HistogramVec
	divergence *prometheus.CounterVec
	wire       *prometheus.CounterVec
	dropped    prometheus.Counter
	saves      prometheus.Counter
	saveLat    prometheus.Histogram
	batch      *prometheus.HistogramVec
	// execs and rollbacks count the replica's executions of updates
	// (re-executions included) and executions undone (Creek §4.4); seen
	// holds the replica's counts they were last brought up to. A catch-up
	// that executes the same operations again and again shows here.
	execs, rollbacks prometheus.Counter
	// dups and dupBytes count operations committed entries carried again.
	dups, dupBytes prometheus.Counter
	// stripped and strippedBytes count repeated probes sent without entries.
	stripped, strippedBytes prometheus.Counter
	// readsNow counts the weak reads run off the loop (readnow.go).
	readsNow prometheus.Counter
	seen     replica.Stats

	// The labelled series every operation or message touches, looked up
	// once here instead of by label values (a hash and a map lookup under
	// a lock) each time.
	opsWeak, opsStrong        prometheus.Counter
	latPrelim, latFinal       prometheus.Observer
	confirmed, diverged       prometheus.Counter
	wireIn, wireOut           prometheus.Counter
	batchEntries, batchOwnOps prometheus.Observer
	batchMessages, batchViews prometheus.Observer
}

// NewMetrics registers the server's metrics with reg.
func NewMetrics(reg prometheus.Registerer, replicaID string) *Metrics {
	l := prometheus.Labels{"replica": replicaID}
	m := &Metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "correctables_operations_total", Help: "Operations by protocol (weak, strong).", ConstLabels: l,
		}, []string{"protocol"}),
		viewLat: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "correctables_view_latency_seconds", Help: "Time from request to view, by view (preliminary, final).",
			ConstLabels: l, Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"view"}),
		divergence: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "correctables_final_views_total", Help: "Final views after a preliminary one, by outcome (confirmed, diverged).", ConstLabels: l,
		}, []string{"outcome"}),
		wire: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "correctables_wire_bytes_total", Help: "gRPC payload bytes on the wire, by direction.", ConstLabels: l,
		}, []string{"direction"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "correctables_peer_messages_dropped_total", Help: "Messages to peers dropped because the peer's queue was full.", ConstLabels: l,
		}),
	}
	m.saves = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "correctables_storage_syncs_total", Help: "Synced storage writes (one per handled batch with something to persist).", ConstLabels: l,
	})
	m.saveLat = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "correctables_storage_sync_seconds", Help: "Time of one synced storage write (fsync included).",
		ConstLabels: l, Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})
	m.batch = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "correctables_batch_size", Help: "Per handled batch (group commit): raft entries and own operations persisted, messages sent, views delivered.",
		ConstLabels: l, Buckets: prometheus.ExponentialBuckets(1, 2, 12),
	}, []string{"what"})
	m.execs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "correctables_executions_total", Help: "Executions of updates in the tentative order, re-executions after a rollback included.", ConstLabels: l,
	})
	m.rollbacks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "correctables_rollbacks_total", Help: "Executions undone to place an operation that arrived out of timestamp order, or to commit one (Creek §4.4).", ConstLabels: l,
	})
	m.dups = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "correctables_duplicate_commits_total", Help: "Operations a committed log entry carried that an earlier entry had committed (proposed again by a retry, or by a replica other than their origin).", ConstLabels: l,
	})
	m.dupBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "correctables_duplicate_commit_bytes_total", Help: "Bytes of the operations counted by correctables_duplicate_commits_total.", ConstLabels: l,
	})
	m.stripped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "correctables_repeated_appends_stripped_total", Help: "Appends to a follower being probed that repeated the one before and were sent without their entries (raft resends one on every heartbeat reply).", ConstLabels: l,
	})
	m.strippedBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "correctables_repeated_append_bytes_stripped_total", Help: "Bytes of entry data left out of the appends counted by correctables_repeated_appends_stripped_total.", ConstLabels: l,
	})
	m.readsNow = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "correctables_reads_off_loop_total", Help: "Weak reads run on their requests' goroutines, while the event loop waited for a synced write or for input, rather than in a round of the loop.", ConstLabels: l,
	})
	reg.MustRegister(m.ops, m.viewLat, m.divergence, m.wire, m.dropped, m.saves, m.saveLat, m.batch, m.execs, m.rollbacks, m.dups, m.dupBytes, m.stripped, m.strippedBytes, m.readsNow)
	m.opsWeak, m.opsStrong = m.ops.WithLabelValues("weak"), m.ops.WithLabelValues("strong")
	m.latPrelim, m.latFinal = m.viewLat.WithLabelValues("preliminary"), m.viewLat.WithLabelValues("final")
	m.confirmed, m.diverged = m.divergence.WithLabelValues("confirmed"), m.divergence.WithLabelValues("diverged")
	m.wireIn, m.wireOut = m.wire.WithLabelValues("in"), m.wire.WithLabelValues("out")
	m.batchEntries, m.batchOwnOps = m.batch.WithLabelValues("entries"), m.batch.WithLabelValues("own_ops")
	m.batchMessages, m.batchViews = m.batch.WithLabelValues("messages"), m.batch.WithLabelValues("views")
	return m
}

func (m *Metrics) observeReadNow() {
	if m != nil {
		m.readsNow.Inc()
	}
}

func (m *Metrics) observeView(strong bool, v replica.View, prelim *replica.View, elapsed time.Duration) {
	if m == nil {
		return
	}
	if !v.Stable {
		if strong {
			m.opsStrong.Inc()
		} else {
			m.opsWeak.Inc()
		}
		m.latPrelim.Observe(elapsed.Seconds())
		return
	}
	m.latFinal.Observe(elapsed.Seconds())
	if prelim != nil {
		if v.Confirmed {
			m.confirmed.Inc()
		} else {
			m.diverged.Inc()
		}
	}
}

// observeRound records what one batch of the loop did.
func (m *Metrics) observeRound(r driver.Round) {
	if m == nil {
		return
	}
	if r.Saves > 0 {
		m.saves.Add(float64(r.Saves))
		m.saveLat.Observe(r.Save.Seconds() / float64(r.Saves))
		m.batchEntries.Observe(float64(r.Entries))
		m.batchOwnOps.Observe(float64(r.OwnOps))
	}
	m.batchMessages.Observe(float64(r.Messages))
	m.batchViews.Observe(float64(r.Views))
}

// observeReplica brings the execution counters up to the replica's.
func (m *Metrics) observeReplica(st replica.Stats) {
	if m == nil {
		return
	}
	if d := st.Executions - m.seen.Executions; d > 0 {
		m.execs.Add(float64(d))
	}
	if d := st.Rollbacks - m.seen.Rollbacks; d > 0 {
		m.rollbacks.Add(float64(d))
	}
	if d := st.Duplicates - m.seen.Duplicates; d > 0 {
		m.dups.Add(float64(d))
	}
	if d := st.DuplicateBytes - m.seen.DuplicateBytes; d > 0 {
		m.dupBytes.Add(float64(d))
	}
	if d := st.StrippedAppends - m.seen.StrippedAppends; d > 0 {
		m.stripped.Add(float64(d))
	}
	if d := st.StrippedBytes - m.seen.StrippedBytes; d > 0 {
		m.strippedBytes.Add(float64(d))
	}
	m.seen = st
}

func (m *Metrics) peerDropped() {
	if m != nil {
		m.dropped.Inc()
	}
}

// serverOptions are the gRPC options that feed the metrics: the proto
// codec, counting the bytes of every message it encodes or decodes (nil
// without metrics).
//
// A codec rather than a stats.Handler: with a stats handler gRPC copies
// every call's incoming metadata and reports each of its events (begin,
// headers, payloads, trailer, end) in a value of its own, for the two of
// them that are counted here.
func (m *Metrics) serverOptions() []grpc.ServerOption {
	if m == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ForceServerCodecV2(wireCodec{
		CodecV2: encoding.GetCodecV2(grpcproto.Name), in: m.wireIn, out: m.wireOut,
	})}
}

// grpcMessageHeader is the bytes gRPC puts before each message on the
// wire (compression flag and length): a message's wire length is its
// encoding's plus these, uncompressed (gRPC's stats.InPayload.WireLength).
const grpcMessageHeader = 5

// wireCodec is gRPC's proto codec, counting the wire bytes of each message
// in and out.
type wireCodec struct {
	encoding.CodecV2
	in, out prometheus.Counter
}

func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	data, err := c.CodecV2.Marshal(v)
	if err == nil {
		c.out.Add(float64(data.Len() + grpcMessageHeader))
	}
	return data, err
}

func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.in.Add(float64(data.Len() + grpcMessageHeader))
	return c.CodecV2.Unmarshal(data, v)
}
