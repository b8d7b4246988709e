package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// FuzzReadWSHeader checks the frame header parser: it never panics, never
// reads past the header, accepts only valid opcodes and control frames, and
// a header it accepts is written back byte for byte by appendWSHeader when
// the length uses its shortest encoding.
func FuzzReadWSHeader(f *testing.F) {
	key := [4]byte{1, 2, 3, 4}
	for _, seed := range [][]byte{
		appendWSHeader(nil, true, wsOpText, 5, nil),
		appendWSHeader(nil, false, wsOpBinary, 300, &key),
		appendWSHeader(nil, true, wsOpContinuation, 70000, nil),
		appendWSHeader(nil, true, wsOpClose, 2, &key),
		{0x89, 0x7E, 0x00, 0x7E},                // ping longer than 125
		{0x08, 0x00},                            // fragmented close
		{0x83, 0x00},                            // reserved opcode
		{0x82, 0x7F, 0x80, 0, 0, 0, 0, 0, 0, 0}, // 64-bit length with the top bit
		{0xF1, 0x00},                            // RSV bits
		{0x81},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var h wsHeader
		var buf [14]byte
		r := bytes.NewReader(data)
		raw, err := readWSHeader(r, buf[:], &h)
		if err != nil {
			if raw != nil {
				t.Fatalf("error %v with raw header %x", err, raw)
			}
			if !errors.Is(err, errWSProtocol) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("unexpected error kind %v", err)
			}
			return
		}
		if consumed := len(data) - r.Len(); consumed != len(raw) || !bytes.Equal(raw, data[:consumed]) {
			t.Fatalf("read %d bytes, raw header %x", consumed, raw)
		}
		if h.op > wsOpBinary && h.op < wsOpClose || h.op > wsOpPong || h.length < 0 ||
			h.isControl() && (!h.fin || h.length > wsMaxControl) {
			t.Fatalf("accepted invalid header %+v", h)
		}
		var k *[4]byte
		if h.masked {
			k = &h.key
		}
		if h.rsv == 0 && minimalLength(raw) {
			if back := appendWSHeader(nil, h.fin, h.op, int(h.length), k); !bytes.Equal(back, raw) {
				t.Fatalf("header %x written back as %x", raw, back)
			}
		}
	})
}

// minimalLength reports whether a header uses the shortest length encoding.
func minimalLength(raw []byte) bool {
	switch raw[1] & 0x7F {
	case 126:
		return binary.BigEndian.Uint16(raw[2:]) > 125
	case 127:
		return binary.BigEndian.Uint64(raw[2:]) > 0xFFFF
	}
	return true
}

// writeCounter records each Write it receives.
type writeCounter struct{ writes [][]byte }

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, append([]byte(nil), p...))
	return len(p), nil
}

// TestWSPeerWriteCoalesces shows a small frame goes out in one Write (one
// TLS record, one system call) and a large one as header then payload.
func TestWSPeerWriteCoalesces(t *testing.T) {
	for _, tc := range []struct {
		name   string
		size   int
		writes int
	}{
		{"empty", 0, 1},
		{"small", 20, 1},
		{"largest coalesced", wsCoalesceMax - 4, 1},
		{"large", wsCoalesceMax, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &writeCounter{}
			p := &wsPeer{w: w}
			payload := bytes.Repeat([]byte("x"), tc.size)
			hdr := appendWSHeader(nil, true, wsOpBinary, len(payload), nil)
			if err := p.write(hdr, payload); err != nil {
				t.Fatal(err)
			}
			if len(w.writes) != tc.writes {
				t.Fatalf("write(%d-byte frame) made %d Writes, want %d", tc.size, len(w.writes), tc.writes)
			}
			if got := bytes.Join(w.writes, nil); !bytes.Equal(got, append(hdr, payload...)) {
				t.Fatalf("write(%d-byte frame) sent %d bytes, want the header and payload", tc.size, len(got))
			}
		})
	}
}
