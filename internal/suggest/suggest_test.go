package suggest

import "testing"

func TestClosest(t *testing.T) {
	keys := []string{"max_tunnels", "per_client", "per_destination", "destinations", "breaker"}
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{"max_tunels", "max_tunnels", true},
		{"MAX_TUNNELS_", "max_tunnels", true},
		{"perclient", "per_client", true},
		{"brekaer", "breaker", true},
		{"timeout", "", false},
		{"x", "", false},
	} {
		got, ok := Closest(tt.in, keys)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Closest(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	if _, ok := Closest("breaker", keys); ok {
		t.Error("an exact match is not a suggestion")
	}
	if d := distance("kitten", "sitting"); d != 3 {
		t.Errorf("distance = %d", d)
	}
}
