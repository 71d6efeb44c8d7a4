package socks5

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
)

func readFull(r io.Reader, b []byte, what string) error {
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.ErrUnexpectedEOF {
			return fmt.Errorf("%w: truncated %s", ErrMalformed, what)
		}
		return fmt.Errorf("socks5: read %s: %w", what, err)
	}
	return nil
}

// ReadGreeting reads the client's version/method-selection message and
// returns the offered methods.
func ReadGreeting(r io.Reader) ([]byte, error) {
	var hdr [2]byte
	if err := readFull(r, hdr[:], "greeting"); err != nil {
		return nil, err
	}
	if hdr[0] != Version {
		return nil, fmt.Errorf("%w (version byte %d)", ErrVersion, hdr[0])
	}
	if hdr[1] == 0 {
		return nil, fmt.Errorf("%w: greeting offers no methods", ErrMalformed)
	}
	methods := make([]byte, hdr[1])
	if err := readFull(r, methods, "greeting"); err != nil {
		return nil, err
	}
	return methods, nil
}

// ReadUserPass reads an RFC 1929 username/password request. The password
// never appears in an error.
func ReadUserPass(r io.Reader) (user, pass string, err error) {
	var hdr [2]byte
	if err := readFull(r, hdr[:], "authentication"); err != nil {
		return "", "", err
	}
	if hdr[0] != userPassVersion {
		return "", "", fmt.Errorf("%w: username/password version %d", ErrMalformed, hdr[0])
	}
	u := make([]byte, hdr[1])
	if err := readFull(r, u, "username"); err != nil {
		return "", "", err
	}
	var plen [1]byte
	if err := readFull(r, plen[:], "password"); err != nil {
		return "", "", err
	}
	p := make([]byte, plen[0])
	if err := readFull(r, p, "password"); err != nil {
		return "", "", err
	}
	return string(u), string(p), nil
}

// ReadRequest reads a request (any command). An unknown address type is
// ErrAddressTypeNotSupported; an empty domain name or a non-zero reserved
// byte is ErrMalformed.
func ReadRequest(r io.Reader) (Request, error) {
	var hdr [4]byte
	if err := readFull(r, hdr[:], "request"); err != nil {
		return Request{}, err
	}
	if hdr[0] != Version {
		return Request{}, fmt.Errorf("%w: request version %d", ErrMalformed, hdr[0])
	}
	if hdr[2] != 0 {
		return Request{}, fmt.Errorf("%w: reserved byte %d", ErrMalformed, hdr[2])
	}
	req := Request{Command: Command(hdr[1])}
	switch hdr[3] {
	case atypIPv4:
		var b [4]byte
		if err := readFull(r, b[:], "address"); err != nil {
			return Request{}, err
		}
		req.Dest.IP = netip.AddrFrom4(b)
	case atypIPv6:
		var b [16]byte
		if err := readFull(r, b[:], "address"); err != nil {
			return Request{}, err
		}
		req.Dest.IP = netip.AddrFrom16(b)
	case atypDomain:
		var n [1]byte
		if err := readFull(r, n[:], "address"); err != nil {
			return Request{}, err
		}
		if n[0] == 0 {
			return Request{}, fmt.Errorf("%w: empty domain name", ErrMalformed)
		}
		b := make([]byte, n[0])
		if err := readFull(r, b, "address"); err != nil {
			return Request{}, err
		}
		req.Dest.Name = string(b)
	default:
		return Request{}, fmt.Errorf("%w (%d)", ErrAddressTypeNotSupported, hdr[3])
	}
	var port [2]byte
	if err := readFull(r, port[:], "port"); err != nil {
		return Request{}, err
	}
	req.Dest.Port = binary.BigEndian.Uint16(port[:])
	return req, nil
}

// appendAddr appends ATYP, address and port.
func appendAddr(b []byte, a Addr) []byte {
	switch {
	case a.Name != "":
		b = append(b, atypDomain, byte(len(a.Name)))
		b = append(b, a.Name...)
	case a.IP.Is4():
		ip := a.IP.As4()
		b = append(append(b, atypIPv4), ip[:]...)
	case a.IP.Is6():
		ip := a.IP.As16()
		b = append(append(b, atypIPv6), ip[:]...)
	default:
		b = append(b, atypIPv4, 0, 0, 0, 0)
	}
	return binary.BigEndian.AppendUint16(b, a.Port)
}

// AppendReply appends a reply message to b.
func AppendReply(b []byte, code ReplyCode, bound netip.AddrPort) []byte {
	b = append(b, Version, byte(code), 0)
	return appendAddr(b, Addr{IP: bound.Addr().Unmap(), Port: bound.Port()})
}

// AppendRequest appends a request message to b (the client side, used by
// tests and clients). Names longer than 255 bytes are an error.
func AppendRequest(b []byte, req Request) ([]byte, error) {
	if len(req.Dest.Name) > 255 {
		return b, fmt.Errorf("socks5: domain name longer than 255 bytes")
	}
	b = append(b, Version, byte(req.Command), 0)
	return appendAddr(b, req.Dest), nil
}
