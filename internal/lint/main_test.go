package lint

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	// Only a full run (no -run filter) uses every golden file.
	if f := flag.Lookup("test.run"); code == 0 && (f == nil || f.Value.String() == "") {
		if unused := checkUnusedGoldens(); len(unused) > 0 {
			fmt.Fprintln(os.Stderr, "unused golden files:", unused)
			code = 1
		}
	}
	os.Exit(code)
}
