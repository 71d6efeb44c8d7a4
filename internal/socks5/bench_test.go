package socks5

import (
	"bytes"
	"testing"
)

func BenchmarkHandshake(b *testing.B) {
	for _, tc := range handshakeCases {
		if tc.err != nil {
			continue
		}
		b.Run(tc.name, func(b *testing.B) {
			p := &pipe{}
			b.ReportAllocs()
			for b.Loop() {
				p.in = bytes.NewReader(tc.in)
				p.out.Reset()
				if _, err := Handshake(p, tc.auth); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
