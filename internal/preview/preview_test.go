package preview

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"unicode/utf8"
)

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func names(fs []Field) string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Name
	}
	return strings.Join(out, ",")
}

func TestNewBody(t *testing.T) {
	hints := Hints{Order: []string{"to", "subject"}, Labels: map[string]Label{"to": {Text: "Recipients"}, "body": {Multiline: true}}}
	for _, tc := range []struct {
		name, ct, data string
		kind, fields   string // kind and field names in order
		excerpt        string
	}{
		{"json, declared first", "application/json", `{"z":1,"subject":"s","to":"a@b.test","body":"x"}`, KindJSON, "to,subject,body,z", ""},
		{"json suffix type", "application/merge-patch+json; charset=utf-8", `{"a":true}`, KindJSON, "a", ""},
		{"json array is text", "application/json", `[1,2]`, KindText, "", "[1,2]"},
		{"two json values are text", "application/json", `{"a":1}{"b":2}`, KindText, "", `{"a":1}{"b":2}`},
		{"form", "application/x-www-form-urlencoded", "to=a%40b.test&to=c%40d.test&x=1", KindForm, "to,x", ""},
		{"text", "text/plain", "hello\x1b[2Jworld", KindText, "", `hello\u001b[2Jworld`},
		{"binary", "image/png", "\x89PNG\x00\x01", KindBinary, "", "89504e470001"},
		{"untyped with NUL is binary", "", "ab\x00", KindBinary, "", "616200"},
		{"empty", "application/json", "", KindNone, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBody(tc.ct, []byte(tc.data), int64(len(tc.data)), digest([]byte(tc.data)), hints)
			if b.Kind != tc.kind || names(b.Fields) != tc.fields || b.Excerpt != tc.excerpt {
				t.Fatalf("NewBody(%q, %q) = kind %s fields %q excerpt %q, want %s %q %q", tc.ct, tc.data, b.Kind, names(b.Fields), b.Excerpt, tc.kind, tc.fields, tc.excerpt)
			}
			if b.SHA256 != digest([]byte(tc.data)) || b.Size != int64(len(tc.data)) {
				t.Errorf("NewBody digest/size = %s/%d", b.SHA256, b.Size)
			}
		})
	}
	b := NewBody("application/json", []byte(`{"to":"a@b.test","body":"one\ntwo"}`), 33, "x", hints)
	if b.Fields[0].Label != "Recipients" || !b.Fields[0].Primary || !b.Fields[1].Multiline || b.Fields[1].Primary {
		t.Errorf("labels and primary marks = %+v", b.Fields)
	}
	if big := NewBody("application/json", nil, MaxBody+1, "x", hints); big.Kind != KindTooLarge || big.Fields != nil || big.Excerpt != "" {
		t.Errorf("a body over MaxBody = %+v, want size and digest only", big)
	}
}

func TestNewFieldCutsAtARune(t *testing.T) {
	v := strings.Repeat("é", MaxValue) // two bytes each
	f := NewField("x", v)
	if !f.Truncated || len(f.Value) > MaxValue || !utf8.ValidString(f.Value) {
		t.Errorf("NewField of %d bytes = %d bytes, truncated %v, valid %v", len(v), len(f.Value), f.Truncated, utf8.ValidString(f.Value))
	}
	// Bidi overrides and C1 controls cannot hide or reorder text.
	if got := NewField("x", "a\u202eb\u0085c\xffd").Value; got != `a\u202eb\u0085c\xffd` {
		t.Errorf("NewField escapes = %q", got)
	}
}

func TestRender(t *testing.T) {
	data := []byte(`{"name":"Q2","parents":["f1"],"owner":{"login":"ann"}}`)
	fs, ok := Render(data, []string{"Folders", "Name", "Owner", "Size"}, []string{"parents", "name", "owner.login", "size"})
	if !ok || len(fs) != 4 {
		t.Fatalf("Render = %+v, %v", fs, ok)
	}
	want := []string{`Folders=["f1"]`, "Name=Q2", "Owner=ann", "Size=(absent)"}
	for i, f := range fs {
		if got := f.Label + "=" + f.Value; got != want[i] || !f.Primary {
			t.Errorf("Render[%d] = %s (primary %v), want %s", i, got, f.Primary, want[i])
		}
	}
	if _, ok := Render([]byte("<html>"), []string{"A"}, []string{"a"}); ok {
		t.Errorf("Render of HTML succeeded")
	}
}

func TestDirectiveRoundTrip(t *testing.T) {
	d := Directive{Tool: "google-api", Operation: "get_file_metadata", Args: map[string]string{"file_id": "{path.file_id}"},
		Render: map[string]string{"Name": "name"}, Labels: map[string]Label{"file_id": {Text: "File ID"}}}
	got, err := DecodeDirective(d.Encode())
	if err != nil || got.Operation != d.Operation || got.Args["file_id"] != "{path.file_id}" || got.Labels["file_id"].Text != "File ID" {
		t.Errorf("DecodeDirective(Encode(d)) = %+v, %v", got, err)
	}
	for _, bad := range []string{"!!", "bm90IGpzb24"} {
		if _, err := DecodeDirective(bad); err == nil || !strings.HasPrefix(err.Error(), "decoding the preview directive: ") {
			t.Errorf("DecodeDirective(%q) error = %v", bad, err)
		}
	}
}

// FuzzNewBody: any body previews without panicking, within its bounds, as
// valid UTF-8 without raw control characters, and keeps the digest given.
func FuzzNewBody(f *testing.F) {
	f.Add("application/json", []byte(`{"to":"a@b.test","body":"x\ny"}`))
	f.Add("application/x-www-form-urlencoded", []byte("a=1&a=2&b=%zz"))
	f.Add("text/plain", []byte("hi\x1b[31m\u202e"))
	f.Add("", []byte("\x00\xff"))
	f.Add("application/json; charset=utf-8", []byte(`{"a":{"b":[1,2,{"c":null}]}}`))
	f.Fuzz(func(t *testing.T, ct string, data []byte) {
		if len(data) > MaxBody {
			return
		}
		b := NewBody(ct, data, int64(len(data)), "sum", Hints{Order: []string{"to", "a"}})
		if b.SHA256 != "sum" || b.Size != int64(len(data)) || len(b.Fields) > MaxFields || len(b.Excerpt) > 8*ExcerptBytes {
			t.Fatalf("NewBody(%q, %q) = %+v", ct, data, b)
		}
		check := func(s string) {
			if !utf8.ValidString(s) {
				t.Fatalf("preview text %q is not valid UTF-8", s)
			}
			for _, r := range s {
				if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0) || (r >= 0x202a && r <= 0x202e) {
					t.Fatalf("preview text %q holds a raw control character %U", s, r)
				}
			}
		}
		check(b.Excerpt)
		for _, fl := range b.Fields {
			check(fl.Name)
			check(fl.Value)
			if len(fl.Value) > MaxValue+8 {
				t.Fatalf("field %q value is %d bytes", fl.Name, len(fl.Value))
			}
		}
		if bytes.Contains(data, []byte("\x00")) && b.Kind == KindText && !utf8.Valid(data) {
			t.Fatalf("invalid UTF-8 previewed as text")
		}
	})
}

// FuzzDecodeDirective: any header value decodes or fails cleanly, and a
// decoded directive encodes back to one that decodes the same.
func FuzzDecodeDirective(f *testing.F) {
	f.Add(Directive{Operation: "files.get", Args: map[string]string{"id": "{path.id}"}}.Encode())
	f.Add("")
	f.Add("e30")
	f.Fuzz(func(t *testing.T, v string) {
		d, err := DecodeDirective(v)
		if err != nil {
			return
		}
		again, err := DecodeDirective(d.Encode())
		if err != nil || again.Operation != d.Operation || again.Tool != d.Tool || len(again.Args) != len(d.Args) || len(again.Render) != len(d.Render) {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", v, again, err, d)
		}
	})
}
