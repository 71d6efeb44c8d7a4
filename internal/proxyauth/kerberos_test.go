package proxyauth

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jcmturner/gokrb5/v8/iana/errorcode"
	"github.com/jcmturner/gokrb5/v8/krberror"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"

	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/proxystatus"
)

// kdcErr is a KDC's KRB-ERROR as gokrb5's AS exchange reports it.
func kdcErr(code int32) error {
	e := messages.NewKRBError(types.PrincipalName{}, "CORP.EXAMPLE", code, "")
	return krberror.Errorf(e, krberror.KDCError, "AS Exchange Error: kerberos error response from KDC")
}

// TestKerberosErrorMapping covers the failures the KDC tests cannot all
// produce (a locked account, an expired password, a KDC that times out):
// each is named, typed and never holds the password.
func TestKerberosErrorMapping(t *testing.T) {
	cred := credentials.New("alice@CORP.EXAMPLE", "s3cret")
	tests := []struct {
		name   string
		err    error
		kind   Kind
		typ    proxystatus.Type
		status int
		detail string
	}{
		{"preauth-failed", kdcErr(errorcode.KDC_ERR_PREAUTH_FAILED), KDCRefused, proxystatus.UpstreamAuthRequired, 502, "wrong password"},
		{"bad-integrity", kdcErr(errorcode.KRB_AP_ERR_BAD_INTEGRITY), KDCRefused, proxystatus.UpstreamAuthRequired, 502, "wrong password"},
		{"unknown-client", kdcErr(errorcode.KDC_ERR_C_PRINCIPAL_UNKNOWN), KDCRefused, proxystatus.UpstreamAuthRequired, 502, "does not know alice@CORP.EXAMPLE"},
		{"revoked", kdcErr(errorcode.KDC_ERR_CLIENT_REVOKED), KDCRefused, proxystatus.UpstreamAuthRequired, 502, "locked or disabled"},
		{"expired", kdcErr(errorcode.KDC_ERR_KEY_EXPIRED), KDCRefused, proxystatus.UpstreamAuthRequired, 502, "has expired"},
		{"no-ticket", kdcErr(errorcode.KDC_ERR_S_PRINCIPAL_UNKNOWN), NoTicket, proxystatus.ProxyConfigurationErr, 502, "no ticket"},
		{"skew-kdc", kdcErr(errorcode.KRB_AP_ERR_SKEW), ClockSkew, proxystatus.ProxyConfigurationErr, 502, "clock skew"},
		{"skew-client", krberror.NewErrorf(krberror.KRBMsgError, "clock skew with KDC too large. Greater than 300 seconds"), ClockSkew, proxystatus.ProxyConfigurationErr, 502, "clock skew"},
		{"wrong-realm", kdcErr(errorcode.KDC_ERR_WRONG_REALM), WrongRealm, proxystatus.ProxyConfigurationErr, 502, "wrong realm CORP.EXAMPLE"},
		{"kdc-refused", krberror.Errorf(errors.New("failed to communicate with KDC. Attempts made with TCP (dial tcp 10.0.0.1:88: connect: connection refused)"), krberror.NetworkingError, "AS Exchange Error: failed sending AS_REQ to KDC"),
			KDCUnreachable, proxystatus.ConnectionRefused, 502, "KDC unreachable: no KDC of realm CORP.EXAMPLE answered (connection refused)"},
		{"kdc-timeout", krberror.Errorf(errors.New("error sending to a KDC: error sneding to 10.0.0.1:88: read tcp: i/o timeout"), krberror.NetworkingError, "AS Exchange Error: failed sending AS_REQ to KDC"),
			KDCUnreachable, proxystatus.ConnectionTimeout, 504, "(i/o timeout)"},
		{"keytab-without-key", fmt.Errorf("matching key not found in keytab. Looking for %q realm: CORP.EXAMPLE", "alice"), Config, proxystatus.ProxyConfigurationErr, 502, "the keytab holds no key"},
		{"other", krberror.NewErrorf(krberror.EncodingError, "something new"), KDCRefused, proxystatus.UpstreamAuthRequired, 502, "something new"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := classifyKerberos(tt.err, cred, "HTTP/proxy.corp.example")
			if e.Kind != tt.kind || e.Type() != tt.typ || e.Status() != tt.status || !strings.Contains(e.Detail, tt.detail) {
				t.Fatalf("%v → %s %s %d %q, want %s %s %d %q", tt.err, e.Kind, e.Type(), e.Status(), e.Detail, tt.kind, tt.typ, tt.status, tt.detail)
			}
			if strings.Contains(e.Detail, "s3cret") || e.Err == nil || e.Err.Error() != tt.err.Error() {
				t.Errorf("detail %q holds the password, or the cause is lost", e.Detail)
			}
			if e.CredentialRefused() != (tt.kind == KDCRefused) {
				t.Errorf("CredentialRefused = %v", e.CredentialRefused())
			}
		})
	}
}

func TestKerberosSetupErrors(t *testing.T) {
	k := &Kerberos{}
	tests := []struct {
		name   string
		cred   *credentials.Credential
		kind   Kind
		detail string
	}{
		{"no-realm", credentials.NewKerberos("alice", "pw", nil, []byte("[libdefaults]\n")), WrongRealm, "names no realm"},
		{"realm-not-in-krb5.conf", credentials.NewKerberos("alice@OTHER.TEST", "pw", nil, []byte("[libdefaults]\n default_realm = CORP.TEST\n[realms]\n CORP.TEST = {\n  kdc = 127.0.0.1:88\n }\n")), WrongRealm, "wrong realm OTHER.TEST"},
		{"bad-keytab", credentials.NewKerberos("alice@CORP.TEST", "", []byte("not a keytab"), []byte("[realms]\n CORP.TEST = {\n  kdc = 127.0.0.1:88\n }\n")), Config, "not a keytab"},
		{"nothing", credentials.NewKerberos("alice@CORP.TEST", "", nil, []byte("[realms]\n CORP.TEST = {\n  kdc = 127.0.0.1:88\n }\n")), Config, "no password and no keytab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := k.Token(tt.cred, "HTTP/proxy.corp")
			var e *Error
			if !errors.As(err, &e) || e.Kind != tt.kind || !strings.Contains(e.Detail, tt.detail) {
				t.Fatalf("err = %v, want %s %q", err, tt.kind, tt.detail)
			}
		})
	}
	k.Keep()
	if n := k.Clients(); n != 0 {
		t.Errorf("%d clients after Keep()", n)
	}
}

func TestNegotiateAnswers(t *testing.T) {
	h := &Handshake{Scheme: Negotiate, Cred: credentials.New("alice@CORP", "pw"), SPN: "HTTP/p"}
	for _, tt := range []struct {
		challenges []string
		kind       Kind
	}{
		{[]string{"Negotiate"}, Refused},
		{[]string{`Basic realm="x"`}, NotOffered},
		// A SPNEGO NegTokenResp with negState reject (RFC 4178).
		{[]string{"Negotiate oQcwBaADCgEC"}, Refused},
		// accept-incomplete: another round.
		{[]string{"Negotiate oQcwBaADCgEB"}, BadChallenge},
	} {
		_, err := h.Next(tt.challenges)
		var e *Error
		if !errors.As(err, &e) || e.Kind != tt.kind {
			t.Errorf("%v: err = %v, want %s", tt.challenges, err, tt.kind)
		}
	}
	if _, err := ParseScheme("digest"); err == nil {
		t.Error("digest accepted")
	}
	for _, s := range []string{"", "Basic", "NTLM", "negotiate", "Kerberos"} {
		if _, err := ParseScheme(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	if (&Error{Kind: KDCUnreachable, Timeout: true}).Status() != http.StatusGatewayTimeout {
		t.Error("a KDC timeout is not a 504")
	}
}
