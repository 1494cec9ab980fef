package state

import (
	"errors"
	"fmt"
)

// Sentinel errors. Op.Validate wraps them with context; Apply reports them as
// a Code in Result.Err. Compare with errors.Is.
var (
	// ErrUnknownOp: the op's Kind (or a guard's Cmp) is not one this package knows.
	ErrUnknownOp = errors.New("state: unknown operation")
	// ErrBadArgs: a field the op's kind does not use is set, a count or limit is
	// out of range, or the op is otherwise malformed.
	ErrBadArgs = errors.New("state: bad arguments")
	// ErrKeyTooLarge: a key, queue name or scan prefix exceeds Limits.MaxKey.
	ErrKeyTooLarge = errors.New("state: key too large")
	// ErrValueTooLarge: a value exceeds Limits.MaxValue (for append: the value
	// the append would produce).
	ErrValueTooLarge = errors.New("state: value too large")
	// ErrTooManyOps: a transaction has more than Limits.MaxTxnOps guards and
	// writes in total.
	ErrTooManyOps = errors.New("state: too many operations in transaction")
	// ErrNotInteger: increment of a key whose value is not a decimal int64.
	ErrNotInteger = errors.New("state: value is not an integer")
	// ErrOverflow: increment would overflow int64.
	ErrOverflow = errors.New("state: integer overflow")
	// ErrCorrupt: DecodeOp, DecodeResult or UnmarshalBinary got malformed
	// input. It is never a Result code.
	ErrCorrupt = errors.New("state: corrupt encoding")
)

// Code is the outcome of Apply as carried in Result.Err: CodeOK, or the code
// of one of the sentinel errors. An op whose result carries an error code
// changed nothing.
type Code uint8

// Result codes. The numeric values are part of the wire encoding: never
// renumber, only append.
const (
	CodeOK Code = iota
	CodeUnknownOp
	CodeBadArgs
	CodeKeyTooLarge
	CodeValueTooLarge
	CodeTooManyOps
	CodeNotInteger
	CodeOverflow
	numCodes
)

var codeErrs = [numCodes]error{
	CodeOK:            nil,
	CodeUnknownOp:     ErrUnknownOp,
	CodeBadArgs:       ErrBadArgs,
	CodeKeyTooLarge:   ErrKeyTooLarge,
	CodeValueTooLarge: ErrValueTooLarge,
	CodeTooManyOps:    ErrTooManyOps,
	CodeNotInteger:    ErrNotInteger,
	CodeOverflow:      ErrOverflow,
}

var codeNames = [numCodes]string{
	CodeOK:            "OK",
	CodeUnknownOp:     "UnknownOp",
	CodeBadArgs:       "BadArgs",
	CodeKeyTooLarge:   "KeyTooLarge",
	CodeValueTooLarge: "ValueTooLarge",
	CodeTooManyOps:    "TooManyOps",
	CodeNotInteger:    "NotInteger",
	CodeOverflow:      "Overflow",
}

func (c Code) String() string {
	if c < numCodes {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", uint8(c))
}

// Err returns the sentinel error for c: nil for CodeOK, ErrUnknownOp for a
// code this version does not know.
func (c Code) Err() error {
	if c < numCodes {
		return codeErrs[c]
	}
	return ErrUnknownOp
}

// CodeOf maps an error (possibly wrapped) to its Code: CodeOK for nil,
// CodeBadArgs for an error that wraps none of the sentinels.
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	for c := CodeOK + 1; c < numCodes; c++ {
		if errors.Is(err, codeErrs[c]) {
			return c
		}
	}
	return CodeBadArgs
}
