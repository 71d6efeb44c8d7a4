package proxyd

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// releaseCode keeps egret's resident memory to what it actually uses.
// egret is one binary with many commands; Go runs every linked package's
// initialisation at start, so a proxy also touches the Kubernetes client
// libraries' code and type data once (scheme registration), and those pages
// then stay resident for the life of a sidecar that never runs that code
// again. releaseCode advises the kernel that the executable's read-only
// mappings (code and read-only data) are not needed now: they are clean
// copies of the executable, so any page still in use faults straight back
// in from the page cache, and the resident set shrinks to the working set.
// It returns how many bytes of mappings it released. Writable mappings are
// never touched.
func releaseCode() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 00400000-01871000 r-xp 00000000 fd:00 123 /path/to/egret
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != exe {
			continue
		}
		perms := fields[1]
		if perms[1] == 'w' || perms[3] != 'p' {
			continue // writable, or shared: leave alone
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		// The range is the executable's own mapping, passed as numbers:
		// no Go pointer is made from it.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_DONTNEED); errno != 0 {
			return total, fmt.Errorf("madvise %s: %w", fields[0], errno)
		}
		total += int64(end - start)
	}
	return total, sc.Err()
}
