package loadgen

import (
	"strings"
	"testing"
)

func TestWorkloadMix(t *testing.T) {
	const n = 200_000
	keys := NewUniform(100)
	names := KeyNames(100)
	for name, want := range map[string]float64{"a": 0.5, "b": 0.95, "c": 1, "w": 0} {
		w, err := ParseWorkload(name)
		if err != nil {
			t.Fatal(err)
		}
		g := NewGenerator(w, keys, names, 17, 1, 0)
		reads := 0
		for range n {
			op := g.Next()
			if op.Read {
				reads++
				if op.Value != nil {
					t.Fatalf("workload %s: a read with a value", name)
				}
			} else if len(op.Value) != 17 {
				t.Fatalf("workload %s: a write of %d bytes, want 17", name, len(op.Value))
			}
			if !strings.HasPrefix(op.Key, "user") {
				t.Fatalf("key %q", op.Key)
			}
		}
		within(t, "workload "+name+" reads", reads*samples/n, want, 0.01)
		if want == 0 && reads != 0 || want == 1 && reads != n {
			t.Errorf("workload %s: %d reads of %d", name, reads, n)
		}
	}
}

func TestGeneratorSeeded(t *testing.T) {
	w := Workloads["a"]
	keys := NewScrambledZipfian(1000)
	names := KeyNames(1000)
	a, b, c := NewGenerator(w, keys, names, 8, 7, 3), NewGenerator(w, keys, names, 8, 7, 3), NewGenerator(w, keys, names, 8, 7, 4)
	same, differ := true, false
	for range 100 {
		x, y, z := a.Next(), b.Next(), c.Next()
		if x.Key != y.Key || x.Read != y.Read || string(x.Value) != string(y.Value) {
			same = false
		}
		if x.Key != z.Key {
			differ = true
		}
	}
	if !same {
		t.Errorf("same seed and worker: different operations")
	}
	if !differ {
		t.Errorf("another worker: the same keys")
	}
}

func TestParse(t *testing.T) {
	if _, err := ParseWorkload("e"); err == nil || !strings.Contains(err.Error(), "unknown workload") {
		t.Errorf("workload e: %v", err)
	}
	if m, err := ParseModes("strong, weak,invoke"); err != nil || len(m) != 3 || m[1] != Weak {
		t.Errorf("modes: %v %v", m, err)
	}
	for _, bad := range []string{"", "eventual", "strong,,x"} {
		if _, err := ParseModes(bad); err == nil {
			t.Errorf("modes %q accepted", bad)
		}
	}
	if c, err := ParseConcurrency("16,64, 256"); err != nil || len(c) != 3 || c[2] != 256 {
		t.Errorf("concurrency: %v %v", c, err)
	}
	for _, bad := range []string{"", "0", "-1", "x", "4,0"} {
		if _, err := ParseConcurrency(bad); err == nil {
			t.Errorf("concurrency %q accepted", bad)
		}
	}
	if KeyName(42) != "user0000000042" {
		t.Errorf("KeyName(42) = %q", KeyName(42))
	}
}

func TestParseProc(t *testing.T) {
	line := []byte("1234 (a (weird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 125 0 0 20 0 8 0 100 1000 100 0")
	d, err := parseStatCPU(line)
	if err != nil || d.Seconds() != 3.75 {
		t.Errorf("parseStatCPU = %v, %v; want 3.75s", d, err)
	}
	st := []byte("Name:\tx\nVmPeak:\t  2000 kB\nVmHWM:\t   1500 kB\nVmRSS:\t 1000 kB\n")
	if b, err := parseStatusKB(st, "VmHWM"); err != nil || b != 1500*1024 {
		t.Errorf("VmHWM = %d, %v", b, err)
	}
	if _, err := parseStatusKB(st, "VmSwap"); err == nil {
		t.Errorf("missing field: no error")
	}
	// This process.
	if d, err := ProcCPU(0); err != nil || d < 0 {
		t.Errorf("ProcCPU(self) = %v, %v", d, err)
	}
	if b, err := ProcPeakRSS(0); err != nil || b == 0 {
		t.Errorf("ProcPeakRSS(self) = %d, %v", b, err)
	}
}
