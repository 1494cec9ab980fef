package e2e

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/history"
	"github.com/correctables/correctables/internal/state"
)

// newRecorder timestamps with the wall clock: the processes share no virtual
// clock, and one clock for invocations and views keeps intervals comparable.
func newRecorder() *history.Recorder {
	return history.NewRecorder(func() int64 { return time.Now().UnixNano() })
}

// codes maps the client's result errors to the store's codes, one for one
// (client/errors.go codeErrs mirrors internal/state's Code numbering).
var codes = []struct {
	err  error
	code state.Code
}{
	{client.ErrUnknownOp, state.CodeUnknownOp},
	{client.ErrBadArgs, state.CodeBadArgs},
	{client.ErrKeyTooLarge, state.CodeKeyTooLarge},
	{client.ErrValueTooLarge, state.CodeValueTooLarge},
	{client.ErrTooManyOps, state.CodeTooManyOps},
	{client.ErrNotInteger, state.CodeNotInteger},
	{client.ErrOverflow, state.CodeOverflow},
}

// toState maps a client Result to the model's: the porcupine model compares
// results exactly (state.Result.Equal), so every field must carry over.
func toState(r client.Result) (state.Result, error) {
	out := state.Result{Found: r.Found, Value: r.Value, Int: r.Int, Len: r.Len, OK: r.OK}
	if r.Err != nil {
		found := false
		for _, c := range codes {
			if errors.Is(r.Err, c.err) {
				out.Err, found = c.code, true
				break
			}
		}
		if !found {
			return out, fmt.Errorf("result error %v has no store code", r.Err)
		}
	}
	for _, kv := range r.Items {
		out.Items = append(out.Items, state.KV{Key: kv.Key, Value: kv.Value})
	}
	return out, nil
}

// op is one operation in both forms: the client's, to send, and the model's,
// to record. Built together so that they cannot disagree.
type op struct {
	c client.Op
	s state.Op
}

func putOp(key string, v []byte) op {
	return op{client.Put(key, v), state.Op{Kind: state.OpPut, Key: key, Value: v}}
}

func getOp(key string) op { return op{client.Get(key), state.Op{Kind: state.OpGet, Key: key}} }

func incrOp(key string, d int64) op {
	return op{client.Incr(key, d), state.Op{Kind: state.OpIncr, Key: key, Delta: d}}
}

func appendOp(key string, v []byte) op {
	return op{client.Append(key, v), state.Op{Kind: state.OpAppend, Key: key, Value: v}}
}

// mode is how an operation is invoked.
type mode int

const (
	strongBoth    mode = iota // Invoke: preliminary and final (strong protocol)
	strongOnly                // InvokeStrong: the final view only
	weakCommitted             // InvokeWeakCommitted: weak, with its committed view
	weakOnly                  // InvokeWeak: one weak view, never a final one
)

// outcome is what an invocation ended with.
type outcome struct {
	views []correctable.View[client.Result]
	err   error // nil when the final view arrived
}

// final returns the final view, if it arrived.
func (o outcome) final() (correctable.View[client.Result], bool) {
	if o.err == nil && len(o.views) > 0 && o.views[len(o.views)-1].Final {
		return o.views[len(o.views)-1], true
	}
	return correctable.View[client.Result]{}, false
}

// invoke runs o on cl as client id clientID, records it in rec (nil: not
// recorded) and waits, within ctx, for it to close. A broken stream or an
// expired context leaves the record without a final view: pending, not
// failed. It returns an error only for what the history cannot hold (a
// result the model cannot express).
func invoke(ctx context.Context, rec *history.Recorder, clientID int, cl *client.Client, o op, m mode) (outcome, error) {
	var h *history.Handle
	if rec != nil {
		h = rec.Invoke(clientID, o.s, m == strongBoth || m == strongOnly)
	}
	var c *correctable.Correctable[client.Result]
	switch m {
	case strongBoth:
		c = cl.Invoke(ctx, o.c)
	case strongOnly:
		c = cl.InvokeStrong(ctx, o.c)
	case weakCommitted:
		c = cl.InvokeWeakCommitted(ctx, o.c)
	case weakOnly:
		c = cl.InvokeWeak(ctx, o.c)
	}
	var out outcome
	for v := range c.AllViews() {
		out.views = append(out.views, v)
		if h == nil {
			continue
		}
		res, err := toState(v.Value)
		if err != nil {
			return out, fmt.Errorf("%v: %w", o.c, err)
		}
		hv := history.View{Result: res, Final: v.Final && v.Level == correctable.Strong}
		if s, ok := client.StampOf(v); ok {
			if !s.Op.IsZero() {
				h.SetID(history.OpID{Origin: s.Op.Origin, Seq: s.Op.Seq})
			}
			hv.Stamp = history.Stamp{Replica: s.Replica, CommittedCount: int(s.CommittedCount), VV: s.VV}
		}
		h.View(hv)
	}
	out.err = c.Err()
	if out.err == nil && (len(out.views) == 0 || !out.views[len(out.views)-1].Final) {
		out.err = errors.New("closed without a final view")
	}
	return out, nil
}
