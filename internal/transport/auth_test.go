package transport

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/proxyauth"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/testutil/kdc"
	"egret.io/egret/internal/testutil/squid"
	"egret.io/egret/internal/upstream"
)

// Real parts: an MIT KDC whose realm the test creates, a Squid that
// accepts only Negotiate (negotiate_kerberos_auth with the proxy's keytab)
// or NTLM (ntlm_fake_auth), egret's pool making CONNECT tunnels through it.

func needLong(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a KDC and Squid")
	}
}

// kerberosSquid is a realm with user alice (password alice-pw) and a Squid
// that accepts tickets for HTTP/127.0.0.1, the default SPN of a member
// at 127.0.0.1.
func kerberosSquid(t *testing.T) (*kdc.KDC, *squid.Squid) {
	t.Helper()
	needLong(t)
	k := kdc.Start(t, kdc.Options{})
	k.AddUser(t, "alice", "alice-pw")
	kt := k.AddKeytab(t, "HTTP/127.0.0.1")
	sq := squid.Start(t, squid.Options{Auth: squid.AuthNegotiate, Keytab: kt, Env: k.Env(),
		Hosts: map[string]string{"partner.test": "127.0.0.1"}})
	return k, sq
}

func negotiatePool(t *testing.T, store *credentials.Store, spec string) (*upstream.Pool, *eventLog) {
	t.Helper()
	ev := &eventLog{}
	return &upstream.Pool{Name: "corp", Credentials: store, Events: ev.events(), Members: members(t, spec), ConnectTimeout: 10 * time.Second}, ev
}

func TestNegotiateRealKDC(t *testing.T) {
	k, sq := kerberosSquid(t)
	port := echoOrigin(t)
	conf := []byte(k.Krb5Conf())
	member := "http://" + sq.Addr + " auth=negotiate"
	dial := func(p *upstream.Pool) error {
		tun, err := tr.DialTunnel(context.Background(), p, "partner.test:"+port)
		if err == nil {
			readHello(t, tun)
		}
		return err
	}

	t.Run("password", func(t *testing.T) {
		p, ev := negotiatePool(t, credentials.NewStore(credentials.NewKerberos("alice@"+k.Realm, "alice-pw", nil, conf)), member)
		for i := 0; i < 3; i++ { // the TGT and ticket are fetched once, each tunnel gets its own AP-REQ
			if err := dial(p); err != nil {
				t.Fatalf("tunnel %d: %v\n%s", i, err, ev)
			}
		}
		sq.WaitLog(t, "CONNECT partner.test:"+port+" alice@"+k.Realm)
	})
	t.Run("keytab", func(t *testing.T) {
		kt, err := os.ReadFile(k.AddKeytab(t, "svc-egret"))
		if err != nil {
			t.Fatal(err)
		}
		p, ev := negotiatePool(t, credentials.NewStore(credentials.NewKerberos("svc-egret", "", kt, conf)), member)
		if err := dial(p); err != nil {
			t.Fatalf("tunnel: %v\n%s", err, ev)
		}
		sq.WaitLog(t, "CONNECT partner.test:"+port+" svc-egret@"+k.Realm)
	})
	t.Run("rotation-falls-back-to-the-previous-password", func(t *testing.T) {
		store := credentials.NewStore(credentials.NewKerberos("alice", "alice-pw", nil, conf))
		store.Set(credentials.NewKerberos("alice", "not-yet-pw", nil, conf))
		p, ev := negotiatePool(t, store, member)
		if err := dial(p); err != nil {
			t.Fatalf("tunnel: %v\n%s", err, ev)
		}
		if !strings.Contains(ev.String(), "fallback") || strings.Contains(ev.String(), "down") {
			t.Errorf("events:\n%s\nwant one fallback and no member down", ev)
		}
		if !store.Rotating() {
			t.Error("a fallback success confirmed the refused credential")
		}
	})

	failures := []struct {
		name   string
		cred   *credentials.Credential
		spec   string
		typ    proxystatus.Type
		kind   proxyauth.Kind
		detail string
	}{
		{"wrong-password", credentials.NewKerberos("alice", "wrong-pw", nil, conf), member,
			proxystatus.UpstreamAuthRequired, proxyauth.KDCRefused, "wrong password: the KDC refused the password (or keytab key) of alice"},
		{"unknown-user", credentials.NewKerberos("mallory", "pw", nil, conf), member,
			proxystatus.UpstreamAuthRequired, proxyauth.KDCRefused, "the KDC does not know mallory"},
		{"no-ticket", credentials.NewKerberos("alice", "alice-pw", nil, conf), member + " spn=HTTP/nosuch.test",
			proxystatus.ProxyConfigurationErr, proxyauth.NoTicket, "no ticket: the KDC knows no service principal HTTP/nosuch.test"},
		{"wrong-realm", credentials.NewKerberos("alice@OTHER.TEST", "alice-pw", nil, conf), member,
			proxystatus.ProxyConfigurationErr, proxyauth.WrongRealm, "wrong realm OTHER.TEST"},
		{"kdc-unreachable", credentials.NewKerberos("alice", "alice-pw", nil,
			[]byte(strings.ReplaceAll(string(conf), k.Addr, deadAddr(t)))), member,
			proxystatus.ConnectionRefused, proxyauth.KDCUnreachable, "KDC unreachable: no KDC of realm"},
		{"no-keytab-no-password", credentials.NewKerberos("alice", "", nil, conf), member,
			proxystatus.ProxyConfigurationErr, proxyauth.Config, "no password and no keytab"},
	}
	for _, tt := range failures {
		t.Run(tt.name, func(t *testing.T) {
			p, ev := negotiatePool(t, credentials.NewStore(tt.cred), tt.spec)
			err := dial(p)
			checkAuthFailure(t, err, tt.typ, tt.kind, tt.detail)
			if !strings.Contains(ev.String(), "down http://"+sq.Addr+" "+string(tt.typ)) {
				t.Errorf("events:\n%s\nwant the member down with %s", ev, tt.typ)
			}
		})
	}

	t.Run("proxy-refuses-the-ticket", func(t *testing.T) {
		// The KDC knows HTTP/other.test, Squid's keytab does not.
		k.AddKeytab(t, "HTTP/other.test")
		p, _ := negotiatePool(t, credentials.NewStore(credentials.NewKerberos("alice", "alice-pw", nil, conf)), member+" spn=HTTP/other.test")
		err := dial(p)
		checkAuthFailure(t, err, proxystatus.UpstreamAuthRequired, proxyauth.Refused, "refused the Kerberos ticket of user alice for HTTP/other.test")
		var r *upstream.Refusal
		if !errors.As(err, &r) || r.Code != 407 {
			t.Errorf("err = %#v, want the member's 407 refusal", err)
		}
	})
}

// TestNegotiateClockSkew runs the KDC two hours ahead: the KDC refuses
// egret's pre-authentication timestamp.
func TestNegotiateClockSkew(t *testing.T) {
	needLong(t)
	k := kdc.Start(t, kdc.Options{ClockOffset: 2 * time.Hour})
	k.AddUser(t, "alice", "alice-pw")
	p, _ := negotiatePool(t, credentials.NewStore(credentials.NewKerberos("alice", "alice-pw", nil, []byte(k.Krb5Conf()))), "http://127.0.0.1:9 auth=negotiate")
	_, err := tr.DialTunnel(context.Background(), p, "partner.test:80")
	checkAuthFailure(t, err, proxystatus.ProxyConfigurationErr, proxyauth.ClockSkew, "clock skew")
}

func checkAuthFailure(t *testing.T, err error, typ proxystatus.Type, kind proxyauth.Kind, detail string) {
	t.Helper()
	if err == nil {
		t.Fatal("the tunnel opened")
	}
	pe := proxystatus.From(err)
	var ae *proxyauth.Error
	if pe.Type != typ || !errors.As(err, &ae) || ae.Kind != kind || !strings.Contains(pe.Detail, detail) {
		t.Fatalf("err = %v (type %s, kind %v), want %s / %s with %q", err, pe.Type, kindOf(ae), typ, kind, detail)
	}
	if pe.Upstream == "" || !strings.HasPrefix(pe.Detail, "upstream http://") {
		t.Errorf("the error does not name the member: %v", pe)
	}
	for _, secret := range []string{"alice-pw", "wrong-pw"} {
		if strings.Contains(err.Error(), secret) || strings.Contains(pe.Detail, secret) {
			t.Errorf("the error holds a password: %v", err)
		}
	}
}

func kindOf(ae *proxyauth.Error) proxyauth.Kind {
	if ae == nil {
		return 0
	}
	return ae.Kind
}

// TestNTLMRealSquid runs the NTLM handshake with a Squid that requires NTLM
// (ntlm_fake_auth: it checks the handshake, not the password) for CONNECT.
func TestNTLMRealSquid(t *testing.T) {
	needLong(t)
	port := echoOrigin(t)
	sq := squid.Start(t, squid.Options{Auth: squid.AuthNTLM, Hosts: map[string]string{"partner.test": "127.0.0.1"}})
	p := &upstream.Pool{Name: "corp", Credentials: credentials.NewStore(credentials.New(`CORP\alice`, "alice-pw")),
		Members: members(t, "http://"+sq.Addr+" auth=ntlm")}
	for i := 0; i < 2; i++ {
		tun, err := tr.DialTunnel(context.Background(), p, "partner.test:"+port)
		if err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
		readHello(t, tun)
	}
	// ntlm_fake_auth names the user DOMAIN\user; Squid's log escapes the
	// backslash. Each tunnel ran the whole handshake: a 407 with the
	// challenge, then the tunnel, on one connection.
	sq.WaitLog(t, "TCP_TUNNEL/200 45 CONNECT partner.test:"+port+` CORP\\alice`)
	if n := strings.Count(strings.Join(sq.AccessLog(), "\n"), "TCP_DENIED/407"); n != 2 {
		t.Errorf("%d challenges for two tunnels:\n%s", n, strings.Join(sq.AccessLog(), "\n"))
	}

	t.Run("basic-member-is-refused", func(t *testing.T) {
		// The same Squid as a Basic member: it does not offer Basic.
		p := &upstream.Pool{Name: "corp", Credentials: credentials.NewStore(credentials.New("alice", "alice-pw")), Members: members(t, "http://"+sq.Addr)}
		_, err := tr.DialTunnel(context.Background(), p, "partner.test:"+port)
		if pe := proxystatus.From(err); pe.Type != proxystatus.UpstreamAuthRequired {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("negotiate-member-is-told-what-it-offers", func(t *testing.T) {
		// With a Kerberos credential that cannot log in the error is the
		// KDC's; an NTLM-only proxy asked with a token would say it offers
		// only NTLM. A handshake answering its 407 shows that:
		h := &proxyauth.Handshake{Scheme: proxyauth.Negotiate}
		_, err := h.Next([]string{"NTLM"})
		var ae *proxyauth.Error
		if !errors.As(err, &ae) || ae.Kind != proxyauth.NotOffered || !strings.Contains(ae.Detail, "offers NTLM") {
			t.Fatalf("err = %v", err)
		}
	})
}
