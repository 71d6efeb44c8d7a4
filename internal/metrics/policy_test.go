package metrics

import (
	"fmt"
	"testing"
)

func TestBoundedLabel(t *testing.T) {
	b := &Bounded{Max: 3}
	for i := range 3 {
		if v := b.Value(fmt.Sprint(i)); v != fmt.Sprint(i) {
			t.Fatalf("value %d became %q", i, v)
		}
	}
	if v := b.Value("late"); v != Other {
		t.Errorf("a fourth value is %q, want %q", v, Other)
	}
	if v := b.Value("1"); v != "1" {
		t.Errorf("a known value is %q", v)
	}
}
