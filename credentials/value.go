package credentials

import (
	"fmt"
	"log/slog"

	"go.uber.org/zap/zapcore"
)

// redacted is what every rendering of a Value prints.
const redacted = "[REDACTED]"

// Value is a secret. Every way of printing or encoding it (fmt verbs,
// encoding/json, encoding.TextMarshaler, zap, slog) yields "[REDACTED]"; only
// Reveal returns the bytes. The zero Value is empty.
//
// The secret is captured by a closure: reflection-based printing of a struct
// that holds a Value in an unexported field (where fmt cannot call Format,
// including its bad-verb fallback) shows a function address, never the
// bytes.
type Value struct {
	get func() string
}

// NewValue wraps s as a secret.
func NewValue(s string) Value {
	return Value{get: func() string { return s }}
}

// Reveal returns the secret. Only the code that puts the secret on the wire
// calls it; never log, print or wrap its result in an error.
func (v Value) Reveal() string {
	if v.get == nil {
		return ""
	}
	return v.get()
}

// Len returns the length of the secret in bytes.
func (v Value) Len() int { return len(v.Reveal()) }

// IsZero reports whether the Value holds no secret.
func (v Value) IsZero() bool { return v.Len() == 0 }

// Equal reports whether v and o hold the same secret.
func (v Value) Equal(o Value) bool { return v.Reveal() == o.Reveal() }

// String returns "[REDACTED]".
func (Value) String() string { return redacted }

// GoString returns "[REDACTED]" (the %#v verb).
func (Value) GoString() string { return redacted }

// Format renders "[REDACTED]" for every verb and flag; %q quotes it.
func (Value) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		_, _ = fmt.Fprintf(f, "%q", redacted)
		return
	}
	_, _ = f.Write([]byte(redacted))
}

// MarshalJSON returns the JSON string "[REDACTED]".
func (Value) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText returns "[REDACTED]".
func (Value) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// MarshalLogObject makes zap.Object and zap.Any log {"value": "[REDACTED]"}.
func (Value) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("value", redacted)
	return nil
}

// LogValue makes slog log "[REDACTED]".
func (Value) LogValue() slog.Value { return slog.StringValue(redacted) }

var (
	_ fmt.Stringer            = Value{}
	_ fmt.GoStringer          = Value{}
	_ fmt.Formatter           = Value{}
	_ zapcore.ObjectMarshaler = Value{}
	_ slog.LogValuer          = Value{}
)
