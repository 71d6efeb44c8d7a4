package iptables

import (
	"context"
	"fmt"
	"slices"
)

// restoreWait is how long iptables-restore waits for the xtables lock
// (iptables-legacy only; nft ignores it).
const restoreWait = "10"

// Manager applies and removes egret's rules through a Runner.
type Manager struct {
	// Runner runs the iptables programs. Nil means ExecRunner{}.
	Runner Runner
	// Backend forces nft or legacy. BackendAuto (the zero value) runs Detect
	// once, on first use.
	Backend Backend
	// Logf receives diagnostics (backend choice, residue found). Nil
	// discards them.
	Logf func(format string, args ...any)
}

// FamilyResult is what Apply or Remove did for one family.
type FamilyResult struct {
	Family  Family
	Rules   Ruleset // the rules written (Apply) or that would be written (Remove)
	Before  State   // egret's state before
	Applied string  // the restore transaction that ran; empty if none was needed
}

// Result is the outcome of Apply or Remove.
type Result struct {
	Backend   Backend
	Detection *Detection // set when the backend was detected
	Families  []FamilyResult
}

func (m *Manager) runner() Runner {
	if m.Runner == nil {
		return ExecRunner{}
	}
	return m.Runner
}

func (m *Manager) logf(format string, args ...any) {
	if m.Logf != nil {
		m.Logf(format, args...)
	}
}

func (m *Manager) backend(ctx context.Context, fams []Family, res *Result) error {
	if m.Backend != BackendAuto {
		res.Backend = m.Backend
		return nil
	}
	d, err := Detect(ctx, m.runner(), fams)
	if err != nil {
		return err
	}
	m.logf("iptables backend %s: %s", d.Backend, d.Reason)
	m.Backend, res.Backend, res.Detection = d.Backend, d.Backend, &d
	return nil
}

// Check reads egret's current state for fam with the backend's
// iptables-save. It fails when the nat table cannot be read (for example
// without CAP_NET_ADMIN).
func (m *Manager) Check(ctx context.Context, b Backend, fam Family) (State, error) {
	save := b.Save(fam)
	if err := m.runner().LookPath(save); err != nil {
		return State{}, fmt.Errorf("check %s nat table: %s not found: %w", fam, save, err)
	}
	out, err := m.runner().Run(ctx, Command{Name: save, Args: []string{"-t", Table}})
	if err != nil {
		return State{}, fmt.Errorf("check %s nat table (needs NET_ADMIN, and NET_RAW for iptables-legacy): %w", fam, err)
	}
	return ParseSave(string(out))
}

// Apply writes the rules of c for each of its families: check (read the
// current state), then one iptables-restore --noflush transaction that
// deletes any residue of egret and writes the rules, then check again that
// the rules are in place. Running Apply twice leaves the same rules.
func (m *Manager) Apply(ctx context.Context, c Config) (Result, error) {
	var res Result
	if err := m.backend(ctx, c.Families(), &res); err != nil {
		return res, err
	}
	for _, fam := range c.Families() {
		rs := Build(c, fam)
		before, err := m.Check(ctx, res.Backend, fam)
		if err != nil {
			return res, fmt.Errorf("apply: %w", err)
		}
		if !before.Empty() {
			m.logf("%s: replacing existing egret rules (%d chains, %d jumps, %d rules)", fam, len(before.Chains), len(before.Jumps), len(before.Rules))
		}
		text := applyText(rs, before)
		if err := m.restore(ctx, res.Backend, fam, text); err != nil {
			return res, fmt.Errorf("apply %s rules: %w", fam, err)
		}
		res.Families = append(res.Families, FamilyResult{Family: fam, Rules: rs, Before: before, Applied: text})
		after, err := m.Check(ctx, res.Backend, fam)
		if err != nil {
			return res, fmt.Errorf("apply: verify: %w", err)
		}
		if err := verify(expectedState(rs), after); err != nil {
			return res, fmt.Errorf("apply %s rules: verify: %w", fam, err)
		}
		if diff := spelling(expectedState(rs), after); diff != "" {
			m.logf("%s: iptables-save spells a rule differently than egret wrote it: %s", fam, diff)
		}
	}
	return res, nil
}

// Remove deletes egret's rules and chains for each family of c (in the
// reverse order of Apply) and checks that nothing is left. Removing when
// nothing is there is not an error.
func (m *Manager) Remove(ctx context.Context, c Config) (Result, error) {
	var res Result
	if err := m.backend(ctx, c.Families(), &res); err != nil {
		return res, err
	}
	fams := slices.Clone(c.Families())
	slices.Reverse(fams)
	for _, fam := range fams {
		before, err := m.Check(ctx, res.Backend, fam)
		if err != nil {
			return res, fmt.Errorf("remove: %w", err)
		}
		text := removeText(before)
		if text != "" {
			if err := m.restore(ctx, res.Backend, fam, text); err != nil {
				return res, fmt.Errorf("remove %s rules: %w", fam, err)
			}
		}
		res.Families = append(res.Families, FamilyResult{Family: fam, Rules: Build(c, fam), Before: before, Applied: text})
		after, err := m.Check(ctx, res.Backend, fam)
		if err != nil {
			return res, fmt.Errorf("remove: verify: %w", err)
		}
		if !after.Empty() {
			return res, fmt.Errorf("remove %s rules: verify: %d chains, %d jumps, %d rules of egret still present", fam, len(after.Chains), len(after.Jumps), len(after.Rules))
		}
	}
	return res, nil
}

func (m *Manager) restore(ctx context.Context, b Backend, fam Family, text string) error {
	prog := b.Restore(fam)
	if err := m.runner().LookPath(prog); err != nil {
		return fmt.Errorf("%s not found: %w", prog, err)
	}
	_, err := m.runner().Run(ctx, Command{Name: prog, Args: []string{"--noflush", "--wait", restoreWait}, Stdin: text})
	return err
}

// verify checks that iptables-save shows egret's chains and as many jumps
// and rules as Apply wrote.
func verify(want, got State) error {
	if !slices.Equal(want.Chains, got.Chains) {
		return fmt.Errorf("chains %v, want %v", got.Chains, want.Chains)
	}
	if len(want.Jumps) != len(got.Jumps) {
		return fmt.Errorf("%d jumps into egret's chains, want %d: %q", len(got.Jumps), len(want.Jumps), got.Jumps)
	}
	if len(want.Rules) != len(got.Rules) {
		return fmt.Errorf("%d rules in egret's chains, want %d", len(got.Rules), len(want.Rules))
	}
	return nil
}

// spelling returns the first line that iptables-save prints differently from
// egret's canonical spelling, or "" when all match (they do with iptables
// 1.8, nft and legacy; tests assert it).
func spelling(want, got State) string {
	w := append(slices.Clone(want.Jumps), want.Rules...)
	g := append(slices.Clone(got.Jumps), got.Rules...)
	for i := range min(len(w), len(g)) {
		if w[i] != g[i] {
			return fmt.Sprintf("wrote %q, saved %q", w[i], g[i])
		}
	}
	return ""
}
