package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/stats"

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
	reg.MustRegister(m.ops, m.viewLat, m.divergence, m.wire, m.dropped, m.saves, m.saveLat, m.batch)
	return m
}

func (m *Metrics) observeView(strong bool, v replica.View, prelim *replica.View, elapsed time.Duration) {
	if m == nil {
		return
	}
	if !v.Stable {
		proto := "weak"
		if strong {
			proto = "strong"
		}
		m.ops.WithLabelValues(proto).Inc()
		m.viewLat.WithLabelValues("preliminary").Observe(elapsed.Seconds())
		return
	}
	m.viewLat.WithLabelValues("final").Observe(elapsed.Seconds())
	if prelim != nil {
		if v.Confirmed {
			m.divergence.WithLabelValues("confirmed").Inc()
		} else {
			m.divergence.WithLabelValues("diverged").Inc()
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
		m.batch.WithLabelValues("entries").Observe(float64(r.Entries))
		m.batch.WithLabelValues("own_ops").Observe(float64(r.OwnOps))
	}
	m.batch.WithLabelValues("messages").Observe(float64(r.Messages))
	m.batch.WithLabelValues("views").Observe(float64(r.Views))
}

func (m *Metrics) peerDropped() {
	if m != nil {
		m.dropped.Inc()
	}
}

// statsHandler counts wire bytes of the client service.
func (m *Metrics) statsHandler() stats.Handler { return wireStats{m} }

type wireStats struct{ m *Metrics }

func (w wireStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (w wireStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (w wireStats) HandleConn(context.Context, stats.ConnStats)                       {}
func (w wireStats) HandleRPC(_ context.Context, s stats.RPCStats) {
	if w.m == nil {
		return
	}
	switch p := s.(type) {
	case *stats.InPayload:
		w.m.wire.WithLabelValues("in").Add(float64(p.WireLength))
	case *stats.OutPayload:
		w.m.wire.WithLabelValues("out").Add(float64(p.WireLength))
	}
}
