package proxyauth

import (
	"bytes"
	"crypto/hmac"
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
	"unicode/utf16"

	"golang.org/x/crypto/md4"

	"egret.io/egret/internal/credentials"
)

// The published values of [MS-NLMP] section 4.2 (4.2.1 common values,
// 4.2.4 NTLMv2 authentication).
const (
	vecUser     = "User"
	vecDomain   = "Domain"
	vecPassword = "Password"
	vecServer   = "Server"
	// Section 4.2.1.
	vecServerChallenge = "0123456789abcdef"
	vecClientChallenge = "aaaaaaaaaaaaaaaa"
	// Section 3.3.1 / 4.2.2.1.2: NTOWFv1("Password").
	vecNTHash = "a4f49c406510bdcab6824ee7c30fd852"
	// Section 4.2.4.1.1: NTOWFv2("Password", "User", "Domain").
	vecNTOWFv2 = "0c868a403bfd7a93a3001ef22ef02e3f"
	// Section 4.2.4.2.1: LMv2 response.
	vecLMv2 = "86c35097ac9cec102554764a57cccc19aaaaaaaaaaaaaaaa"
	// Section 4.2.4.2.2: NTProofStr, of the temp below.
	vecNTProofStr = "68cd0ab851e51c96aabc927bebef6a1c"
	// Section 4.2.4: the CHALLENGE message's TargetInfo (MsvAvNbDomainName
	// "Domain", MsvAvNbComputerName "Server", MsvAvEOL).
	vecTargetInfo = "02000c0044006f006d00610069006e0001000c0053006500720076006500720000000000"
	// Section 4.2.4.3: the CHALLENGE message's flags (0xe28a8233: 56, key
	// exchange, 128, version, target info, extended session security,
	// target type server, always sign, NTLM, seal, sign, OEM, Unicode).
	vecChallengeFlags = 0xe28a8233
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func utf16le(s string) []byte {
	var b []byte
	for _, r := range utf16.Encode([]rune(s)) {
		b = binary.LittleEndian.AppendUint16(b, r)
	}
	return b
}

// refNTOWFv2 is the test's own NTOWFv2 (section 3.3.2), checked against
// the published value before it checks go-ntlmssp.
func refNTOWFv2(password, user, domain string) []byte {
	h := md4.New()
	h.Write(utf16le(password))
	mac := hmac.New(md5.New, h.Sum(nil))
	mac.Write(utf16le(strings.ToUpper(user) + domain))
	return mac.Sum(nil)
}

func refHMAC(key []byte, data ...[]byte) []byte {
	mac := hmac.New(md5.New, key)
	for _, d := range data {
		mac.Write(d)
	}
	return mac.Sum(nil)
}

// vecTemp is section 4.2.4.2.2's temp: Responserversion, HiResponserversion,
// Z(6), Time (0), ClientChallenge, Z(4), ServerName (the TargetInfo), Z(4).
func vecTemp(t *testing.T) []byte {
	temp := []byte{1, 1, 0, 0, 0, 0, 0, 0}
	temp = append(temp, make([]byte, 8)...)
	temp = append(temp, unhex(t, vecClientChallenge)...)
	temp = append(temp, 0, 0, 0, 0)
	temp = append(temp, unhex(t, vecTargetInfo)...)
	return append(temp, 0, 0, 0, 0)
}

// vecChallenge is the CHALLENGE message of section 4.2.4.3, built from its
// fields: TargetName "Server" (Unicode), the flags, the server challenge,
// the TargetInfo and the version 6.0.6000 NTLM revision 15.
func vecChallenge(t testing.TB) []byte {
	name, info := utf16le(vecServer), unhex(t, vecTargetInfo)
	b := append([]byte{}, ntlmSignature...)
	b = binary.LittleEndian.AppendUint32(b, 2)
	const payload = 56
	b = binary.LittleEndian.AppendUint16(b, uint16(len(name)))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(name)))
	b = binary.LittleEndian.AppendUint32(b, payload)
	b = binary.LittleEndian.AppendUint32(b, vecChallengeFlags)
	b = append(b, unhex(t, vecServerChallenge)...)
	b = append(b, make([]byte, 8)...) // reserved
	b = binary.LittleEndian.AppendUint16(b, uint16(len(info)))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(info)))
	b = binary.LittleEndian.AppendUint32(b, payload+uint32(len(name)))
	b = append(b, 6, 0, 0x70, 0x17, 0, 0, 0, 0x0f)
	if len(b) != payload {
		t.Fatalf("challenge header is %d bytes", len(b))
	}
	b = append(b, name...)
	return append(b, info...)
}

// TestNTLMReference checks the test's reference functions against the
// published values, so that they may judge go-ntlmssp's output below.
func TestNTLMReference(t *testing.T) {
	h := md4.New()
	h.Write(utf16le(vecPassword))
	if got := hex.EncodeToString(h.Sum(nil)); got != vecNTHash {
		t.Errorf("NTOWFv1 = %s, want %s", got, vecNTHash)
	}
	key := refNTOWFv2(vecPassword, vecUser, vecDomain)
	if got := hex.EncodeToString(key); got != vecNTOWFv2 {
		t.Fatalf("NTOWFv2 = %s, want %s", got, vecNTOWFv2)
	}
	lm := refHMAC(key, unhex(t, vecServerChallenge), unhex(t, vecClientChallenge))
	if got := hex.EncodeToString(lm) + vecClientChallenge; got != vecLMv2 {
		t.Errorf("LMv2 = %s, want %s", got, vecLMv2)
	}
	proof := refHMAC(key, unhex(t, vecServerChallenge), vecTemp(t))
	if got := hex.EncodeToString(proof); got != vecNTProofStr {
		t.Errorf("NTProofStr = %s, want %s", got, vecNTProofStr)
	}
}

// field reads an [MS-NLMP] varField (Len, MaxLen, Offset) at off of msg.
func field(t *testing.T, msg []byte, off int) []byte {
	t.Helper()
	n := int(binary.LittleEndian.Uint16(msg[off:]))
	at := int(binary.LittleEndian.Uint32(msg[off+4:]))
	if at+n > len(msg) {
		t.Fatalf("field at %d points past the message", off)
	}
	return msg[at : at+n]
}

// TestNTLMAgainstMSNLMP answers the CHALLENGE message of [MS-NLMP] 4.2.4.3
// as user Domain\User with password "Password" and checks the
// AUTHENTICATE message: its NTLMv2 response is the one the published
// NTOWFv2 gives for its own client challenge and time (which are random,
// so the published NTProofStr itself cannot appear), it carries the
// server's TargetInfo, the user and domain, and no key exchange.
func TestNTLMAgainstMSNLMP(t *testing.T) {
	h := &Handshake{Scheme: NTLM, Cred: credentials.New(vecDomain+`\`+vecUser, vecPassword)}
	first, err := h.First()
	if err != nil {
		t.Fatal(err)
	}
	t1, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(first, "NTLM "))
	if err != nil || !strings.HasPrefix(first, "NTLM ") {
		t.Fatalf("first = %q, %v", first, err)
	}
	if !bytes.Equal(t1[:8], ntlmSignature) || binary.LittleEndian.Uint32(t1[8:]) != 1 {
		t.Fatalf("Type 1 message has the wrong header: % x", t1[:12])
	}
	if f := binary.LittleEndian.Uint32(t1[12:]); f&0x201 != 0x201 || f&flagLMKey != 0 {
		t.Errorf("Type 1 flags %#x: want NTLM and Unicode, no LM key", f)
	}

	chal := vecChallenge(t)
	next, err := h.Next([]string{`Basic realm="corp"`, "NTLM " + base64.StdEncoding.EncodeToString(chal)})
	if err != nil {
		t.Fatal(err)
	}
	t3, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(next, "NTLM "))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(t3[:8], ntlmSignature) || binary.LittleEndian.Uint32(t3[8:]) != 3 {
		t.Fatalf("Type 3 message has the wrong header: % x", t3[:12])
	}
	// AUTHENTICATE_MESSAGE fields (section 2.2.1.3).
	nt := field(t, t3, 20)
	if d, u := field(t, t3, 28), field(t, t3, 36); !bytes.Equal(d, utf16le(vecDomain)) || !bytes.Equal(u, utf16le(vecUser)) {
		t.Errorf("domain %q, user %q", d, u)
	}
	if f := binary.LittleEndian.Uint32(t3[60:]); f&flagKeyExch != 0 {
		t.Errorf("Type 3 flags %#x ask for a key exchange egret does not do", f)
	}
	if len(nt) < 16+28+len(unhex(t, vecTargetInfo)) {
		t.Fatalf("NtChallengeResponse is %d bytes", len(nt))
	}
	proof, temp := nt[:16], nt[16:]
	if !bytes.Equal(temp[:8], []byte{1, 1, 0, 0, 0, 0, 0, 0}) {
		t.Errorf("temp header % x", temp[:8])
	}
	if !bytes.Equal(temp[28:28+len(unhex(t, vecTargetInfo))], unhex(t, vecTargetInfo)) {
		t.Errorf("temp does not carry the server's TargetInfo")
	}
	want := refHMAC(unhex(t, vecNTOWFv2), unhex(t, vecServerChallenge), temp)
	if !bytes.Equal(proof, want) {
		t.Errorf("NTProofStr = %x, want %x (HMAC-MD5 of the published NTOWFv2 over the server challenge and temp)", proof, want)
	}
	if strings.Contains(next, vecPassword) || bytes.Contains(t3, utf16le(vecPassword)) || bytes.Contains(t3, unhex(t, vecNTHash)) {
		t.Error("the AUTHENTICATE message carries the password or its hash")
	}

	// After the Type 3, a 407 is a refusal of the credential.
	_, err = h.Next([]string{"NTLM"})
	var pe *Error
	if !asError(err, &pe) || pe.Kind != Refused || !pe.CredentialRefused() {
		t.Fatalf("407 after the Type 3 = %v, want a refusal", err)
	}
	if !strings.Contains(pe.Detail, `Domain\User`) || strings.Contains(pe.Detail, vecPassword) {
		t.Errorf("refusal detail %q: want the user, never the password", pe.Detail)
	}
}

func asError(err error, pe **Error) bool {
	e, ok := err.(*Error)
	*pe = e
	return ok
}

func TestNTLMChallengeRefused(t *testing.T) {
	good := vecChallenge(t)
	lm := bytes.Clone(good)
	binary.LittleEndian.PutUint32(lm[20:], vecChallengeFlags|flagLMKey)
	type1 := bytes.Clone(good)
	binary.LittleEndian.PutUint32(type1[8:], 1)
	// TargetInfo within the message but without its MsvAvEOL.
	badInfo := bytes.Clone(good[:len(good)-4])
	binary.LittleEndian.PutUint16(badInfo[40:], uint16(len(badInfo)-68))
	binary.LittleEndian.PutUint16(badInfo[42:], uint16(len(badInfo)-68))
	tests := []struct {
		name       string
		challenges []string
		kind       Kind
		detail     string
	}{
		{"not-offered", []string{`Basic realm="corp"`, "Negotiate"}, NotOffered, "offers Basic, Negotiate"},
		{"bare-ntlm", []string{"NTLM"}, BadChallenge, "NTLM challenge refused"},
		{"not-base64", []string{"NTLM ***"}, BadChallenge, "not base64"},
		{"not-ntlm", []string{"NTLM " + base64.StdEncoding.EncodeToString([]byte("hello, this is not an NTLM message"))}, BadChallenge, "not an NTLM message"},
		{"wrong-type", []string{"NTLM " + base64.StdEncoding.EncodeToString(type1)}, BadChallenge, "message type 1"},
		{"ntlmv1", []string{"NTLM " + base64.StdEncoding.EncodeToString(lm)}, BadChallenge, "NTLMv1"},
		{"truncated", []string{"NTLM " + base64.StdEncoding.EncodeToString(good[:24])}, BadChallenge, "not an NTLM message"},
		{"broken-target-info", []string{"NTLM " + base64.StdEncoding.EncodeToString(badInfo)}, BadChallenge, "NTLM challenge refused"},
		{"huge", []string{"NTLM " + strings.Repeat("A", 64<<10)}, BadChallenge, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &Handshake{Scheme: NTLM, Cred: credentials.New("alice", "s3cret")}
			if _, err := h.First(); err != nil {
				t.Fatal(err)
			}
			_, err := h.Next(tt.challenges)
			var pe *Error
			if !asError(err, &pe) || pe.Kind != tt.kind || !strings.Contains(pe.Detail, tt.detail) {
				t.Fatalf("err = %v, want %s with %q", err, tt.kind, tt.detail)
			}
			if strings.Contains(pe.Detail, "s3cret") {
				t.Errorf("detail holds the password: %s", pe.Detail)
			}
			if pe.Type() != "upstream_auth_required" {
				t.Errorf("type %s", pe.Type())
			}
		})
	}
}

// TestNTLMOldStyleChallenge answers a challenge in the shape Squid's
// ntlm_fake_auth sends: 40 bytes of header (no TargetInfo fields), the
// target name right after them with a bogus offset, TargetInfo flagged.
func TestNTLMOldStyleChallenge(t *testing.T) {
	chal, _ := hex.DecodeString("4e544c4d535350000200000009000900aeaaaaaa078288a2b80c70a9e200e0d20000000000003a00574f524b47524f5550")
	h := &Handshake{Scheme: NTLM, Cred: credentials.New("alice", "pw")}
	h.First()
	v, err := h.Next([]string{"NTLM " + base64.StdEncoding.EncodeToString(chal)})
	if err != nil || !strings.HasPrefix(v, "NTLM ") {
		t.Fatalf("%q, %v", v, err)
	}
}

// FuzzNTLMChallenge feeds arbitrary Type 2 messages to the answer: it must
// fail cleanly or answer with a Type 3 message, never panic, never with
// the password in an error.
func FuzzNTLMChallenge(f *testing.F) {
	f.Add([]byte(nil))
	f.Add(ntlmSignature)
	f.Add(vecChallenge(f))
	f.Fuzz(func(t *testing.T, chal []byte) {
		h := &Handshake{Scheme: NTLM, Cred: credentials.New(`CORP\alice`, "s3cret-pw")}
		h.First()
		v, err := h.Next([]string{"NTLM " + base64.StdEncoding.EncodeToString(chal)})
		if err != nil {
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("error holds the password: %v", err)
			}
			return
		}
		if !strings.HasPrefix(v, "NTLM ") {
			t.Fatalf("answer %q", v)
		}
	})
}
