package relay

import (
	"testing"
	"time"
)

// A benchmark knob set to something it does not take keeps its default
// (the warning names the values it takes); a valid one is used.
func TestRelayEnvKnobs(t *testing.T) {
	for _, c := range []struct {
		v    string
		want time.Duration
	}{{"50ms", 50 * time.Millisecond}, {"0", 0}, {"-1s", 0}, {"soon", 200 * time.Millisecond}} {
		t.Setenv("EGRET_RELAY_PARK_AFTER", c.v)
		if got := parkAfterFromEnv(200 * time.Millisecond); got != c.want {
			t.Errorf("EGRET_RELAY_PARK_AFTER=%q: %s, want %s", c.v, got, c.want)
		}
	}
	for v, want := range map[string]bool{"1": true, "0": false, "": false, "yes": false} {
		t.Setenv("EGRET_RELAY_DETACH", v)
		if got := detachFromEnv(); got != want {
			t.Errorf("EGRET_RELAY_DETACH=%q: %v, want %v", v, got, want)
		}
	}
}
