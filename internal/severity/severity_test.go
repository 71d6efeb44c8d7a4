package severity

import (
	"encoding/json"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, l := range []Level{Info, Warning, Error} {
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		var back Level
		if err := json.Unmarshal(b, &back); err != nil || back != l {
			t.Errorf("%s: %s → %v, %v", l, b, back, err)
		}
	}
	if _, err := json.Marshal(Level(0)); err == nil {
		t.Error("the zero level marshals")
	}
	if l, err := Parse("WARN"); err != nil || l != Warning {
		t.Errorf("Parse(WARN) = %v, %v", l, err)
	}
	if _, err := Parse("fatal"); err == nil || err.Error() != `unknown severity "fatal" (want info, warning or error)` {
		t.Errorf("Parse(fatal): %v", err)
	}
	if !(Info < Warning && Warning < Error) {
		t.Error("levels out of order")
	}
}
