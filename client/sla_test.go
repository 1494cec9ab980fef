package client

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/correctables/correctables/correctable"
)

// fakeReplicas returns a Client without connections whose monitor knows
// replicas with the given round trips and stamps; leader is the leader.
func fakeReplicas(t *testing.T, leader uint64, rtts map[uint64]time.Duration, stamps map[uint64]Stamp) *Client {
	t.Helper()
	c := &Client{mon: newMonitor()}
	for id := uint64(1); id <= uint64(len(rtts)); id++ {
		c.endpoints = append(c.endpoints, &endpoint{replica: id, index: int(id - 1)})
		for range 5 {
			c.mon.observeRTT(id, rtts[id], false)
		}
		c.mon.observeStamp(id, stamps[id])
	}
	c.mon.observeLeader(leader)
	return c
}

func TestSelectTarget(t *testing.T) {
	ms := time.Millisecond
	// The session wrote k: op 1.7.
	s := NewSession()
	s.Observe(Put("k", nil), writeStamp(vv{1: 7}, 0, 1, 7), false)
	has, lacks := stamp(vv{1: 7}, 0), stamp(vv{1: 6}, 0)
	cases := []struct {
		name    string
		sla     SLA
		rtts    map[uint64]time.Duration
		stamps  map[uint64]Stamp
		key     string
		sub     int
		replica uint64
	}{
		{"cart: local node lags, primary and far node qualify, closest wins", ShoppingCartSLA,
			map[uint64]time.Duration{1: 150 * ms, 2: 1 * ms, 3: 230 * ms}, map[uint64]Stamp{1: has, 2: lacks, 3: has}, "k", 0, 1},
		{"cart: local node up to date", ShoppingCartSLA,
			map[uint64]time.Duration{1: 150 * ms, 2: 1 * ms, 3: 230 * ms}, map[uint64]Stamp{1: has, 2: has, 3: has}, "k", 0, 2},
		{"cart: nothing written to this key, local node", ShoppingCartSLA,
			map[uint64]time.Duration{1: 150 * ms, 2: 1 * ms, 3: 230 * ms}, map[uint64]Stamp{1: has, 2: lacks, 3: has}, "other", 0, 2},
		{"cart: only a lagging node within 300 ms: settle for eventual", ShoppingCartSLA,
			map[uint64]time.Duration{1: 434 * ms, 2: 1 * ms, 3: 400 * ms}, map[uint64]Stamp{1: has, 2: lacks, 3: has}, "k", 1, 2},
		{"password: primary close enough", PasswordSLA,
			map[uint64]time.Duration{1: 100 * ms, 2: 1 * ms, 3: 230 * ms}, nil, "k", 0, 1},
		{"password: primary far, local node for eventual", PasswordSLA,
			map[uint64]time.Duration{1: 434 * ms, 2: 1 * ms, 3: 230 * ms}, nil, "k", 1, 2},
		{"password: everything far: strong within 1 s", PasswordSLA,
			map[uint64]time.Duration{1: 306 * ms, 2: 159 * ms, 3: 240 * ms}, nil, "k", 2, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeReplicas(t, 1, tc.rtts, tc.stamps)
			sub, id, err := c.SelectTarget(s, tc.sla, Get(tc.key))
			if err != nil {
				t.Fatal(err)
			}
			if sub != tc.sub || id != tc.replica {
				t.Fatalf("target subSLA %d at replica %d, want %d at %d", sub+1, id, tc.sub+1, tc.replica)
			}
		})
	}
}

func TestPNodeLatWindow(t *testing.T) {
	m := newMonitor()
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	for _, d := range []time.Duration{10, 20, 30, 40} {
		m.observeRTT(1, d*time.Millisecond, false)
	}
	if p := m.PNodeLat(1, 25*time.Millisecond, false); p != 0.5 {
		t.Fatalf("PNodeLat = %v, want 0.5", p)
	}
	if p := m.PNodeLat(1, 25*time.Millisecond, true); p != 0.5 {
		t.Fatalf("strong PNodeLat without strong samples = %v, want the weak estimate 0.5", p)
	}
	m.observeRTT(1, 100*time.Millisecond, true)
	if p := m.PNodeLat(1, 25*time.Millisecond, true); p != 0 {
		t.Fatalf("strong PNodeLat = %v, want 0", p)
	}
	now = now.Add(DefaultMonitorWindow + time.Second)
	m.observeRTT(1, 50*time.Millisecond, false)
	if p := m.PNodeLat(1, 25*time.Millisecond, false); p != 0 {
		t.Fatalf("PNodeLat after the window moved = %v, want 0 (old samples gone)", p)
	}
	if p := m.PNodeLat(2, time.Hour, false); p != 0 {
		t.Fatalf("PNodeLat of an unknown replica = %v", p)
	}
}

// Clients under the password SLA after their strong reads left the
// monitor's window (bench pileus: a region's password session starts more
// than a window after its cart session; the probes go on). A strong read is
// then estimated from the probes plus what strong reads cost more than
// probes when last measured (Pileus §4.5: PNodeLat from the node's round
// trips, the active probes for nodes not accessed recently; §4.6.1).
func TestSelectTargetStrongSamplesLeftWindow(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name string
		// rtts are the probes' round trips; strong the strong reads' at
		// the primary, replica 1; local is the client's own replica.
		rtts    map[uint64]time.Duration
		strong  time.Duration
		sub     int
		replica uint64
		pLat    float64
	}{
		// The local replica is the primary: 1 ms probes, 6 ms strong reads.
		// Before, the strong samples out of the window made PNodeLat 0 and
		// the client targeted eventual there.
		{"England: strong at the primary", map[uint64]time.Duration{1: 1 * ms, 2: 149 * ms, 3: 434 * ms}, 6 * ms, 0, 1, 1},
		// The primary's probes answer in 149 ms, strong reads in 160 ms:
		// the probes alone would say a strong read meets 150 ms.
		{"US West: eventual at the local node", map[uint64]time.Duration{1: 149 * ms, 2: 1 * ms, 3: 230 * ms}, 160 * ms, 1, 2, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeReplicas(t, 1, tc.rtts, nil)
			now := time.Unix(1000, 0)
			c.mon.now = func() time.Time { return now }
			for range 5 {
				c.mon.observeRTT(1, tc.strong, true)
			}
			s := NewSession()
			if sub, id, _ := c.SelectTarget(s, PasswordSLA, Get("k")); sub != tc.sub || id != tc.replica {
				t.Fatalf("with recent strong reads: target subSLA %d at %d, want %d at %d", sub+1, id, tc.sub+1, tc.replica)
			}
			now = now.Add(DefaultMonitorWindow + time.Second)
			for id, rtt := range tc.rtts {
				c.mon.observeRTT(id, rtt, false) // a probe round
			}
			if p := c.mon.PNodeLat(1, 150*ms, true); p != tc.pLat {
				t.Errorf("strong PNodeLat(150 ms) at the primary once its strong samples left the window = %v, want %v", p, tc.pLat)
			}
			if p := c.mon.PNodeLat(1, time.Second, true); p != 1 {
				t.Errorf("strong PNodeLat(1 s) at the primary once its strong samples left the window = %v, want 1", p)
			}
			if sub, id, _ := c.SelectTarget(s, PasswordSLA, Get("k")); sub != tc.sub || id != tc.replica {
				t.Fatalf("strong samples out of the window: target subSLA %d at %d, want %d at %d", sub+1, id, tc.sub+1, tc.replica)
			}
		})
	}
}

func TestSLAMet(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		sla     SLA
		g       Guarantees
		elapsed time.Duration
		want    int
	}{
		{ShoppingCartSLA, Guarantees{ReadMyWrites: true}, 10 * ms, 0},
		{ShoppingCartSLA, Guarantees{}, 10 * ms, 1},
		{ShoppingCartSLA, Guarantees{ReadMyWrites: true}, 301 * ms, -1},
		{PasswordSLA, Guarantees{Strong: true}, 149 * ms, 0},
		{PasswordSLA, Guarantees{Strong: true}, 151 * ms, 2},
		{PasswordSLA, Guarantees{}, 151 * ms, -1},
		{WebSLA, Guarantees{Bounded: true, Staleness: 10 * time.Second}, 500 * ms, 2},
		{WebSLA, Guarantees{Bounded: true, Staleness: 301 * time.Second}, 100 * ms, -1},
	} {
		if got := tc.sla.met(tc.g, tc.elapsed); got != tc.want {
			t.Errorf("%s: %v in %v met %d, want %d", tc.sla.Name, tc.g, tc.elapsed, got, tc.want)
		}
	}
}

func TestParseSLA(t *testing.T) {
	good := `{"name": "cart2", "subslas": [
		{"consistency": "read-my-writes", "latency": "300ms", "utility": 1},
		{"consistency": "bounded(30)", "latency": "1s", "utility": 0.5}]}`
	s, err := ParseSLA([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "cart2" || len(s.Subs) != 2 || s.Subs[1].Consistency != Bounded(30*time.Second) || s.Subs[0].Latency != 300*time.Millisecond {
		t.Fatalf("parsed %+v", s)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"name": "x", "subslas": [`, "unexpected EOF"},
		{`{"name": "x", "subslas": [{"consistency": "strong", "latency": "1s", "utility": 1, "color": 2}]}`, `unknown field "color"`},
		{`{"name": "x", "subslas": [{"consistency": "strong", "utility": 1}]}`, `subSLA 1: no "latency"`},
		{`{"name": "x", "subslas": [{"consistency": "linearizable", "latency": "1s", "utility": 1}]}`, `unknown consistency "linearizable"`},
		{`{"name": "x", "subslas": [{"consistency": "strong", "latency": "soon", "utility": 1}]}`, `latency "soon"`},
		{`{"name": "x", "subslas": [{"consistency": "strong", "latency": "-1s", "utility": 1}]}`, `latency -1s not in`},
		{`{"name": "x", "subslas": [{"consistency": "strong", "latency": "1s", "utility": 0.5}, {"consistency": "eventual", "latency": "1s", "utility": 1}]}`, "subSLA 2: utility 1 above subSLA 1's 0.5"},
		{`{"name": "x", "subslas": []}`, "0 subSLAs"},
		{`{"subslas": [{"consistency": "strong", "latency": "1s", "utility": 1}]}`, "no name"},
		{`{"name": "x", "subslas": [{"consistency": "strong", "latency": "1s", "utility": 1}]} {}`, "data after"},
	} {
		_, err := ParseSLA([]byte(tc.in))
		if err == nil || !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSLA(%s) = %v, want an ErrInvalidArgument containing %q", tc.in, err, tc.want)
		}
	}
}

func TestNamedSLAs(t *testing.T) {
	for _, name := range []string{"cart", "password", "web"} {
		s, err := NamedSLA(name)
		if err != nil || s.Name != name {
			t.Fatalf("NamedSLA(%q) = %v, %v", name, s, err)
		}
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NamedSLA("gold"); err == nil {
		t.Fatal("unknown SLA name accepted")
	}
	if ShoppingCartSLA.Subs[0].Consistency.Level != correctable.ReadMyWrites || PasswordSLA.Subs[2].Latency != time.Second {
		t.Fatal("example SLAs differ from Pileus Figures 4 and 6")
	}
}

func TestPNodeCons(t *testing.T) {
	m := newMonitor()
	m.observeLeader(1)
	now := time.UnixMilli(100_000)
	s := NewSession()
	s.now = func() time.Time { return now }
	s.Observe(Put("k", nil), writeStamp(vv{1: 3}, 0, 1, 3), false)
	m.observeStamp(1, Stamp{VV: vv{1: 3}, StableTime: uint64(99_000) << hlcLogicalBits})
	m.observeStamp(2, Stamp{VV: vv{1: 2}, StableTime: uint64(50_000) << hlcLogicalBits})
	// A stamp seen later with less does not undo what was seen: stamps only
	// grow at a replica.
	m.observeStamp(1, Stamp{VV: vv{1: 1}})
	for _, tc := range []struct {
		id   uint64
		c    Consistency
		want float64
	}{
		{1, Guarantee(correctable.Strong), 1},
		{2, Guarantee(correctable.Strong), 0},
		{1, Guarantee(correctable.ReadMyWrites), 1},
		{2, Guarantee(correctable.ReadMyWrites), 0},
		{2, Guarantee(correctable.Eventual), 1},
		{3, Guarantee(correctable.Eventual), 1},
		{3, Guarantee(correctable.MonotonicReads), 0},
		{1, Bounded(2 * time.Second), 1},
		{2, Bounded(2 * time.Second), 0},
		{2, Bounded(time.Minute), 1},
	} {
		if got := m.PNodeCons(s, tc.id, tc.c, Get("k")); got != tc.want {
			t.Errorf("PNodeCons(replica %d, %v) = %v, want %v", tc.id, tc.c, got, tc.want)
		}
	}
}

func TestRankFor(t *testing.T) {
	ms := time.Millisecond
	s := NewSession()
	s.Observe(Put("k", nil), writeStamp(vv{1: 7}, 0, 1, 7), false)
	has, lacks := stamp(vv{1: 7}, 0), stamp(vv{1: 6}, 0)
	c := fakeReplicas(t, 1, map[uint64]time.Duration{1: 150 * ms, 2: 1 * ms, 3: 230 * ms}, map[uint64]Stamp{1: has, 2: lacks, 3: has})
	ids, ps := c.rankFor(s, ShoppingCartSLA.Subs[0], Get("k"))
	if fmt.Sprint(ids) != "[1 3 2]" || fmt.Sprint(ps) != "[1 1 0]" {
		t.Fatalf("rank for read-my-writes: %v %v, want [1 3 2] [1 1 0]", ids, ps)
	}
	ids, _ = c.rankFor(s, ShoppingCartSLA.Subs[1], Get("k"))
	if fmt.Sprint(ids) != "[2 1 3]" {
		t.Fatalf("rank for eventual: %v, want the closest first [2 1 3]", ids)
	}
}
