package correctable_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/correctables/correctables/correctable"
)

// guard bounds how long a test waits for something that must happen: it is
// a deadlock detector, never a synchronization device.
const guard = 30 * time.Second

// fataler is the part of testing.TB and *rapid.T that wait needs.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func wait(t fataler, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(guard):
		t.Fatalf("timed out waiting for %s", what)
	}
}

var cacheLevel = correctable.NewLevel("cache", 50)

func view(v int, l correctable.Level) correctable.View[int] {
	return correctable.View[int]{Value: v, Level: l}
}

// recorder records what one callback attachment saw, and closes done at
// the terminal callback.
type recorder struct {
	mu      sync.Mutex
	updates []int
	final   []int
	errs    []error
	done    chan struct{}
}

func attach(c *correctable.Correctable[int]) *recorder {
	rec := &recorder{done: make(chan struct{})}
	c.SetCallbacks(correctable.Callbacks[int]{
		OnUpdate: func(v correctable.View[int]) {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			rec.updates = append(rec.updates, v.Value)
		},
		OnFinal: func(v correctable.View[int]) {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			rec.final = append(rec.final, v.Value)
			close(rec.done)
		},
		OnError: func(err error) {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			rec.errs = append(rec.errs, err)
			close(rec.done)
		},
	})
	return rec
}

func TestLifecycle(t *testing.T) {
	c, r := correctable.New[int]()
	if got := c.State(); got != correctable.StateUpdating {
		t.Fatalf("new state = %v", got)
	}
	if _, ok := c.Latest(); ok {
		t.Fatal("Latest on a new Correctable reported a view")
	}
	if err := r.Update(correctable.View[int]{Level: cacheLevel, Confirmed: true}); !errors.Is(err, correctable.ErrNothingToConfirm) {
		t.Fatalf("confirm without previous: %v", err)
	}
	if err := r.Update(view(1, correctable.Eventual)); err != nil {
		t.Fatal(err)
	}
	if err := r.Update(view(0, cacheLevel)); !errors.Is(err, correctable.ErrWeakerLevel) {
		t.Fatalf("weaker view: got %v, want ErrWeakerLevel", err)
	}
	if err := r.Update(view(2, correctable.Eventual)); err != nil { // equal level is allowed
		t.Fatal(err)
	}
	if err := r.Fail(nil); !errors.Is(err, correctable.ErrNilError) {
		t.Fatalf("Fail(nil) = %v", err)
	}
	if err := r.Close(correctable.View[int]{Level: correctable.Strong, Confirmed: true}); err != nil {
		t.Fatal(err)
	}
	v, err := c.Final(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v.Value != 2 || !v.Final || !v.Confirmed || v.Level != correctable.Strong {
		t.Fatalf("final = %+v, want confirmed 2 at strong", v)
	}
	if c.State() != correctable.StateFinal || c.Err() != nil {
		t.Fatalf("state %v err %v after close", c.State(), c.Err())
	}
	for _, err := range []error{r.Update(view(3, correctable.Strong)), r.Close(view(3, correctable.Strong)), r.Fail(errors.New("x"))} {
		if !errors.Is(err, correctable.ErrClosed) {
			t.Fatalf("after close: got %v, want ErrClosed", err)
		}
	}
	got := slices.Collect(c.Views())
	if len(got) != 1 || got[0].Value != 2 || !got[0].Final {
		t.Fatalf("late Views = %+v, want only the final", got)
	}
	// AllViews, started as late, yields all three: a printer or a benchmark
	// that must not lose the preliminary view uses it.
	all := slices.Collect(c.AllViews())
	if len(all) != 3 || all[0].Value != 1 || all[1].Value != 2 || all[1].Final || !all[2].Final || !all[2].Confirmed {
		t.Fatalf("late AllViews = %+v, want the two preliminary views then the final", all)
	}
}

// TestAllViewsWhileUpdating: an AllViews iteration started after the
// preliminary view yields it, then waits for and yields the final one.
func TestAllViewsWhileUpdating(t *testing.T) {
	c, r := correctable.New[int]()
	if err := r.Update(view(1, correctable.Eventual)); err != nil {
		t.Fatal(err)
	}
	got := make(chan []correctable.View[int])
	go func() { got <- slices.Collect(c.AllViews()) }()
	if err := r.Close(view(2, correctable.Strong)); err != nil {
		t.Fatal(err)
	}
	vs := <-got
	if len(vs) != 2 || vs[0].Value != 1 || vs[1].Value != 2 || !vs[1].Final {
		t.Fatalf("AllViews = %+v, want 1 then the final 2", vs)
	}
}

func TestFail(t *testing.T) {
	c, r := correctable.New[int]()
	boom := errors.New("boom")
	_ = r.Update(view(1, correctable.Eventual))
	if err := r.Fail(boom); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Final(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Final = %v, want boom", err)
	}
	if c.State() != correctable.StateError || !errors.Is(c.Err(), boom) {
		t.Fatalf("state %v err %v", c.State(), c.Err())
	}
	// A late attachment sees the latest view, then the error.
	rec := attach(c)
	wait(t, rec.done, "late callbacks")
	if !slices.Equal(rec.updates, []int{1}) || len(rec.final) != 0 || len(rec.errs) != 1 || !errors.Is(rec.errs[0], boom) {
		t.Fatalf("late attachment saw updates %v final %v errs %v", rec.updates, rec.final, rec.errs)
	}
}

func TestLateCallbacksStartAtLatest(t *testing.T) {
	c, r := correctable.New[int]()
	early := attach(c)
	_ = r.Update(view(1, cacheLevel))
	_ = r.Update(view(2, correctable.Eventual))
	late := attach(c)
	_ = r.Close(view(3, correctable.Strong))
	after := attach(c)
	for _, rec := range []*recorder{early, late, after} {
		wait(t, rec.done, "callbacks")
	}
	check := func(name string, rec *recorder, updates []int) {
		t.Helper()
		if !slices.Equal(rec.updates, updates) || !slices.Equal(rec.final, []int{3}) || len(rec.errs) != 0 {
			t.Errorf("%s: updates %v final %v errs %v; want updates %v final [3]", name, rec.updates, rec.final, rec.errs, updates)
		}
	}
	check("early", early, []int{1, 2})
	check("late", late, []int{2})
	check("after close", after, nil)
}

// TestCallbacksReenter checks that callbacks may call back into their own
// Correctable, including blocking on Final, without deadlock.
func TestCallbacksReenter(t *testing.T) {
	c, r := correctable.New[int]()
	finalSeen := make(chan struct{})
	inner := make(chan struct{})
	c.SetCallbacks(correctable.Callbacks[int]{
		OnUpdate: func(v correctable.View[int]) {
			if l, ok := c.Latest(); !ok || l.Level.Compare(v.Level) < 0 {
				t.Errorf("Latest in callback = %+v, %v", l, ok)
			}
			if v.Value == 1 {
				// Attach from a callback, and produce from a callback.
				c.SetCallbacks(correctable.Callbacks[int]{OnFinal: func(correctable.View[int]) { close(inner) }})
				if err := r.Update(view(2, correctable.Eventual)); err != nil {
					t.Error(err)
				}
				return
			}
			// Block on the close, which this callback triggers itself.
			if err := r.Close(view(3, correctable.Strong)); err != nil {
				t.Error(err)
			}
			if f, err := c.Final(context.Background()); err != nil || f.Value != 3 {
				t.Errorf("Final in callback = %+v, %v", f, err)
			}
		},
		OnFinal: func(correctable.View[int]) { close(finalSeen) },
	})
	_ = r.Update(view(1, cacheLevel))
	wait(t, finalSeen, "OnFinal")
	wait(t, inner, "inner OnFinal")
}

func TestFinalHonoursContext(t *testing.T) {
	c, r := correctable.New[int]()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Final(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Final(cancelled) = %v", err)
	}
	if c.State() != correctable.StateUpdating {
		t.Fatal("Final's context changed the Correctable")
	}
	_ = r.Close(view(1, correctable.Strong))
	if v, err := c.Final(ctx); err != nil || v.Value != 1 {
		t.Fatalf("Final(cancelled) after close = %+v, %v; want the final view", v, err)
	}
}

func TestViewsIteratesInOrder(t *testing.T) {
	c, r := correctable.New[int]()
	got := make(chan []int)
	started := make(chan struct{})
	_ = r.Update(view(0, cacheLevel)) // the iterator starts at the latest: 0
	go func() {
		var vs []int
		first := true
		for v := range c.Views() {
			if first {
				close(started)
				first = false
			}
			vs = append(vs, v.Value)
		}
		got <- vs
	}()
	wait(t, started, "iterator start")
	for i := 1; i <= 5; i++ {
		_ = r.Update(view(i, correctable.Eventual))
	}
	_ = r.Close(view(6, correctable.Strong))
	var vs []int
	select {
	case vs = <-got:
	case <-time.After(guard):
		t.Fatal("iterator did not end at close")
	}
	if !slices.Equal(vs, []int{0, 1, 2, 3, 4, 5, 6}) {
		t.Fatalf("Views yielded %v", vs)
	}
	// Breaking out early is fine.
	for range c.Views() {
		break
	}
}

func TestMaxViews(t *testing.T) {
	c, r := correctable.New[int]()
	for i := range correctable.MaxViews {
		if err := r.Update(view(i, correctable.Eventual)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Update(view(-1, correctable.Eventual)); !errors.Is(err, correctable.ErrTooManyViews) {
		t.Fatalf("past MaxViews: %v", err)
	}
	if err := r.Close(view(-2, correctable.Strong)); err != nil {
		t.Fatalf("Close past MaxViews: %v", err)
	}
	if v, _ := c.Latest(); v.Value != -2 {
		t.Fatalf("latest = %+v", v)
	}
}

func TestLevels(t *testing.T) {
	std := []correctable.Level{correctable.Eventual, correctable.MonotonicReads, correctable.ReadMyWrites,
		correctable.Causal, correctable.BoundedStaleness, correctable.Strong}
	for i := 1; i < len(std); i++ {
		if std[i].Compare(std[i-1]) <= 0 || !std[i].AtLeast(std[i-1]) || std[i-1].AtLeast(std[i]) {
			t.Errorf("%s is not stronger than %s", std[i], std[i-1])
		}
	}
	if cacheLevel.Compare(correctable.Eventual) >= 0 || cacheLevel.String() != "cache" {
		t.Errorf("custom level %v misordered", cacheLevel)
	}
	if s := correctable.NewLevel("", 7).String(); s != "level(7)" {
		t.Errorf("unnamed level String = %q", s)
	}
	if !(correctable.Level{}).IsZero() || correctable.Strong.IsZero() {
		t.Error("IsZero")
	}
}
