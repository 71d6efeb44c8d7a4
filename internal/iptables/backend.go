package iptables

import (
	"context"
	"fmt"
	"strings"
)

// Backend is the kernel interface the iptables programs use.
type Backend string

// Backends. BackendAuto asks Detect.
const (
	BackendAuto   Backend = ""
	BackendNFT    Backend = "nft"
	BackendLegacy Backend = "legacy"
)

// ParseBackend reads a --backend value: auto, nft or legacy.
func ParseBackend(s string) (Backend, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return BackendAuto, nil
	case "nft":
		return BackendNFT, nil
	case "legacy":
		return BackendLegacy, nil
	}
	return "", fmt.Errorf("backend %q: want auto, nft or legacy", s)
}

func (b Backend) String() string {
	if b == BackendAuto {
		return "auto"
	}
	return string(b)
}

// Save is the iptables-save program of b for fam, e.g. ip6tables-nft-save.
func (b Backend) Save(fam Family) string { return fam.tool() + "-" + string(b) + "-save" }

// Restore is the iptables-restore program of b for fam.
func (b Backend) Restore(fam Family) string { return fam.tool() + "-" + string(b) + "-restore" }

// Detection explains Detect's choice.
type Detection struct {
	Backend Backend
	Reason  string
	Rules   map[Backend]int // rules counted per backend; a missing key = tools not installed
}

// kubeHints are chains the kubelet creates in the mangle table of the
// backend it uses (Kubernetes' iptables-wrapper checks them first).
var kubeHints = []string{"KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"}

// Detect picks the backend this network namespace already uses, like
// Kubernetes' iptables-wrapper: a kubelet hint chain in the nft tables means
// nft; otherwise the backend holding more rules (all tables, every family in
// fams) wins, and a tie (typically: nothing anywhere, a fresh pod) goes to
// nft. A backend whose programs are missing is never chosen.
func Detect(ctx context.Context, r Runner, fams []Family) (Detection, error) {
	d := Detection{Rules: map[Backend]int{}}
	hint := false
	var errs []string
	for _, b := range []Backend{BackendNFT, BackendLegacy} {
		count, usable := 0, false
		for _, fam := range fams {
			save := b.Save(fam)
			if err := r.LookPath(save); err != nil {
				continue
			}
			out, err := r.Run(ctx, Command{Name: save})
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			usable = true
			for _, line := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(line, "-A ") {
					count++
				}
				if b == BackendNFT && strings.HasPrefix(line, ":") {
					for _, h := range kubeHints {
						if strings.HasPrefix(line, ":"+h+" ") {
							hint = true
						}
					}
				}
			}
		}
		if usable {
			d.Rules[b] = count
		}
	}
	nft, hasNFT := d.Rules[BackendNFT]
	legacy, hasLegacy := d.Rules[BackendLegacy]
	switch {
	case !hasNFT && !hasLegacy:
		if len(errs) > 0 {
			return d, fmt.Errorf("detect iptables backend (needs NET_ADMIN, and NET_RAW for iptables-legacy): %s", strings.Join(errs, "; "))
		}
		return d, fmt.Errorf("detect iptables backend: neither iptables-nft nor iptables-legacy programs found")
	case hint && hasNFT:
		d.Backend, d.Reason = BackendNFT, "kubelet hint chain in the nft tables"
	case !hasLegacy:
		d.Backend, d.Reason = BackendNFT, "only iptables-nft is usable"
	case !hasNFT:
		d.Backend, d.Reason = BackendLegacy, "only iptables-legacy is usable"
	case legacy > nft:
		d.Backend, d.Reason = BackendLegacy, fmt.Sprintf("legacy holds more rules (%d legacy, %d nft)", legacy, nft)
	default:
		d.Backend, d.Reason = BackendNFT, fmt.Sprintf("nft is the default when legacy holds no more rules (%d legacy, %d nft)", legacy, nft)
	}
	return d, nil
}
