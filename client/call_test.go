package client_test

import (
	"testing"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// TestCallFallsBackToInvoke: single-view operations go as Call; an
// endpoint that answers Call with Unimplemented (a replica older than
// Call) is asked once, and gets the same operations as Invoke from then
// on, with the same views.
func TestCallFallsBackToInvoke(t *testing.T) {
	for _, noCall := range []bool{false, true} {
		f := &fakeStore{prelim: resA, final: resB, noCall: noCall}
		addr, _ := serve(t, f)
		c := dial(t, []string{addr})
		for i := range 3 {
			v, err := final(t, c.InvokeWeak(t.Context(), client.Get("k")))
			if err != nil || string(v.Value.Value) != "alpha" || v.Level != correctable.Eventual {
				t.Fatalf("noCall %v: weak get %d: %+v %v", noCall, i, v, err)
			}
			v, err = final(t, c.InvokeStrong(t.Context(), client.Get("k")))
			if err != nil || string(v.Value.Value) != "beta" || v.Level != correctable.Strong {
				t.Fatalf("noCall %v: strong get %d: %+v %v", noCall, i, v, err)
			}
		}
		// Both views: always Invoke.
		if _, err := final(t, c.Invoke(t.Context(), client.Get("k"))); err != nil {
			t.Fatal(err)
		}
		wantCalls := 6
		if noCall {
			wantCalls = 1
		}
		if n := f.callCount(); n != wantCalls {
			t.Errorf("noCall %v: %d Calls for 6 single-view operations, want %d", noCall, n, wantCalls)
		}
		if n := len(f.requests()); n != 7 {
			t.Errorf("noCall %v: %d operations answered, want 7", noCall, n)
		}
		if st := c.Stats(); st.Ops != 7 || st.Failed != 0 || st.Failovers != 0 {
			t.Errorf("noCall %v: stats %+v", noCall, st)
		}
	}
}
