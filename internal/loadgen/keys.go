package loadgen

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// ZipfianConstant is YCSB's default skew (ZipfianGenerator.ZIPFIAN_CONSTANT).
const ZipfianConstant = 0.99

// scrambledItems and scrambledZetan are YCSB's ScrambledZipfianGenerator
// constants: the zipfian is drawn over ten billion items (zeta precomputed for
// the 0.99 constant) and hashed into the key space, so that the popular keys
// are spread over it rather than clustered at its start.
const (
	scrambledItems = 10_000_000_000
	scrambledZetan = 26.46902820178302
)

// KeyGen picks key indexes in [0, n). A KeyGen is immutable after
// construction and safe for concurrent use; the randomness comes from the
// caller's generator (one per worker), so that a seeded run is reproducible
// per worker.
type KeyGen interface {
	// Next returns the next key index.
	Next(r *rand.Rand) int
	// N is the number of keys.
	N() int
}

// Distributions accepted by NewKeyGen.
var Distributions = []string{"uniform", "zipfian", "latest", "hotspot"}

// NewKeyGen returns the named distribution over n keys: uniform, zipfian
// (YCSB's scrambled zipfian, constant 0.99), latest (zipfian over recency:
// the most recently inserted keys are the most popular) or hotspot (80% of
// the operations on 20% of the keys).
func NewKeyGen(dist string, n int) (KeyGen, error) {
	if n < 1 {
		return nil, fmt.Errorf("keys: %d keys; want at least 1", n)
	}
	switch dist {
	case "uniform":
		return Uniform{n: n}, nil
	case "zipfian":
		return NewScrambledZipfian(n), nil
	case "latest":
		return NewLatest(n), nil
	case "hotspot":
		return NewHotspot(n, 0.2, 0.8), nil
	}
	return nil, fmt.Errorf("unknown key distribution %q (want one of uniform, zipfian, latest, hotspot)", dist)
}

// Uniform picks every key with the same probability.
type Uniform struct{ n int }

// NewUniform returns a uniform distribution over n keys.
func NewUniform(n int) Uniform { return Uniform{n: n} }

func (u Uniform) Next(r *rand.Rand) int { return r.IntN(u.n) }
func (u Uniform) N() int                { return u.n }

// Zipfian is YCSB's ZipfianGenerator (after Gray et al., "Quickly
// Generating Billion-Record Synthetic Databases", SIGMOD'94): item i (from 0)
// is drawn with probability proportional to 1/(i+1)^theta. Item 0 is the
// most popular.
type Zipfian struct {
	items               int64
	theta, alpha, zetan float64
	eta, halfPowTheta   float64
	zeta2theta          float64
}

// zeta returns the sum over i in [1, n] of 1/i^theta.
func zeta(n int64, theta float64) float64 {
	var s float64
	for i := int64(1); i <= n; i++ {
		s += 1 / math.Pow(float64(i), theta)
	}
	return s
}

// NewZipfian returns a zipfian distribution over items items with the given
// constant (0 < theta < 1). It computes zeta(items), which takes time
// linear in items.
func NewZipfian(items int64, theta float64) *Zipfian {
	return newZipfian(items, theta, zeta(items, theta))
}

func newZipfian(items int64, theta, zetan float64) *Zipfian {
	z := &Zipfian{items: items, theta: theta, zetan: zetan}
	z.zeta2theta = zeta(2, theta)
	z.alpha = 1 / (1 - theta)
	z.eta = (1 - math.Pow(2/float64(items), 1-theta)) / (1 - z.zeta2theta/zetan)
	z.halfPowTheta = 1 + math.Pow(0.5, theta)
	return z
}

// Next64 returns the next item in [0, items).
func (z *Zipfian) Next64(r *rand.Rand) int64 {
	u := r.Float64()
	uz := u * z.zetan
	if uz < 1 {
		return 0
	}
	if uz < z.halfPowTheta {
		return 1
	}
	v := int64(float64(z.items) * math.Pow(z.eta*u-z.eta+1, z.alpha))
	return min(max(v, 0), z.items-1)
}

func (z *Zipfian) Next(r *rand.Rand) int { return int(z.Next64(r)) }
func (z *Zipfian) N() int                { return int(z.items) }

// Prob returns the exact probability of item i under the zipfian law (the
// generator approximates it, exactly for items 0 and 1).
func (z *Zipfian) Prob(i int64) float64 {
	return 1 / math.Pow(float64(i+1), z.theta) / z.zetan
}

// ScrambledZipfian is YCSB's ScrambledZipfianGenerator: a zipfian over ten
// billion items with constant 0.99, each drawn item hashed (FNV-1a, 64 bits)
// into [0, n). The popularity of the keys follows the zipfian law, but the
// popular keys are scattered over the key space.
type ScrambledZipfian struct {
	n int
	z *Zipfian
}

// NewScrambledZipfian returns YCSB's scrambled zipfian over n keys.
func NewScrambledZipfian(n int) *ScrambledZipfian {
	return &ScrambledZipfian{n: n, z: newZipfian(scrambledItems, ZipfianConstant, scrambledZetan)}
}

func (s *ScrambledZipfian) Next(r *rand.Rand) int { return s.Key(s.z.Next64(r)) }
func (s *ScrambledZipfian) N() int                { return s.n }

// Key is the key that zipfian item i is hashed to.
func (s *ScrambledZipfian) Key(i int64) int { return int(FNVHash64(i) % int64(s.n)) }

// FNVHash64 is YCSB's Utils.fnvhash64: FNV-1a over the 8 little-endian bytes
// of v, as a non-negative int64.
func FNVHash64(v int64) int64 {
	const (
		offset = 0xCBF29CE484222325
		prime  = 1099511628211
	)
	h := uint64(offset)
	u := uint64(v)
	for range 8 {
		h ^= u & 0xff
		u >>= 8
		h *= prime
	}
	x := int64(h)
	if x < 0 {
		x = -x
	}
	if x < 0 { // math.MinInt64
		x = 0
	}
	return x
}

// Latest is YCSB's SkewedLatestGenerator: a zipfian over recency, so that the
// most recently inserted key is the most popular, the one inserted before it
// the next, and so on. Keys are taken as inserted in index order (the load
// phase writes key 0 first and key n-1 last), so key n-1 is the latest. The
// workloads here update keys and never insert, so the order stays that of
// the load phase.
type Latest struct {
	n int
	z *Zipfian
}

// NewLatest returns the latest distribution over n keys.
func NewLatest(n int) *Latest { return &Latest{n: n, z: NewZipfian(int64(n), ZipfianConstant)} }

func (l *Latest) Next(r *rand.Rand) int { return l.n - 1 - int(l.z.Next64(r)) }
func (l *Latest) N() int                { return l.n }

// Hotspot is YCSB's HotspotIntegerGenerator: a fraction hotOps of the
// operations go to the first hotSet fraction of the keys (uniformly within
// it), the rest uniformly to the other keys.
type Hotspot struct {
	n, hot        int
	hotOpFraction float64
}

// NewHotspot returns a hotspot distribution over n keys: hotOps of the
// operations on a hotSet fraction of the keys. YCSB's defaults are 0.2 and
// 0.8.
func NewHotspot(n int, hotSet, hotOps float64) *Hotspot {
	hot := int(float64(n) * hotSet)
	hot = min(max(hot, 1), n)
	return &Hotspot{n: n, hot: hot, hotOpFraction: hotOps}
}

func (h *Hotspot) Next(r *rand.Rand) int {
	if h.hot == h.n || r.Float64() < h.hotOpFraction {
		return r.IntN(h.hot)
	}
	return h.hot + r.IntN(h.n-h.hot)
}
func (h *Hotspot) N() int { return h.n }

// HotKeys is the number of keys in the hot set (keys [0, HotKeys)).
func (h *Hotspot) HotKeys() int { return h.hot }
