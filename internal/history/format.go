package history

import (
	"fmt"
	"slices"
	"strings"

	"github.com/correctables/correctables/internal/state"
)

// maxShown bounds how many bytes of a value, items of a list or operations
// of an order one message spells out.
const maxShown = 32

// describeOp renders an operation compactly: kind(key, args).
func describeOp(op state.Op) string {
	var args []string
	if op.Key != "" || op.Kind != state.OpTxn && op.Kind != state.OpNoop {
		args = append(args, fmt.Sprintf("%q", op.Key))
	}
	if len(op.Value) > 0 {
		args = append(args, shortBytes(op.Value))
	}
	if len(op.Expected) > 0 {
		args = append(args, "expect="+shortBytes(op.Expected))
	}
	if op.ExpectAbsent {
		args = append(args, "expect=absent")
	}
	if op.Delta != 0 {
		args = append(args, fmt.Sprintf("%+d", op.Delta))
	}
	if op.Limit != 0 {
		args = append(args, fmt.Sprintf("limit=%d", op.Limit))
	}
	if t := op.Txn; t != nil {
		var b strings.Builder
		b.WriteString("if[")
		for i, g := range t.Guards {
			if i > 0 {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "%q%v%s", g.Key, g.Cmp, shortBytes(g.Value))
		}
		b.WriteString("] then[")
		writeWrites(&b, t.Then)
		b.WriteString("] else[")
		writeWrites(&b, t.Else)
		b.WriteString("]")
		args = append(args, b.String())
	}
	return fmt.Sprintf("%v(%s)", op.Kind, strings.Join(args, ", "))
}

func writeWrites(b *strings.Builder, ws []state.Write) {
	for i, w := range ws {
		if i > 0 {
			b.WriteString(" ")
		}
		if w.Delete {
			fmt.Fprintf(b, "del %q", w.Key)
		} else {
			fmt.Fprintf(b, "%q=%s", w.Key, shortBytes(w.Value))
		}
	}
}

// describeResult renders the fields of a result that are set.
func describeResult(r state.Result) string {
	var f []string
	if r.Err != state.CodeOK {
		f = append(f, "err="+r.Err.String())
	}
	if r.OK {
		f = append(f, "ok")
	}
	if r.Found {
		f = append(f, "found")
	}
	if r.Value != nil {
		f = append(f, "value="+shortBytes(r.Value))
	}
	if r.Int != 0 {
		f = append(f, fmt.Sprintf("int=%d", r.Int))
	}
	if r.Len != 0 {
		f = append(f, fmt.Sprintf("len=%d", r.Len))
	}
	if r.Items != nil {
		var b strings.Builder
		b.WriteString("items=[")
		for i, kv := range r.Items {
			if i == maxShown {
				fmt.Fprintf(&b, " ...%d more", len(r.Items)-maxShown)
				break
			}
			if i > 0 {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "%q:%s", kv.Key, shortBytes(kv.Value))
		}
		b.WriteString("]")
		f = append(f, b.String())
	}
	return "{" + strings.Join(f, " ") + "}"
}

func shortBytes(v []byte) string {
	if len(v) > maxShown {
		return fmt.Sprintf("%q...(%d bytes)", v[:maxShown], len(v))
	}
	return fmt.Sprintf("%q", v)
}

// describeOrder renders a list of ids, eliding the middle of long lists.
func describeOrder(ids []OpID) string {
	if len(ids) <= maxShown {
		return fmt.Sprint(ids)
	}
	head := fmt.Sprint(ids[:maxShown/2])
	tail := fmt.Sprint(ids[len(ids)-maxShown/2:])
	return fmt.Sprintf("%s ...%d more... %s", strings.TrimSuffix(head, "]"), len(ids)-maxShown, strings.TrimPrefix(tail, "["))
}

// cloneResult copies a result out of the state's memory: Result.Value and
// Items alias the state, which later operations change.
func cloneResult(r state.Result) state.Result {
	r.Value = slices.Clone(r.Value)
	if r.Items != nil {
		items := make([]state.KV, len(r.Items))
		for i, kv := range r.Items {
			items[i] = state.KV{Key: kv.Key, Value: slices.Clone(kv.Value)}
		}
		r.Items = items
	}
	return r
}
