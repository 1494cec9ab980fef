package correctable_test

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"

	"github.com/correctables/correctables/correctable"
)

// propBatches times rapid's default 100 checks is the number of random
// sequences TestContractProperty runs: 2,000, well above the 1,000 required.
const propBatches = 20

var propLevels = []correctable.Level{cacheLevel, correctable.Eventual, correctable.Causal, correctable.Strong}

// event is what a consumer saw: a view or the error.
type event struct {
	view correctable.View[int]
	err  bool
}

// propSub is one callback attachment and what it must see.
type propSub struct {
	start int // index in the model's history of its first view
	mu    sync.Mutex
	got   []event
	done  chan struct{}
}

// propReader is one concurrent Views iteration.
type propReader struct {
	got  []correctable.View[int]
	done chan struct{}
}

// propMachine drives one Correctable through a random sequence of updates,
// closes, failures, callback attachments and concurrent readers, and keeps
// the model it must match.
type propMachine struct {
	c *correctable.Correctable[int]
	r *correctable.Resolver[int]

	history []correctable.View[int] // the model: views accepted, in order
	closed  bool
	failed  bool
	next    int // next value: values are unique

	subs     []*propSub
	readers  []*propReader
	inflight atomic.Int32 // callbacks running now, over all attachments
	overlap  atomic.Bool  // two callbacks ran at once
}

func (m *propMachine) drawView(t *rapid.T) correctable.View[int] {
	m.next++
	v := correctable.View[int]{
		Value: m.next,
		Level: rapid.SampledFrom(propLevels).Draw(t, "level"),
	}
	if len(m.history) > 0 && rapid.IntRange(0, 4).Draw(t, "confirm") == 0 {
		v.Confirmed = true
	}
	return v
}

// expect returns the error the producer call must return, and applies it
// to the model.
func (m *propMachine) accept(v correctable.View[int], final bool) error {
	switch {
	case m.closed:
		return correctable.ErrClosed
	case len(m.history) > 0 && v.Level.Compare(m.history[len(m.history)-1].Level) < 0:
		return correctable.ErrWeakerLevel
	}
	if v.Confirmed {
		v.Value = m.history[len(m.history)-1].Value
	}
	v.Final = final
	m.history = append(m.history, v)
	m.closed = final
	return nil
}

func check(t *rapid.T, op string, got, want error) {
	if want == nil && got != nil || want != nil && !errors.Is(got, want) {
		t.Fatalf("%s: got error %v, want %v", op, got, want)
	}
}

func (m *propMachine) update(t *rapid.T) {
	v := m.drawView(t)
	want := m.accept(v, false)
	check(t, "Update", m.r.Update(v), want)
}

func (m *propMachine) close(t *rapid.T) {
	v := m.drawView(t)
	want := m.accept(v, true)
	check(t, "Close", m.r.Close(v), want)
}

func (m *propMachine) fail(t *rapid.T) {
	var want error
	if m.closed {
		want = correctable.ErrClosed
	}
	check(t, "Fail", m.r.Fail(errors.New("boom")), want)
	m.closed, m.failed = true, m.failed || want == nil
}

func (m *propMachine) attach(*rapid.T) {
	s := &propSub{start: max(len(m.history)-1, 0), done: make(chan struct{})}
	record := func(e event) {
		if m.inflight.Add(1) != 1 {
			m.overlap.Store(true)
		}
		runtime.Gosched() // widen the window for a concurrent callback
		s.mu.Lock()
		s.got = append(s.got, e)
		s.mu.Unlock()
		m.inflight.Add(-1)
		if e.err || e.view.Final {
			close(s.done)
		}
	}
	m.c.SetCallbacks(correctable.Callbacks[int]{
		OnUpdate: func(v correctable.View[int]) { record(event{view: v}) },
		OnFinal:  func(v correctable.View[int]) { record(event{view: v}) },
		OnError:  func(error) { record(event{err: true}) },
	})
	m.subs = append(m.subs, s)
}

func (m *propMachine) read(*rapid.T) {
	rd := &propReader{done: make(chan struct{})}
	go func() {
		defer close(rd.done)
		for v := range m.c.Views() {
			rd.got = append(rd.got, v)
		}
	}()
	m.readers = append(m.readers, rd)
}

func (m *propMachine) latest(t *rapid.T) {
	v, ok := m.c.Latest()
	if ok != (len(m.history) > 0) || ok && v.Value != m.history[len(m.history)-1].Value {
		t.Fatalf("Latest = %+v, %v; model %v", v, ok, m.history)
	}
}

func (m *propMachine) invariant(t *rapid.T) {
	want := correctable.StateUpdating
	switch {
	case m.failed:
		want = correctable.StateError
	case m.closed:
		want = correctable.StateFinal
	}
	if got := m.c.State(); got != want {
		t.Fatalf("State = %v, want %v", got, want)
	}
}

// finish closes the Correctable if the sequence did not, waits for every
// consumer and checks what each saw.
func (m *propMachine) finish(t *rapid.T) {
	if !m.closed {
		m.fail(t)
	}
	for i, s := range m.subs {
		wait(t, s.done, fmt.Sprintf("attachment %d", i))
		want := make([]event, 0, len(m.history))
		if s.start < len(m.history) {
			for _, v := range m.history[s.start:] {
				want = append(want, event{view: v})
			}
		}
		if m.failed {
			want = append(want, event{err: true})
		}
		s.mu.Lock()
		got := slices.Clone(s.got)
		s.mu.Unlock()
		if !slices.EqualFunc(got, want, sameEvent) {
			t.Fatalf("attachment %d (from view %d) saw %+v, want %+v", i, s.start, got, want)
		}
	}
	for i, rd := range m.readers {
		wait(t, rd.done, fmt.Sprintf("reader %d", i))
		n := len(rd.got)
		if len(m.history) > 0 && n == 0 || n > len(m.history) ||
			!slices.EqualFunc(rd.got, m.history[len(m.history)-n:], sameView) {
			t.Fatalf("reader %d saw %+v, not a suffix of %+v", i, rd.got, m.history)
		}
	}
	if m.overlap.Load() {
		t.Fatal("two callbacks of one Correctable ran at the same time")
	}
}

func sameView(a, b correctable.View[int]) bool {
	return a.Value == b.Value && a.Level == b.Level && a.Final == b.Final && a.Confirmed == b.Confirmed
}

func sameEvent(a, b event) bool { return a.err == b.err && sameView(a.view, b.view) }

// TestContractProperty checks the Correctable contract over random
// sequences: one close, no view after close, views in order of strength,
// every callback attachment called once per view from its start and once
// at close, never two callbacks at once, every reader sees a contiguous
// suffix of the views ending at close.
func TestContractProperty(t *testing.T) {
	var sequences atomic.Int64
	for b := range propBatches {
		t.Run(fmt.Sprint("batch", b), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				sequences.Add(1)
				c, r := correctable.New[int]()
				m := &propMachine{c: c, r: r}
				t.Repeat(map[string]func(*rapid.T){
					"update": m.update,
					"close":  m.close,
					"fail":   m.fail,
					"attach": m.attach,
					"read":   m.read,
					"latest": m.latest,
					"":       m.invariant,
				})
				m.finish(t)
			})
		})
	}
	t.Logf("%d random sequences", sequences.Load())
}
