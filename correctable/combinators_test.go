package correctable_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/correctables/correctables/correctable"
)

func collect[T any](t *testing.T, c *correctable.Correctable[T]) []correctable.View[T] {
	t.Helper()
	if _, err := finalOf(t, c); err != nil {
		t.Fatal(err)
	}
	return slices.Collect(c.Views()) // closed: only the final
}

func TestMapKeepsViews(t *testing.T) {
	in, r := correctable.New[int]()
	out := correctable.Map(in, strconv.Itoa)
	rec := make(chan correctable.View[string], 4)
	out.SetCallbacks(correctable.Callbacks[string]{
		OnUpdate: func(v correctable.View[string]) { rec <- v },
		OnFinal:  func(v correctable.View[string]) { rec <- v; close(rec) },
	})
	_ = r.Update(correctable.View[int]{Value: 1, Level: correctable.Eventual, Stamp: "s1"})
	_ = r.Close(correctable.View[int]{Value: 2, Level: correctable.Strong, Stamp: "s2"})
	var got []correctable.View[string]
	for v := range rec {
		got = append(got, v)
	}
	if len(got) != 2 || got[0].Value != "1" || got[0].Level != correctable.Eventual || got[0].Stamp != "s1" || got[0].Final ||
		got[1].Value != "2" || got[1].Level != correctable.Strong || !got[1].Final {
		t.Fatalf("Map views %+v", got)
	}
	iv, _ := in.Latest()
	if got[1].Elapsed != iv.Elapsed {
		t.Errorf("Map changed Elapsed: %v, input %v", got[1].Elapsed, iv.Elapsed)
	}
}

func TestThenError(t *testing.T) {
	in, r := correctable.New[int]()
	bad := errors.New("bad")
	out := correctable.Then(in, func(v correctable.View[int]) (int, error) {
		if v.Value < 0 {
			return 0, bad
		}
		return v.Value * 2, nil
	})
	_ = r.Update(view(-1, correctable.Eventual))
	_ = r.Close(view(3, correctable.Strong))
	if _, err := finalOf(t, out); !errors.Is(err, bad) {
		t.Fatalf("Then error: got %v", err)
	}
}

func TestAll(t *testing.T) {
	a, ra := correctable.New[int]()
	b, rb := correctable.New[int]()
	out := correctable.All(a, b)
	var levels []correctable.Level
	done := make(chan struct{})
	out.SetCallbacks(correctable.Callbacks[[]int]{
		OnUpdate: func(v correctable.View[[]int]) { levels = append(levels, v.Level) },
		OnFinal: func(v correctable.View[[]int]) {
			levels = append(levels, v.Level)
			if !slices.Equal(v.Value, []int{3, 4}) {
				t.Errorf("All final = %v", v.Value)
			}
			close(done)
		},
	})
	_ = ra.Update(view(1, correctable.Eventual))
	_ = rb.Update(view(2, cacheLevel))
	_ = ra.Close(view(3, correctable.Strong))
	_ = rb.Close(view(4, correctable.Strong))
	wait(t, done, "All final")
	for i := 1; i < len(levels); i++ {
		if levels[i].Compare(levels[i-1]) < 0 {
			t.Fatalf("All levels not monotone: %v", levels)
		}
	}
	// The first view's level is the weaker of what both inputs had then:
	// cache, or eventual if b had closed before a's first view arrived.
	if l := levels[0]; l != cacheLevel && l != correctable.Eventual || levels[len(levels)-1] != correctable.Strong {
		t.Fatalf("All levels %v: want the weakest input level, ending at strong", levels)
	}

	c, rc := correctable.New[int]()
	boom := errors.New("boom")
	failed := correctable.All(a, c)
	_ = rc.Fail(boom)
	if _, err := finalOf(t, failed); !errors.Is(err, boom) {
		t.Fatalf("All with a failed input: %v", err)
	}
	if v := collect(t, correctable.All[int]()); len(v) != 1 || len(v[0].Value) != 0 {
		t.Fatalf("All() = %+v", v)
	}
}

func TestFirstAtLeast(t *testing.T) {
	in, r := correctable.New[int]()
	out := correctable.FirstAtLeast(in, correctable.Causal)
	_ = r.Update(view(1, correctable.Eventual))
	_ = r.Update(view(2, correctable.Causal))
	v, err := finalOf(t, out)
	if err != nil || v.Value != 2 || !v.Final || v.Level != correctable.Causal {
		t.Fatalf("FirstAtLeast = %+v, %v", v, err)
	}
	_ = r.Close(view(3, correctable.Strong))

	weak, rw := correctable.New[int]()
	never := correctable.FirstAtLeast(weak, correctable.Strong)
	_ = rw.Close(view(1, correctable.Eventual))
	if _, err := finalOf(t, never); !errors.Is(err, correctable.ErrLevelNotReached) {
		t.Fatalf("FirstAtLeast below level: %v", err)
	}
}

func TestWithContext(t *testing.T) {
	in, r := correctable.New[int]()
	ctx, cancel := context.WithCancel(context.Background())
	out := correctable.WithContext(ctx, in)
	_ = r.Update(view(1, correctable.Eventual))
	cancel()
	if _, err := finalOf(t, out); !errors.Is(err, context.Canceled) {
		t.Fatalf("WithContext after cancel: %v", err)
	}
	if in.State() != correctable.StateUpdating {
		t.Fatal("WithContext changed its input")
	}
	_ = r.Close(view(2, correctable.Strong))

	in2, r2 := correctable.New[int]()
	out2 := correctable.WithContext(context.Background(), in2)
	_ = r2.Close(view(5, correctable.Strong))
	if v, err := finalOf(t, out2); err != nil || v.Value != 5 {
		t.Fatalf("WithContext = %+v, %v", v, err)
	}
}
