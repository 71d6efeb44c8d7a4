package sniff

import (
	"crypto/tls"
	"testing"
)

func BenchmarkParseClientHello(b *testing.B) {
	hello := clientHello(b, &tls.Config{ServerName: "partner.example.test", InsecureSkipVerify: true})
	b.ReportAllocs()
	b.SetBytes(int64(len(hello)))
	for b.Loop() {
		if name, err := ParseClientHello(hello); err != nil || name != "partner.example.test" {
			b.Fatal(name, err)
		}
	}
}

func BenchmarkParseHTTP(b *testing.B) {
	for _, tc := range httpCases {
		if tc.err != nil {
			continue
		}
		b.Run(tc.name, func(b *testing.B) {
			in := []byte(tc.in)
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := ParseHTTP(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
