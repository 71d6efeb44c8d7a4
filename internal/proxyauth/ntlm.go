package proxyauth

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/Azure/go-ntlmssp"

	"egret.io/egret/internal/credentials"
)

// NTLM over HTTP ([MS-NTHT]): the first request carries the NEGOTIATE
// message (Type 1), the proxy's 407 the CHALLENGE (Type 2), and the next
// request on the same connection the AUTHENTICATE message (Type 3). The
// messages and the NTLMv2 response are go-ntlmssp's.

// ntlmSignature begins every NTLM message.
var ntlmSignature = []byte("NTLMSSP\x00")

// Negotiate flags of [MS-NLMP] section 2.2.2.5 that egret looks at.
const (
	flagLMKey      = 1 << 7
	flagTargetInfo = 1 << 23
	flagKeyExch    = 1 << 30
)

// maxChallenge bounds the Type 2 message egret decodes.
const maxChallenge = 16 << 10

func ntlmNegotiate() (string, error) {
	msg, err := ntlmssp.NewNegotiateMessage("", "")
	if err != nil {
		return "", &Error{Kind: Config, Detail: "NTLM: cannot build the negotiate message", Err: err}
	}
	return "NTLM " + base64.StdEncoding.EncodeToString(msg), nil
}

// ntlmAuthenticate answers the challenge token (base64) with the Type 3
// message for cred. The user may be "DOMAIN\user", "user@domain" or
// "user".
func ntlmAuthenticate(token string, cred *credentials.Credential) (string, error) {
	if len(token) > base64.StdEncoding.EncodedLen(maxChallenge) {
		return "", &Error{Kind: BadChallenge, Detail: "NTLM challenge refused: it is larger than 16 KiB"}
	}
	chal, err := base64.StdEncoding.DecodeString(token)
	if err != nil {
		return "", &Error{Kind: BadChallenge, Detail: "NTLM challenge refused: it is not base64", Err: err}
	}
	chal, err = prepareChallenge(chal)
	if err != nil {
		return "", &Error{Kind: BadChallenge, Detail: "NTLM challenge refused: " + err.Error()}
	}
	if cred.Password == "" {
		return "", &Error{Kind: Config, Detail: fmt.Sprintf("NTLM needs a password for %s", cred)}
	}
	msg, err := ntlmssp.NewAuthenticateMessage(chal, cred.User, cred.Password, nil)
	if err != nil {
		// go-ntlmssp's errors describe the message, never the password.
		return "", &Error{Kind: BadChallenge, Detail: "NTLM challenge refused: " + err.Error(), Err: err}
	}
	return "NTLM " + base64.StdEncoding.EncodeToString(msg), nil
}

// prepareChallenge checks a CHALLENGE message and rewrites it in the
// canonical form go-ntlmssp reads: the server challenge, the flags and the
// TargetInfo (when flagged), without the TargetName (NTLMv2 does not use
// it; some servers, Squid's ntlm_fake_auth among them, send it with a
// bogus offset), with TargetInfo only when it lies within the message,
// and without the key-exchange flag: egret neither signs nor
// seals (HTTP does not), so an exchanged session key would be unused, and
// go-ntlmssp refuses a challenge that asks for it; the AUTHENTICATE message
// then says no key was exchanged, as [MS-NLMP] allows. A challenge that
// asks for the LM session key (NTLMv1) is refused: egret answers only with
// NTLMv2.
func prepareChallenge(b []byte) ([]byte, error) {
	if len(b) < 32 || !bytes.Equal(b[:8], ntlmSignature) {
		return nil, errors.New("it is not an NTLM message")
	}
	if t := binary.LittleEndian.Uint32(b[8:12]); t != 2 {
		return nil, fmt.Errorf("message type %d, want 2 (CHALLENGE)", t)
	}
	flags := binary.LittleEndian.Uint32(b[20:24])
	if flags&flagLMKey != 0 {
		return nil, errors.New("it asks for NTLMv1 (the LM session key); egret speaks NTLMv2 only")
	}
	var info []byte
	if flags&flagTargetInfo != 0 && len(b) >= 48 {
		n, off := uint64(binary.LittleEndian.Uint16(b[40:42])), uint64(binary.LittleEndian.Uint32(b[44:48]))
		if off+n <= uint64(len(b)) && off >= 48 {
			info = b[off : off+n]
		}
	}
	if info == nil {
		// None, or fields that point outside the message (ntlm_fake_auth
		// flags TargetInfo and sends the target name where it would be):
		// the NTLMv2 response is then made without one.
		flags &^= flagTargetInfo
	}
	const header = 48
	out := make([]byte, header, header+len(info))
	copy(out, b[:12])                                             // signature, type
	binary.LittleEndian.PutUint32(out[16:20], header)             // an empty TargetName
	binary.LittleEndian.PutUint32(out[20:24], flags&^flagKeyExch) // flags
	copy(out[24:32], b[24:32])                                    // server challenge
	binary.LittleEndian.PutUint16(out[40:42], uint16(len(info)))
	binary.LittleEndian.PutUint16(out[42:44], uint16(len(info)))
	binary.LittleEndian.PutUint32(out[44:48], header)
	return append(out, info...), nil
}
