package sniff

import (
	"fmt"
	"strings"
)

const (
	recordTypeHandshake      = 22
	handshakeTypeClientHello = 1
	extServerName            = 0
	maxRecordLen             = 16384 + 2048 // TLSCiphertext limit; plaintext is smaller
	maxHelloLen              = 1 << 16      // bound on the reassembled ClientHello
)

// ParseClientHello returns the SNI host name of the TLS ClientHello at the
// start of b, which may span several handshake records. It returns
// ErrIncomplete while b is a valid prefix, ErrNotTLS when b does not start
// with a ClientHello, ErrNoName for a ClientHello without a (valid) host
// name, and another error for a malformed one.
func ParseClientHello(b []byte) (string, error) {
	var hs []byte // handshake bytes reassembled from the records
	for rest := b; ; {
		if len(hs) >= 4 {
			n := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
			if n > maxHelloLen {
				return "", malformed("ClientHello too long")
			}
			if len(hs) >= 4+n {
				return parseHello(hs[4 : 4+n])
			}
		}
		if len(rest) == 0 {
			return "", ErrIncomplete
		}
		if rest[0] != recordTypeHandshake {
			if len(hs) == 0 {
				return "", ErrNotTLS
			}
			return "", malformed("record of type %d inside the ClientHello", rest[0])
		}
		if len(rest) < 5 {
			if len(rest) >= 2 && rest[1] != 3 {
				return "", ErrNotTLS
			}
			return "", ErrIncomplete
		}
		if rest[1] != 3 {
			return "", ErrNotTLS
		}
		n := int(rest[3])<<8 | int(rest[4])
		if n == 0 || n > maxRecordLen {
			return "", malformed("record length %d", n)
		}
		frag := rest[5:]
		if len(frag) == 0 {
			return "", ErrIncomplete
		}
		if len(frag) > n {
			frag = frag[:n]
		}
		if len(hs) == 0 && frag[0] != handshakeTypeClientHello {
			return "", ErrNotTLS
		}
		if len(hs) == 0 && len(frag) >= 4 { // common case: the whole hello in one record, no copy
			m := int(frag[1])<<16 | int(frag[2])<<8 | int(frag[3])
			if 4+m <= len(frag) {
				return parseHello(frag[4 : 4+m])
			}
		}
		hs = append(hs, frag...)
		rest = rest[5+len(frag):]
		if len(frag) < n { // record not complete yet
			if len(hs) >= 4 {
				m := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
				if m > maxHelloLen {
					return "", malformed("ClientHello too long")
				}
			}
			return "", ErrIncomplete
		}
	}
}

func parseHello(body []byte) (string, error) {
	r := reader(body)
	if !r.skip(2 + 32) { // legacy_version, random
		return "", malformed("short ClientHello")
	}
	if sid, ok := r.vec8(); !ok || len(sid) > 32 {
		return "", malformed("bad session id")
	}
	if cs, ok := r.vec16(); !ok || len(cs) == 0 || len(cs)%2 != 0 {
		return "", malformed("bad cipher suites")
	}
	if cm, ok := r.vec8(); !ok || len(cm) == 0 {
		return "", malformed("bad compression methods")
	}
	if len(r) == 0 {
		return "", ErrNoName // no extensions
	}
	exts, ok := r.vec16()
	if !ok || len(r) != 0 {
		return "", malformed("bad extensions")
	}
	name, seen := "", false
	for len(exts) > 0 {
		typ, ok1 := exts.u16()
		data, ok2 := exts.vec16()
		if !ok1 || !ok2 {
			return "", malformed("bad extension")
		}
		if typ != extServerName {
			continue
		}
		if seen {
			return "", malformed("duplicate server_name extension")
		}
		seen = true
		list, ok := data.vec16()
		if !ok || len(data) != 0 || len(list) == 0 {
			return "", malformed("bad server_name extension")
		}
		for len(list) > 0 {
			nameType, ok1 := list.u8()
			host, ok2 := list.vec16()
			if !ok1 || !ok2 {
				return "", malformed("bad server_name entry")
			}
			if nameType == 0 && name == "" {
				name = string(host)
			}
		}
	}
	if name == "" {
		return "", ErrNoName
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if !validHostname(name) {
		return "", ErrNoName
	}
	return name, nil
}

// reader is a tiny TLS-vector cursor.
type reader []byte

func (r *reader) skip(n int) bool {
	if len(*r) < n {
		return false
	}
	*r = (*r)[n:]
	return true
}

func (r *reader) u8() (byte, bool) {
	if len(*r) < 1 {
		return 0, false
	}
	v := (*r)[0]
	*r = (*r)[1:]
	return v, true
}

func (r *reader) u16() (uint16, bool) {
	if len(*r) < 2 {
		return 0, false
	}
	v := uint16((*r)[0])<<8 | uint16((*r)[1])
	*r = (*r)[2:]
	return v, true
}

func (r *reader) bytes(n int) (reader, bool) {
	if len(*r) < n {
		return nil, false
	}
	v := (*r)[:n]
	*r = (*r)[n:]
	return v, true
}

func (r *reader) vec8() (reader, bool) {
	n, ok := r.u8()
	if !ok {
		return nil, false
	}
	return r.bytes(int(n))
}

func (r *reader) vec16() (reader, bool) {
	n, ok := r.u16()
	if !ok {
		return nil, false
	}
	return r.bytes(int(n))
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("sniff: malformed ClientHello: "+format, args...)
}
