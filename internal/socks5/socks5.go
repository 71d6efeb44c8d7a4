package socks5

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"syscall"
)

// Version is the protocol version byte.
const Version = 5

// Authentication methods (RFC 1928 §3).
const (
	MethodNoAuth       byte = 0x00
	MethodUserPass     byte = 0x02
	MethodNoAcceptable byte = 0xff
)

// userPassVersion is the RFC 1929 sub-negotiation version.
const userPassVersion = 1

// Command is a SOCKS request command.
type Command byte

// Commands.
const (
	Connect      Command = 1
	Bind         Command = 2
	UDPAssociate Command = 3
)

func (c Command) String() string {
	switch c {
	case Connect:
		return "connect"
	case Bind:
		return "bind"
	case UDPAssociate:
		return "udp-associate"
	default:
		return "unknown(" + strconv.Itoa(int(c)) + ")"
	}
}

// ReplyCode is the REP field of a reply (RFC 1928 §6).
type ReplyCode byte

// Reply codes.
const (
	Succeeded               ReplyCode = 0
	GeneralFailure          ReplyCode = 1
	NotAllowed              ReplyCode = 2 // connection not allowed by ruleset
	NetworkUnreachable      ReplyCode = 3
	HostUnreachable         ReplyCode = 4
	ConnectionRefused       ReplyCode = 5
	TTLExpired              ReplyCode = 6
	CommandNotSupported     ReplyCode = 7
	AddressTypeNotSupported ReplyCode = 8
)

func (c ReplyCode) String() string {
	switch c {
	case Succeeded:
		return "succeeded"
	case GeneralFailure:
		return "general failure"
	case NotAllowed:
		return "not allowed by ruleset"
	case NetworkUnreachable:
		return "network unreachable"
	case HostUnreachable:
		return "host unreachable"
	case ConnectionRefused:
		return "connection refused"
	case TTLExpired:
		return "TTL expired"
	case CommandNotSupported:
		return "command not supported"
	case AddressTypeNotSupported:
		return "address type not supported"
	default:
		return "unknown(" + strconv.Itoa(int(c)) + ")"
	}
}

// Address types (ATYP).
const (
	atypIPv4   = 1
	atypDomain = 3
	atypIPv6   = 4
)

// Errors returned by Handshake; the client has been answered when one of
// these is returned.
var (
	ErrVersion                 = errors.New("socks5: not a SOCKS5 client")
	ErrNoAcceptableMethod      = errors.New("socks5: no acceptable authentication method")
	ErrAuthFailed              = errors.New("socks5: username/password rejected")
	ErrCommandNotSupported     = errors.New("socks5: command not supported")
	ErrAddressTypeNotSupported = errors.New("socks5: address type not supported")
	ErrMalformed               = errors.New("socks5: malformed message")
)

// Addr is a request's destination: a domain name or an IP, and a port.
type Addr struct {
	Name string     // set for a domain-name destination (ATYP 3); may be an IP literal as sent
	IP   netip.Addr // set for an IPv4 or IPv6 destination
	Port uint16
}

// Host returns the name or the IP as text.
func (a Addr) Host() string {
	if a.Name != "" {
		return a.Name
	}
	return a.IP.String()
}

// String returns host:port ([v6]:port).
func (a Addr) String() string { return net.JoinHostPort(a.Host(), strconv.Itoa(int(a.Port))) }

// Request is a client's request after a successful negotiation.
type Request struct {
	Command Command
	Dest    Addr
	// User is the authenticated username; empty without authentication.
	User string
}

// Auth is the server's authentication policy.
type Auth struct {
	// Check verifies a username and password (RFC 1929); it must compare
	// in constant time (see StaticCredentials). Nil means no authentication:
	// clients must offer "no authentication required".
	Check func(user, pass string) bool
	// AllowNoAuth, with Check set, also accepts clients that offer only "no
	// authentication required". Default false: credentials are required.
	AllowNoAuth bool
}

// StaticCredentials returns a Check that accepts exactly user and pass,
// comparing in constant time.
func StaticCredentials(user, pass string) func(string, string) bool {
	return func(u, p string) bool {
		uok := subtle.ConstantTimeCompare([]byte(u), []byte(user))
		pok := subtle.ConstantTimeCompare([]byte(p), []byte(pass))
		return uok&pok == 1
	}
}

// SelectMethod picks the method for the offered ones under a: username/
// password when Check is set and offered, else no-auth when allowed and
// offered, else MethodNoAcceptable.
func SelectMethod(offered []byte, a Auth) byte {
	has := func(m byte) bool {
		for _, o := range offered {
			if o == m {
				return true
			}
		}
		return false
	}
	switch {
	case a.Check != nil && has(MethodUserPass):
		return MethodUserPass
	case (a.Check == nil || a.AllowNoAuth) && has(MethodNoAuth):
		return MethodNoAuth
	}
	return MethodNoAcceptable
}

// Handshake runs the server side of the negotiation on rw up to the
// request. For a CONNECT request it returns the request without replying:
// the caller must call Reply once. For every error, whatever answer the
// protocol allows has been written; the caller closes the connection. The
// caller bounds the time with the connection's deadline.
func Handshake(rw io.ReadWriter, a Auth) (Request, error) {
	methods, err := ReadGreeting(rw)
	if err != nil {
		return Request{}, err
	}
	method := SelectMethod(methods, a)
	if _, err := rw.Write([]byte{Version, method}); err != nil {
		return Request{}, fmt.Errorf("socks5: write method selection: %w", err)
	}
	var user string
	switch method {
	case MethodNoAcceptable:
		return Request{}, ErrNoAcceptableMethod
	case MethodUserPass:
		u, p, err := ReadUserPass(rw)
		if err != nil {
			return Request{}, err
		}
		ok := a.Check(u, p)
		status := byte(0)
		if !ok {
			status = 1
		}
		if _, err := rw.Write([]byte{userPassVersion, status}); err != nil {
			return Request{}, fmt.Errorf("socks5: write authentication status: %w", err)
		}
		if !ok {
			return Request{}, ErrAuthFailed
		}
		user = u
	}
	req, err := ReadRequest(rw)
	if errors.Is(err, ErrAddressTypeNotSupported) {
		Reply(rw, AddressTypeNotSupported, netip.AddrPort{})
		return Request{}, err
	}
	if errors.Is(err, ErrMalformed) {
		Reply(rw, GeneralFailure, netip.AddrPort{})
		return Request{}, err
	}
	if err != nil {
		return Request{}, err
	}
	req.User = user
	if req.Command != Connect {
		Reply(rw, CommandNotSupported, netip.AddrPort{})
		return req, fmt.Errorf("%w: %s", ErrCommandNotSupported, req.Command)
	}
	return req, nil
}

// Reply writes the reply to a request: code and the bound address (the
// proxy's local address of the outgoing connection; the zero value is sent
// as 0.0.0.0:0).
func Reply(w io.Writer, code ReplyCode, bound netip.AddrPort) error {
	if _, err := w.Write(AppendReply(nil, code, bound)); err != nil {
		return fmt.Errorf("socks5: write reply: %w", err)
	}
	return nil
}

// ReplyCodeFor maps a dial error to the closest reply code: refused,
// network or host unreachable, timeout (TTL expired is what clients show as
// "timed out"), otherwise general failure. Policy denials are the caller's
// to map to NotAllowed.
func ReplyCodeFor(err error) ReplyCode {
	var ne net.Error
	switch {
	case err == nil:
		return Succeeded
	case errors.Is(err, syscall.ECONNREFUSED):
		return ConnectionRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return NetworkUnreachable
	case errors.Is(err, syscall.EHOSTUNREACH):
		return HostUnreachable
	case errors.As(err, &ne) && ne.Timeout():
		return TTLExpired
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return HostUnreachable
	}
	return GeneralFailure
}
