package correctable_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/correctables/correctables/correctable"
)

// specProbe is a speculation function that counts its calls and aborts.
// With block set, each call waits for its context to be cancelled or for
// release, so a test decides when a run ends.
type specProbe struct {
	block bool

	mu      sync.Mutex
	calls   []int    // inputs f ran on
	aborts  []string // results passed to abort
	started chan int // receives each input when f starts
	release chan struct{}
}

func newProbe(block bool) *specProbe {
	return &specProbe{block: block, started: make(chan int, 16), release: make(chan struct{})}
}

func (p *specProbe) f(ctx context.Context, in int) (string, error) {
	p.mu.Lock()
	p.calls = append(p.calls, in)
	p.mu.Unlock()
	p.started <- in
	if p.block {
		select {
		case <-ctx.Done(): // superseded: return a result anyway, to be aborted
		case <-p.release:
		}
	}
	if in < 0 {
		return "", fmt.Errorf("bad input %d", in)
	}
	return fmt.Sprint("r", in), nil
}

func (p *specProbe) abort(res string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.aborts = append(p.aborts, res)
}

func (p *specProbe) counts() ([]int, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls), slices.Clone(p.aborts)
}

func (p *specProbe) waitStarted(t *testing.T, in int) {
	t.Helper()
	done := make(chan struct{})
	var got int
	go func() { got = <-p.started; close(done) }()
	wait(t, done, fmt.Sprintf("f(%d) to start", in))
	if got != in {
		t.Fatalf("f started on %d, want %d", got, in)
	}
}

func finalOf[T any](t *testing.T, c *correctable.Correctable[T]) (correctable.View[T], error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	return c.Final(ctx)
}

func TestSpeculateMisspeculation(t *testing.T) {
	for _, block := range []bool{false, true} {
		t.Run(fmt.Sprint("stale run still running: ", block), func(t *testing.T) {
			p := newProbe(block)
			in, r := correctable.New[int]()
			out := correctable.Speculate(in, p.f, p.abort)
			_ = r.Update(view(1, correctable.Eventual))
			p.waitStarted(t, 1)
			_ = r.Close(view(2, correctable.Strong))
			p.waitStarted(t, 2)
			close(p.release)
			v, err := finalOf(t, out)
			if err != nil {
				t.Fatal(err)
			}
			calls, aborts := p.counts()
			if v.Value != "r2" || !v.Final || v.Level != correctable.Strong {
				t.Errorf("result %+v, want r2 at strong", v)
			}
			if !slices.Equal(calls, []int{1, 2}) || !slices.Equal(aborts, []string{"r1"}) {
				t.Errorf("f ran on %v and abort on %v; want [1 2] and [r1]", calls, aborts)
			}
		})
	}
}

func TestSpeculateConfirmed(t *testing.T) {
	for _, confirmed := range []bool{false, true} {
		t.Run(fmt.Sprint("confirmation: ", confirmed), func(t *testing.T) {
			p := newProbe(false)
			in, r := correctable.New[int]()
			out := correctable.Speculate(in, p.f, p.abort)
			_ = r.Update(view(7, correctable.Eventual))
			_ = r.Update(view(7, correctable.Causal)) // same value: no new run
			p.waitStarted(t, 7)
			// f finished (or is about to); the result still waits for the final.
			if out.State() != correctable.StateUpdating {
				t.Fatal("speculation closed before the final view")
			}
			final := correctable.View[int]{Value: 7, Level: correctable.Strong}
			if confirmed {
				final = correctable.View[int]{Level: correctable.Strong, Confirmed: true}
			}
			_ = r.Close(final)
			v, err := finalOf(t, out)
			if err != nil {
				t.Fatal(err)
			}
			calls, aborts := p.counts()
			if v.Value != "r7" || !slices.Equal(calls, []int{7}) || len(aborts) != 0 {
				t.Errorf("result %q, f ran on %v, aborts %v; want r7, [7], none", v.Value, calls, aborts)
			}
		})
	}
}

func TestSpeculateSeveralViews(t *testing.T) {
	p := newProbe(false)
	in, r := correctable.New[int]()
	out := correctable.Speculate(in, p.f, p.abort)
	_ = r.Update(view(1, cacheLevel))
	_ = r.Update(view(2, correctable.Eventual))
	_ = r.Update(view(3, correctable.Causal))
	_ = r.Close(view(3, correctable.Strong))
	v, err := finalOf(t, out)
	if err != nil {
		t.Fatal(err)
	}
	calls, aborts := p.counts()
	// Each view that differs from its predecessor starts a run (runs are
	// concurrent, so compare as sets): all three ran, the first two were
	// aborted once each, the third was confirmed by the final view.
	slices.Sort(calls)
	slices.Sort(aborts)
	if v.Value != "r3" || !slices.Equal(calls, []int{1, 2, 3}) || !slices.Equal(aborts, []string{"r1", "r2"}) {
		t.Errorf("result %q, f ran on %v, aborts %v", v.Value, calls, aborts)
	}
}

func TestSpeculateErrors(t *testing.T) {
	t.Run("f fails on the final value", func(t *testing.T) {
		p := newProbe(false)
		in, r := correctable.New[int]()
		out := correctable.Speculate(in, p.f, p.abort)
		_ = r.Close(view(-1, correctable.Strong))
		if _, err := finalOf(t, out); err == nil || !errors.Is(out.Err(), err) {
			t.Fatalf("want f's error, got %v", err)
		}
	})
	t.Run("stale run fails, final run succeeds", func(t *testing.T) {
		p := newProbe(false)
		in, r := correctable.New[int]()
		out := correctable.Speculate(in, p.f, p.abort)
		_ = r.Update(view(-1, correctable.Eventual))
		_ = r.Close(view(4, correctable.Strong))
		v, err := finalOf(t, out)
		_, aborts := p.counts()
		if err != nil || v.Value != "r4" || len(aborts) != 0 {
			t.Fatalf("got %+v, %v, aborts %v; want r4 and no abort of a failed run", v, err, aborts)
		}
	})
	t.Run("input fails", func(t *testing.T) {
		p := newProbe(true)
		in, r := correctable.New[int]()
		out := correctable.Speculate(in, p.f, p.abort)
		_ = r.Update(view(1, correctable.Eventual))
		p.waitStarted(t, 1)
		boom := errors.New("boom")
		_ = r.Fail(boom)
		if _, err := finalOf(t, out); !errors.Is(err, boom) {
			t.Fatalf("got %v, want boom", err)
		}
		if _, aborts := p.counts(); !slices.Equal(aborts, []string{"r1"}) {
			t.Fatalf("aborts %v, want [r1]", aborts)
		}
	})
}

func TestSpeculateFunc(t *testing.T) {
	in, r := correctable.New[[]string]()
	var mu sync.Mutex
	runs := 0
	out := correctable.SpeculateFunc(in, slices.Equal[[]string],
		func(_ context.Context, refs []string) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			runs++
			return len(refs), nil
		}, nil)
	_ = r.Update(correctable.View[[]string]{Value: []string{"a", "b"}, Level: correctable.Eventual})
	_ = r.Close(correctable.View[[]string]{Value: []string{"a", "b"}, Level: correctable.Strong})
	v, err := finalOf(t, out)
	mu.Lock()
	defer mu.Unlock()
	if err != nil || v.Value != 2 || runs != 1 {
		t.Fatalf("got %+v, %v after %d runs; want 2 after 1 run", v, err, runs)
	}
}
