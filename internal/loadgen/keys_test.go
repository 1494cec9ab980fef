package loadgen

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

const samples = 500_000

func counts(t *testing.T, g KeyGen, seed uint64) []int {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	c := make([]int, g.N())
	for range samples {
		k := g.Next(r)
		if k < 0 || k >= g.N() {
			t.Fatalf("key %d out of [0, %d)", k, g.N())
		}
		c[k]++
	}
	return c
}

// within checks that an observed frequency is within tol (relative) of p,
// allowing four standard deviations of sampling error on top.
func within(t *testing.T, what string, got int, p, tol float64) {
	t.Helper()
	exp := p * samples
	sd := math.Sqrt(samples * p * (1 - p))
	if d := math.Abs(float64(got) - exp); d > tol*exp+4*sd {
		t.Errorf("%s: %d samples, want %.0f (±%.0f%% + 4σ)", what, got, exp, tol*100)
	}
}

func TestUniform(t *testing.T) {
	c := counts(t, NewUniform(100), 1)
	for k, n := range c {
		within(t, "uniform key", n, 0.01, 0)
		_ = k
	}
}

func TestZipfianMatchesLaw(t *testing.T) {
	z := NewZipfian(1000, ZipfianConstant)
	c := counts(t, z, 2)
	// Items 0 and 1 are drawn exactly; the others follow Gray et al.'s
	// approximation, within a few percent over the head of the law.
	within(t, "item 0", c[0], z.Prob(0), 0.01)
	within(t, "item 1", c[1], z.Prob(1), 0.01)
	var head, headP float64
	for i := range 10 {
		head += float64(c[i])
		headP += z.Prob(int64(i))
	}
	within(t, "items 0-9", int(head), headP, 0.05)
	// The most popular items are the first ones, in order.
	for i := 1; i < 5; i++ {
		if c[i] > c[i-1] {
			t.Errorf("item %d drawn %d times, more than item %d (%d)", i, c[i], i-1, c[i-1])
		}
	}
	// Item 0's share is 1/zeta(1000, 0.99), about 13%.
	if p := z.Prob(0); p < 0.12 || p > 0.14 {
		t.Errorf("P(item 0) = %.3f, want about 0.13", p)
	}
}

func TestScrambledZipfian(t *testing.T) {
	const n = 1000
	s := NewScrambledZipfian(n)
	c := counts(t, s, 3)
	// The most popular item (0) lands on key Key(0), with probability
	// 1/26.469 (YCSB's zeta over ten billion items) plus, about, its
	// share 1/n of everything else.
	hot := s.Key(0)
	p0 := 1 / scrambledZetan
	within(t, "hottest key", c[hot], p0+(1-p0)/n, 0.05)
	if slices.Max(c) != c[hot] {
		t.Errorf("key %d (item 0) drawn %d times, but the maximum is %d", hot, c[hot], slices.Max(c))
	}
	// Scrambled: the hot keys are not the first keys.
	if hot == 0 && s.Key(1) == 1 {
		t.Errorf("items 0 and 1 map to keys 0 and 1: not scrambled")
	}
	// Skewed: the 10% most popular keys get far more than 10% of the
	// draws. Less than a zipfian over the n keys would (68%): the items
	// past the first thousand, 70% of the mass of a zipfian over ten
	// billion items, hash about uniformly over the keys; YCSB's
	// scrambled zipfian is that way.
	sorted := slices.Clone(c)
	slices.Sort(sorted)
	slices.Reverse(sorted)
	var top int
	for _, x := range sorted[:n/10] {
		top += x
	}
	if f := float64(top) / samples; f < 0.25 {
		t.Errorf("top 10%% of keys got %.2f of the draws; want a skew (> 0.25)", f)
	}
	// Seeded: the same seed draws the same keys.
	if !slices.Equal(c, counts(t, s, 3)) {
		t.Errorf("same seed, different draws")
	}
}

func TestFNVHash64(t *testing.T) {
	// FNV-1a of eight zero bytes, as YCSB's fnvhash64(0) computes it.
	h := uint64(0xCBF29CE484222325)
	for range 8 {
		h *= 1099511628211
	}
	want := int64(h)
	if want < 0 {
		want = -want
	}
	if got := FNVHash64(0); got != want {
		t.Errorf("FNVHash64(0) = %d, want %d", got, want)
	}
	for _, v := range []int64{1, 42, 1 << 40, -1} {
		if FNVHash64(v) < 0 {
			t.Errorf("FNVHash64(%d) < 0", v)
		}
	}
}

func TestLatest(t *testing.T) {
	const n = 500
	l := NewLatest(n)
	c := counts(t, l, 4)
	// Key n-1 (the latest inserted) is the zipfian's item 0, key n-2 its
	// item 1, and so on.
	within(t, "latest key", c[n-1], l.z.Prob(0), 0.01)
	within(t, "second latest key", c[n-2], l.z.Prob(1), 0.01)
	for i := 2; i < 6; i++ {
		if c[n-1-i] > c[n-i] {
			t.Errorf("key %d drawn more (%d) than the later key %d (%d)", n-1-i, c[n-1-i], n-i, c[n-i])
		}
	}
	var old int
	for _, x := range c[:n/2] {
		old += x
	}
	if f := float64(old) / samples; f > 0.15 {
		t.Errorf("the older half of the keys got %.2f of the draws; want little (< 0.15)", f)
	}
}

func TestHotspot(t *testing.T) {
	const n = 1000
	h := NewHotspot(n, 0.2, 0.8)
	if h.HotKeys() != 200 {
		t.Fatalf("hot set %d keys, want 200", h.HotKeys())
	}
	c := counts(t, h, 5)
	var hot int
	for _, x := range c[:200] {
		hot += x
	}
	within(t, "hot set", hot, 0.8, 0.01)
	// Uniform within each set.
	for k := 0; k < n; k += 97 {
		p := 0.8 / 200
		if k >= 200 {
			p = 0.2 / 800
		}
		within(t, "key", c[k], p, 0.05)
	}
	// Degenerate sets: one key; every key hot.
	if g := NewHotspot(1, 0.2, 0.8); g.Next(rand.New(rand.NewPCG(1, 1))) != 0 {
		t.Errorf("one key: not key 0")
	}
	if g := NewHotspot(10, 1, 0.8); g.HotKeys() != 10 {
		t.Errorf("hot set fraction 1: %d hot keys", g.HotKeys())
	}
}

func TestNewKeyGen(t *testing.T) {
	for _, d := range Distributions {
		g, err := NewKeyGen(d, 10)
		if err != nil || g.N() != 10 {
			t.Errorf("NewKeyGen(%q, 10) = %v, %v", d, g, err)
		}
	}
	if _, err := NewKeyGen("pareto", 10); err == nil {
		t.Errorf("unknown distribution accepted")
	}
	if _, err := NewKeyGen("uniform", 0); err == nil {
		t.Errorf("zero keys accepted")
	}
}
