package loadgen

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Workload is a YCSB core workload: the fraction of reads, the rest being
// updates of existing keys.
type Workload struct {
	Name string
	// ReadFraction is the probability that an operation is a read.
	ReadFraction float64
}

// Workloads are the supported workloads, by name: YCSB's a, b and c, and w
// (write only, not in YCSB).
var Workloads = map[string]Workload{
	"a": {Name: "a", ReadFraction: 0.50},
	"b": {Name: "b", ReadFraction: 0.95},
	"c": {Name: "c", ReadFraction: 1},
	"w": {Name: "w", ReadFraction: 0},
}

// ParseWorkload returns the named workload.
func ParseWorkload(name string) (Workload, error) {
	w, ok := Workloads[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return Workload{}, fmt.Errorf("unknown workload %q (want a: 50%% reads, 50%% updates; b: 95/5; c: read only; w: write only)", name)
	}
	return w, nil
}

// Mode says which views an operation asks for.
type Mode string

// The modes: the final view only (client InvokeStrong), the preliminary
// view only (InvokeWeak), both (Invoke), or one view at the level a CPQ
// policy draws (client InvokeCPQ; our store only).
const (
	Strong Mode = "strong"
	Weak   Mode = "weak"
	Invoke Mode = "invoke"
	CPQ    Mode = "cpq"
)

// ParseModes parses a comma-separated list of modes.
func ParseModes(s string) ([]Mode, error) {
	var out []Mode
	for _, part := range strings.Split(s, ",") {
		part = strings.ToLower(strings.TrimSpace(part))
		if part == "" {
			continue
		}
		m := Mode(part)
		switch m {
		case Strong, Weak, Invoke, CPQ:
		default:
			return nil, fmt.Errorf("unknown mode %q (want strong, weak, invoke or cpq)", part)
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no mode in %q (want strong, weak, invoke or cpq)", s)
	}
	return out, nil
}

// ParseConcurrency parses a comma-separated list of positive integers.
func ParseConcurrency(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil {
			return nil, fmt.Errorf("concurrency %q is not an integer", part)
		}
		if n < 1 || n > 100_000 {
			return nil, fmt.Errorf("concurrency %d: want 1 to 100,000", n)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no concurrency in %q", s)
	}
	return out, nil
}

// Op is one generated operation.
type Op struct {
	Read  bool
	Key   string
	Value []byte // nil for a read
}

// Generator produces the operations of one worker: its own random source,
// the shared key distribution and workload. It is not safe for concurrent
// use; give each worker its own.
type Generator struct {
	w         Workload
	keys      KeyGen
	names     []string
	valueSize int
	r         *rand.Rand
}

// KeyName is the name of key i: "user" and the index, zero-padded to ten
// digits so that keys sort in index order.
func KeyName(i int) string { return fmt.Sprintf("user%010d", i) }

// KeyNames returns the names of keys 0 to n-1.
func KeyNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = KeyName(i)
	}
	return out
}

// NewGenerator returns the generator of worker id for a run seeded with
// seed. names are the key names (KeyNames(keys.N())), shared by workers.
func NewGenerator(w Workload, keys KeyGen, names []string, valueSize int, seed uint64, id int) *Generator {
	return &Generator{w: w, keys: keys, names: names, valueSize: valueSize,
		r: rand.New(rand.NewPCG(seed, uint64(id)*0x9E3779B97F4A7C15+1))}
}

// Next returns the next operation. A write's value is freshly allocated
// random bytes (an invocation may hold it until it ends).
func (g *Generator) Next() Op {
	read := g.w.ReadFraction >= 1 || (g.w.ReadFraction > 0 && g.r.Float64() < g.w.ReadFraction)
	op := Op{Read: read, Key: g.names[g.keys.Next(g.r)]}
	if !read {
		op.Value = g.value()
	}
	return op
}

// value returns valueSize random printable bytes (etcd stores strings; ours
// bytes: both get the same bytes).
func (g *Generator) value() []byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, g.valueSize)
	var x uint64
	for i := range b {
		if i%10 == 0 {
			x = g.r.Uint64()
		}
		b[i] = alphabet[x%uint64(len(alphabet))]
		x /= uint64(len(alphabet))
	}
	return b
}
