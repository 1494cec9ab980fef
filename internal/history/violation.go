package history

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrViolation is wrapped by every error a checker returns when the history
// breaks the property it checks (rather than the checker being misused).
var ErrViolation = errors.New("history violation")

// ErrInconclusive is wrapped by the error of a check that ran out of time
// before deciding (porcupine's search is NP-hard). The message still says
// what looked wrong.
var ErrInconclusive = errors.New("history check inconclusive")

// maxReported bounds how many violations one error spells out; the rest are
// only counted. The first few explain a failing seed; thousands would bury it.
const maxReported = 10

// violation is one broken rule, keyed for a deterministic report order.
type violation struct {
	rec, view int // -1 when not about a record or view
	msg       string
}

// violations collects what a checker found.
type violations struct {
	check string
	list  []violation
}

func (vs *violations) add(rec, view int, format string, args ...any) {
	vs.list = append(vs.list, violation{rec: rec, view: view, msg: fmt.Sprintf(format, args...)})
}

// err returns nil, or an error wrapping ErrViolation that lists the first
// maxReported violations in (record, view, discovery) order.
func (vs *violations) err() error {
	if len(vs.list) == 0 {
		return nil
	}
	slices.SortStableFunc(vs.list, func(a, b violation) int {
		if a.rec != b.rec {
			return a.rec - b.rec
		}
		return a.view - b.view
	})
	var b strings.Builder
	for i, v := range vs.list {
		if i == maxReported {
			fmt.Fprintf(&b, "\n  ... and %d more", len(vs.list)-maxReported)
			break
		}
		b.WriteString("\n  ")
		b.WriteString(v.msg)
	}
	noun := "violations"
	if len(vs.list) == 1 {
		noun = "violation"
	}
	return fmt.Errorf("%w: %s: %d %s:%s", ErrViolation, vs.check, len(vs.list), noun, b.String())
}
