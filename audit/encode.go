package audit

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// The audit line encoder. encoding/json reflects over Event for every line,
// which was most of the audit log's cost per proxied request; appendEvent
// writes the same bytes directly. TestAppendEventMatchesEncodingJSON and
// FuzzAppendEvent compare the two.

// linePool holds the buffers Record encodes into.
var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Marshal returns the normalized event as one JSON line, newline included.
func Marshal(e Event) ([]byte, error) {
	return appendLine(nil, e)
}

// appendLine appends the normalized event as one JSON line to dst.
func appendLine(dst []byte, e Event) ([]byte, error) {
	e = Normalize(e)
	if e.ExitCode != nil || e.WebSocket != nil || e.Learned != nil || e.Time.Year() < 0 || e.Time.Year() > 9999 {
		// Rare events and times json.Marshal refuses take the reflecting
		// encoder.
		b, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("encoding audit event: %w", err)
		}
		return append(append(dst, b...), '\n'), nil
	}
	return append(appendEvent(dst, &e), '\n'), nil
}

// appendEvent appends e as encoding/json renders it (field order, omitempty,
// HTML-safe escaping, sorted map keys); e has no ExitCode, WebSocket or
// Learned, the fields between Fields and Replica.
func appendEvent(b []byte, e *Event) []byte {
	b = append(b, `{"time":"`...)
	b = e.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","event":`...)
	b = appendJSONString(b, e.Event)
	b = append(b, `,"audit_id":`...)
	b = appendJSONString(b, e.AuditID)
	b = appendOptString(b, `,"session_id":`, e.SessionID)
	b = appendOptString(b, `,"connector_fqn":`, e.ConnectorFQN)
	b = appendOptString(b, `,"tool":`, e.Tool)
	b = appendOptString(b, `,"operation":`, e.Operation)
	b = appendOptString(b, `,"action":`, e.Action)
	b = appendOptString(b, `,"method":`, e.Method)
	b = appendOptString(b, `,"host":`, e.Host)
	b = appendOptString(b, `,"path":`, e.Path)
	if e.Status != 0 {
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(e.Status), 10)
	}
	b = appendOptString(b, `,"decision":`, e.Decision)
	b = appendOptString(b, `,"reason":`, e.Reason)
	b = appendOptString(b, `,"credential_kind":`, e.CredentialKind)
	b = append(b, `,"bytes_in":`...)
	b = strconv.AppendInt(b, e.BytesIn, 10)
	b = append(b, `,"bytes_out":`...)
	b = strconv.AppendInt(b, e.BytesOut, 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendInt(b, e.DurationMS, 10)
	b = appendOptString(b, `,"source":`, e.Source)
	if len(e.Fields) > 0 {
		b = append(b, `,"fields":{`...)
		var local [16]string
		keys := local[:0]
		for k := range e.Fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, e.Fields[k])
		}
		b = append(b, '}')
	}
	b = appendOptString(b, `,"replica":`, e.Replica)
	return append(b, '}')
}

func appendOptString(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return appendJSONString(append(b, key...), v)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string exactly as encoding/json
// does with HTML escaping on: <, > and & as \u00XX, control bytes escaped,
// invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
