package noproxy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestJavaNonProxyHosts(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     string
		warnings int
	}{
		// Names and suffixes: Go's reading (a bare name covers its subdomains).
		{"suffixes-and-names", ".svc,db.corp,kubernetes", "*.svc|svc|db.corp|*.db.corp|kubernetes|*.kubernetes", 0},
		{"star-dot-kept", "*.corp", "*.corp", 0},
		{"cidrs-octet-aligned", "10.0.0.0/8,192.168.1.0/24,10.1.2.3/32", "10.*|192.168.1.*|10.1.2.3", 0},
		// kubeadm's default Service range: 16 exact /16 pieces.
		{"kubeadm-service-cidr-split", "10.96.0.0/12",
			"10.96.*|10.97.*|10.98.*|10.99.*|10.100.*|10.101.*|10.102.*|10.103.*|10.104.*|10.105.*|10.106.*|10.107.*|10.108.*|10.109.*|10.110.*|10.111.*", 0},
		{"small-ranges-split-exact", "10.244.0.0/23,192.168.0.0/22", "10.244.0.*|10.244.1.*|192.168.0.*|192.168.1.*|192.168.2.*|192.168.3.*", 0},
		{"slash-26-split-into-addresses-too-many", "10.0.0.0/25", "", 1},
		{"slash-30-four-addresses", "10.0.0.4/30", "10.0.0.4|10.0.0.5|10.0.0.6|10.0.0.7", 0},
		{"too-wide-to-split-dropped", "10.0.0.0/1", "", 1},
		{"slash-zero-is-everything", "0.0.0.0/0", "*", 0},
		{"ipv6-range-dropped", "fd00::/8", "", 1},
		{"ipv6-bracketed", "::1,FD00:EC2::254,fd00::5/128", "[::1]|[fd00:ec2::254]|[fd00::5]", 0},
		{"ports-dropped-star-kept", "example.com:8080,*,*.corp", "*|*.corp", 1},
		{"duplicates-once", ".svc,*.svc,x.y,X.Y,10.96.0.0/12,10.97.0.0/16", "*.svc|svc|x.y|*.x.y|10.96.*|10.97.*|10.98.*|10.99.*|10.100.*|10.101.*|10.102.*|10.103.*|10.104.*|10.105.*|10.106.*|10.107.*|10.108.*|10.109.*|10.110.*|10.111.*", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, warnings := JavaNonProxyHosts(tt.in)
			if got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if len(warnings) != tt.warnings {
				t.Errorf("warnings %q, want %d", warnings, tt.warnings)
			}
		})
	}
}

// TestOctetAlignedExact compares OctetAligned with a naive model: every
// address of the prefix is in exactly one piece and no piece reaches outside.
func TestOctetAlignedExact(t *testing.T) {
	for _, s := range []string{"10.96.0.0/12", "10.244.0.0/23", "192.168.0.0/22", "172.16.0.0/12", "10.0.0.4/30", "10.0.0.0/8", "10.1.2.3/32", "100.64.0.0/10"} {
		p := netip.MustParsePrefix(s)
		pieces := OctetAligned(p)
		if pieces == nil {
			t.Fatalf("%s: not split", s)
		}
		var total uint64
		for _, q := range pieces {
			if q.Bits()%8 != 0 || !p.Contains(q.Addr()) || q.Bits() < p.Bits() {
				t.Errorf("%s: piece %s is not an aligned part of it", s, q)
			}
			total += 1 << (32 - q.Bits())
		}
		if total != 1<<(32-p.Bits()) {
			t.Errorf("%s: pieces cover %d addresses, want %d", s, total, uint64(1)<<(32-p.Bits()))
		}
	}
	for _, s := range []string{"10.0.0.0/1", "10.0.0.0/25", "fd00::/8"} {
		if got := OctetAligned(netip.MustParsePrefix(s)); got != nil {
			t.Errorf("%s: got %d pieces, want nil (more than %d, or not IPv4)", s, len(got), MaxOctetPieces)
		}
	}
}

func FuzzJavaNonProxyHosts(f *testing.F) {
	f.Add("10.96.0.0/12,.svc,[::1],a.b:80")
	f.Add("10.0.0.4/30,*.corp,fd00::/8")
	f.Fuzz(func(t *testing.T, s string) {
		got, _ := JavaNonProxyHosts(s)
		if strings.ContainsAny(got, ", \t\n/") {
			t.Fatalf("%q -> %q: separator or CIDR in a nonProxyHosts value", s, got)
		}
		for _, e := range strings.Split(got, "|") {
			if strings.Contains(strings.Trim(e, "*"), "*") {
				t.Fatalf("%q -> entry %q: '*' inside", s, e)
			}
		}
	})
}
