package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// WebSocket framing (RFC 6455 section 5.2): what the relay needs to read a
// frame header, pass a frame on, and write the frames it originates.

// WebSocket opcodes.
const (
	wsOpContinuation = 0x0
	wsOpText         = 0x1
	wsOpBinary       = 0x2
	wsOpClose        = 0x8
	wsOpPing         = 0x9
	wsOpPong         = 0xA
)

// WebSocket close codes the proxy sends or records (RFC 6455 section 7.4.1).
const (
	wsCloseGoingAway     = 1001
	wsCloseProtocolError = 1002
	wsCloseNoStatus      = 1005
	wsCloseAbnormal      = 1006
)

// wsMaxControl is the largest control frame payload.
const wsMaxControl = 125

// wsHeader is one parsed frame header.
type wsHeader struct {
	fin    bool
	rsv    byte // the three RSV bits, in the low bits
	op     byte
	masked bool
	key    [4]byte
	length int64
}

// isControl reports whether the frame is a close, ping or pong.
func (h *wsHeader) isControl() bool { return h.op&0x8 != 0 }

// errWSProtocol marks a frame that breaks RFC 6455; the relay closes both
// sides with 1002.
var errWSProtocol = errors.New("websocket protocol error")

// readWSHeader reads one frame header from r into h, using buf (at least 14
// bytes) and returning the raw header bytes (a prefix of buf). It refuses
// what no valid peer sends: a reserved opcode, a 64-bit length with the top
// bit set, and a control frame that is fragmented or longer than 125 bytes.
func readWSHeader(r io.Reader, buf []byte, h *wsHeader) ([]byte, error) {
	if _, err := io.ReadFull(r, buf[:2]); err != nil {
		return nil, err
	}
	*h = wsHeader{fin: buf[0]&0x80 != 0, rsv: buf[0] >> 4 & 0x7, op: buf[0] & 0xF, masked: buf[1]&0x80 != 0}
	n := 2
	switch l := buf[1] & 0x7F; l {
	case 126:
		if _, err := io.ReadFull(r, buf[n:n+2]); err != nil {
			return nil, noEOF(err)
		}
		h.length = int64(binary.BigEndian.Uint16(buf[n:]))
		n += 2
	case 127:
		if _, err := io.ReadFull(r, buf[n:n+8]); err != nil {
			return nil, noEOF(err)
		}
		v := binary.BigEndian.Uint64(buf[n:])
		if v>>63 != 0 {
			return nil, fmt.Errorf("%w: frame length has the most significant bit set", errWSProtocol)
		}
		h.length = int64(v)
		n += 8
	default:
		h.length = int64(l)
	}
	if h.masked {
		if _, err := io.ReadFull(r, buf[n:n+4]); err != nil {
			return nil, noEOF(err)
		}
		copy(h.key[:], buf[n:n+4])
		n += 4
	}
	switch {
	case h.op > wsOpBinary && h.op < wsOpClose || h.op > wsOpPong:
		return nil, fmt.Errorf("%w: reserved opcode %#x", errWSProtocol, h.op)
	case h.isControl() && (!h.fin || h.length > wsMaxControl):
		return nil, fmt.Errorf("%w: control frame fragmented or longer than %d bytes", errWSProtocol, wsMaxControl)
	}
	return buf[:n], nil
}

// noEOF turns io.EOF inside a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// appendWSHeader appends a frame header; key nil means unmasked (a server's
// frame), otherwise the payload must be masked with *key by the caller.
func appendWSHeader(dst []byte, fin bool, op byte, length int, key *[4]byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	var b1 byte
	if key != nil {
		b1 = 0x80
	}
	switch {
	case length <= 125:
		dst = append(dst, b0, b1|byte(length))
	case length <= 0xFFFF:
		dst = append(dst, b0, b1|126)
		dst = binary.BigEndian.AppendUint16(dst, uint16(length))
	default:
		dst = append(dst, b0, b1|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(length))
	}
	if key != nil {
		dst = append(dst, key[:]...)
	}
	return dst
}

// maskWS XORs p with key, starting at payload offset pos (masking and
// unmasking are the same operation).
func maskWS(key [4]byte, pos int64, p []byte) {
	for i := range p {
		p[i] ^= key[(pos+int64(i))&3]
	}
}

// closePayload builds a close frame payload: the code and a reason.
func closePayload(code int, reason string) []byte {
	p := binary.BigEndian.AppendUint16(nil, uint16(code))
	return append(p, reason...)
}

// closeCode reads the code of an unmasked close payload; 1005 when absent.
func closeCode(p []byte) int {
	if len(p) < 2 {
		return wsCloseNoStatus
	}
	return int(binary.BigEndian.Uint16(p))
}
