package netem

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPresets(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		preset string
		a, b   string
		want   time.Duration
	}{
		{PresetEC2, "IRL", "FRK", 20 * ms},
		{PresetEC2, "VRG", "IRL", 83 * ms},
		{PresetEC2, "FRK", "VRG", 89 * ms},
		{PresetEC2, "IRL", "IRL", 2 * ms},
		{PresetPileus, "US-West", "England", 149 * ms},
		{PresetPileus, "China", "US-West", 159 * ms},
		{PresetPileus, "China", "England", 306 * ms},
		{PresetPileus, "India", "India", 1 * ms},
	} {
		topo, err := Preset(tc.preset)
		if err != nil {
			t.Fatal(err)
		}
		for _, pair := range [][2]string{{tc.a, tc.b}, {tc.b, tc.a}} {
			got, err := topo.RTT(pair[0], pair[1])
			if err != nil || got != tc.want {
				t.Errorf("%s RTT(%s, %s) = %v, %v; want %v", tc.preset, pair[0], pair[1], got, err, tc.want)
			}
		}
	}
	for _, name := range PresetNames() {
		topo, err := Preset(name)
		if err != nil {
			t.Fatalf("Preset(%q): %v", name, err)
		}
		if topo.Name() != name {
			t.Errorf("Preset(%q).Name() = %q", name, topo.Name())
		}
		t.Log("\n" + topo.String())
	}
}

func TestUnknownPresetListsKnownNames(t *testing.T) {
	_, err := Preset("aws-2030")
	if !errors.Is(err, ErrUnknownPreset) {
		t.Fatalf("err = %v, want ErrUnknownPreset", err)
	}
	for _, name := range PresetNames() {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not list %q", err, name)
		}
	}
}

func TestNewTopologyValidation(t *testing.T) {
	ms := time.Millisecond
	regions := []string{"A", "B", "C"}
	full := []Link{{"A", "B", 10 * ms}, {"B", "C", 20 * ms}, {"C", "A", 30 * ms}}
	if _, err := NewTopology("ok", regions, ms, full); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		regions []string
		links   []Link
		want    string
	}{
		{"missing pair", regions, full[:2], "no RTT between"},
		{"duplicate link", regions, append(full, Link{"B", "A", ms}), "twice"},
		{"unknown region", regions, append(full, Link{"A", "Z", ms}), "unknown region"},
		{"self link", regions, append(full, Link{"A", "A", ms}), "itself"},
		{"negative", regions, []Link{{"A", "B", -ms}, full[1], full[2]}, "RTT"},
		{"duplicate region", []string{"A", "A"}, nil, "twice"},
		{"no regions", nil, nil, "without regions"},
	} {
		if _, err := NewTopology(tc.name, tc.regions, ms, tc.links); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	topo, _ := NewTopology("ok", regions, ms, full)
	if _, err := topo.RTT("A", "Z"); !errors.Is(err, ErrUnknownRegion) {
		t.Errorf("RTT to an unknown region: %v", err)
	}
	half, err := topo.Scale(0.5)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := half.RTT("C", "A"); got != 15*ms {
		t.Errorf("scaled RTT %v, want 15ms", got)
	}
}

// TestNetworkEC2 runs two replicas of the ec2-2016 preset behind a Network
// and checks latencies from IRL and a partition between IRL and FRK.
func TestNetworkEC2(t *testing.T) {
	topo, err := Preset(PresetEC2)
	if err != nil {
		t.Fatal(err)
	}
	frk, vrg := startEcho(t), startEcho(t)
	n, err := NewNetwork(NetworkConfig{
		Topology: topo,
		Replicas: []Replica{
			{Name: "r-frk", Region: "FRK", Addr: frk.addr()},
			{Name: "r-vrg", Region: "VRG", Addr: vrg.addr()},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	conn := func(from, to string) net.Conn {
		addr, err := n.Addr(from, to)
		if err != nil {
			t.Fatal(err)
		}
		return dial(t, addr)
	}
	irlFRK, irlVRG, vrgFRK := conn("IRL", "r-frk"), conn("IRL", "r-vrg"), conn("VRG", "r-frk")
	for _, tc := range []struct {
		c    net.Conn
		name string
		rtt  time.Duration
	}{
		{irlFRK, "IRL->FRK", 20 * time.Millisecond},
		{irlVRG, "IRL->VRG", 83 * time.Millisecond},
		{vrgFRK, "VRG->FRK", 89 * time.Millisecond},
		{conn("FRK", "r-frk"), "FRK->FRK", 2 * time.Millisecond},
	} {
		// Every sample respects the floor; the best of three is held to
		// the ceiling, so that one scheduling hiccup on a loaded machine
		// does not fail the test.
		best := time.Hour
		for range 3 {
			d := roundTrip(t, tc.c, []byte("ping"))
			if d < tc.rtt {
				t.Errorf("%s round trip %v, want >= %v", tc.name, d, tc.rtt)
			}
			best = min(best, d)
		}
		t.Logf("%s: best of 3 %v", tc.name, best)
		if best > tc.rtt+slack {
			t.Errorf("%s best round trip %v, want <= %v", tc.name, best, tc.rtt+slack)
		}
	}

	if err := n.Partition("IRL", "FRK"); err != nil {
		t.Fatal(err)
	}
	irlFRK.Write([]byte("held"))
	expectSilence(t, irlFRK, 100*time.Millisecond)
	roundTrip(t, irlVRG, []byte("IRL-VRG still up"))
	roundTrip(t, vrgFRK, []byte("VRG-FRK still up"))
	if err := n.Heal("FRK", "IRL"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	irlFRK.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(irlFRK, got); err != nil || string(got) != "held" {
		t.Fatalf("after heal read %q, %v", got, err)
	}

	if err := n.SetRTT("IRL", "FRK", 60*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := roundTrip(t, irlFRK, []byte("slower")); d < 60*time.Millisecond {
		t.Errorf("round trip after SetRTT(60ms) %v", d)
	}

	if err := n.Cut("IRL", "VRG"); err != nil {
		t.Fatal(err)
	}
	irlVRG.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := irlVRG.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read on a cut IRL-VRG connection: %v, want reset or EOF", err)
	}
	n.HealAll()

	if _, err := n.Addr("Mars", "r-frk"); !errors.Is(err, ErrUnknownRegion) {
		t.Errorf("Addr from an unknown region: %v", err)
	}
	if _, err := n.Addr("IRL", "r-mars"); !errors.Is(err, ErrUnknownReplica) {
		t.Errorf("Addr to an unknown replica: %v", err)
	}
	if err := n.Partition("IRL", "Mars"); !errors.Is(err, ErrUnknownRegion) {
		t.Errorf("Partition with an unknown region: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Addr("IRL", "r-frk"); !errors.Is(err, ErrClosed) {
		t.Errorf("Addr after Close: %v", err)
	}
}

func TestNetworkValidation(t *testing.T) {
	topo, _ := Preset(PresetPileus)
	for _, tc := range []struct {
		name string
		cfg  NetworkConfig
		want string
	}{
		{"no topology", NetworkConfig{Replicas: []Replica{{"a", "England", "127.0.0.1:1"}}}, "topology"},
		{"no replicas", NetworkConfig{Topology: topo}, "without replicas"},
		{"unknown region", NetworkConfig{Topology: topo, Replicas: []Replica{{"a", "Mars", "127.0.0.1:1"}}}, "unknown region"},
		{"duplicate", NetworkConfig{Topology: topo, Replicas: []Replica{{"a", "India", "127.0.0.1:1"}, {"a", "India", "127.0.0.1:2"}}}, "twice"},
		{"no addr", NetworkConfig{Topology: topo, Replicas: []Replica{{"a", "India", ""}}}, "address"},
		{"bad source", NetworkConfig{Topology: topo, Sources: []string{"Mars"}, Replicas: []Replica{{"a", "India", "127.0.0.1:1"}}}, "unknown region"},
		{"bad link", NetworkConfig{Topology: topo, Link: Config{MaxConns: -1}, Replicas: []Replica{{"a", "India", "127.0.0.1:1"}}}, "max conns"},
	} {
		n, err := NewNetwork(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
		if n != nil {
			n.Close()
		}
	}
}

// TestHTTP2StreamsThroughProxy runs many concurrent HTTP/2 streams (the
// transport of gRPC) over one long-lived connection through a proxy.
func TestHTTP2StreamsThroughProxy(t *testing.T) {
	const rtt = 20 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Protocols: &protos,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor != 2 {
				http.Error(w, "want HTTP/2", http.StatusBadRequest)
				return
			}
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "echo:%s", body)
		}),
	}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ln) }()
	defer func() { srv.Close(); <-served }()

	p := startProxy(t, ln.Addr().String(), Config{Latency: rtt / 2})
	tr := &http.Transport{Protocols: &protos}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	// One request first, so that the connection is up before the burst
	// and every stream shares it.
	if resp, err := client.Get("http://" + p.Addr() + "/"); err != nil {
		t.Fatal(err)
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	const streams = 32
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			msg := fmt.Sprintf("stream-%d-%s", i, strings.Repeat("x", i*1000))
			resp, err := client.Post("http://"+p.Addr()+"/", "text/plain", strings.NewReader(msg))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			switch {
			case err != nil:
				errs <- err
			case resp.ProtoMajor != 2:
				errs <- fmt.Errorf("response over %s", resp.Proto)
			case string(body) != "echo:"+msg:
				errs <- fmt.Errorf("stream %d: body differs", i)
			case time.Since(start) < rtt:
				errs <- fmt.Errorf("stream %d took %v < RTT", i, time.Since(start))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := p.Stats(); s.Accepted != 1 {
		t.Errorf("%d connections for %d streams, want them multiplexed", s.Accepted, streams)
	}
}
