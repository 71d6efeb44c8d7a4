package discovery

import (
	"strings"
	"testing"
)

func TestParseCorefile(t *testing.T) {
	for _, tc := range []struct{ name, in, want, err string }{
		{name: "kubeadm", in: `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    forward . /etc/resolv.conf
}`, want: "cluster.local"},
		{name: "other-domain-reverse-first", in: "  kubernetes in-addr.arpa ip6.arpa Corp.Example. {\n", want: "corp.example"},
		{name: "no-block", in: "kubernetes k8s.internal\n", want: "k8s.internal"},
		{name: "commented-out", in: "# kubernetes old.local {\n    kubernetes new.local # current\n", want: "new.local"},
		{name: "zone-with-scheme-and-port", in: "kubernetes dns://c1.example:53 {\n", want: "c1.example"},
		{name: "no-plugin", in: ".:53 {\n forward . 8.8.8.8\n}", err: "no kubernetes plugin"},
		{name: "reverse-only", in: "kubernetes in-addr.arpa {\n", err: "only reverse zones"},
		{name: "bad-zone", in: "kubernetes bad_zone!.local {\n", err: "not a DNS name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCorefile(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestParseKubeletConfigz(t *testing.T) {
	for _, tc := range []struct{ name, in, want, err string }{
		{name: "kubelet", in: `{"kubeletconfig":{"clusterDNS":["10.96.0.10"],"clusterDomain":"cluster.local","enableServer":true}}`, want: "cluster.local"},
		{name: "trailing-dot", in: `{"kubeletconfig":{"clusterDomain":"corp.example."}}`, want: "corp.example"},
		{name: "no-domain", in: `{"kubeletconfig":{"clusterDNS":[]}}`, err: "no kubeletconfig.clusterDomain"},
		{name: "not-configz", in: `<html>`, err: "not a configz answer"},
		{name: "bad-domain", in: `{"kubeletconfig":{"clusterDomain":"a b"}}`, err: "not a DNS name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseKubeletConfigz([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func FuzzParseCorefile(f *testing.F) {
	f.Add("kubernetes cluster.local in-addr.arpa ip6.arpa {\n")
	f.Add("kubernetes dns://a.b:53 .\n")
	f.Fuzz(func(t *testing.T, in string) {
		d, err := ParseCorefile(in)
		if err == nil && (checkDomain(d) != nil || strings.HasSuffix(d, ".arpa")) {
			t.Fatalf("ParseCorefile(%q) = %q", in, d)
		}
	})
}
