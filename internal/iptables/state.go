package iptables

import (
	"bufio"
	"fmt"
	"slices"
	"strings"
)

// State is what iptables-save shows of egret in the nat table.
type State struct {
	Chains []string // egret chains (EGRET_*) that exist, in save order
	Jumps  []string // rules in other chains that jump to an egret chain ("-A OUTPUT ...")
	Rules  []string // rules inside egret chains ("-A EGRET_OUTPUT ...")
}

// Empty reports whether nothing of egret is present.
func (s State) Empty() bool { return len(s.Chains) == 0 && len(s.Jumps) == 0 && len(s.Rules) == 0 }

// ParseSave reads the nat table from iptables-save output. Lines of other
// tables are ignored; a missing nat table is an empty State.
func ParseSave(text string) (State, error) {
	var st State
	inNat := false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			inNat = line == "*"+Table
		case !inNat:
		case line == "COMMIT":
			inNat = false
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			if strings.HasPrefix(name, chainPrefix) {
				st.Chains = append(st.Chains, name)
			}
		case line == "-A" || strings.HasPrefix(line, "-A "):
			fields := strings.Fields(line)
			if len(fields) < 2 {
				return State{}, fmt.Errorf("iptables-save line %d: rule without a chain", n)
			}
			if strings.HasPrefix(fields[1], chainPrefix) {
				st.Rules = append(st.Rules, line)
			} else if jumpsToEgret(fields) {
				st.Jumps = append(st.Jumps, line)
			}
		default:
			return State{}, fmt.Errorf("iptables-save line %d: unexpected %q", n, truncate(line, 80))
		}
	}
	if err := sc.Err(); err != nil {
		return State{}, fmt.Errorf("read iptables-save output: %w", err)
	}
	return st, nil
}

func jumpsToEgret(fields []string) bool {
	for i := 0; i+1 < len(fields); i++ {
		if (fields[i] == "-j" || fields[i] == "-g" || fields[i] == "--jump" || fields[i] == "--goto") &&
			strings.HasPrefix(fields[i+1], chainPrefix) {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// applyText is the one transaction Apply restores: (re)declare egret's
// chains (which flushes them), delete residue jumps, append the rules and
// drop residue EGRET_* chains that the current version no longer uses.
func applyText(rs Ruleset, st State) string {
	declare := chainNames()
	var drop []string
	for _, c := range st.Chains {
		if !slices.Contains(declare, c) {
			declare = append(declare, c)
			drop = append(drop, c)
		}
	}
	return transaction(declare, st.Jumps, rs.Rules, drop)
}

// removeText is the transaction Remove restores, in the reverse order of
// Apply: flush egret's chains, delete the jumps into them, delete the
// chains. It is empty when st is empty.
func removeText(st State) string {
	if st.Empty() {
		return ""
	}
	declare := slices.Clone(st.Chains)
	for _, l := range st.Rules { // rules in a chain that was not declared (cannot happen in a valid save)
		if c := strings.Fields(l)[1]; !slices.Contains(declare, c) {
			declare = append(declare, c)
		}
	}
	return transaction(declare, st.Jumps, nil, declare)
}

// expectedState is the State that Apply of rs leaves behind.
func expectedState(rs Ruleset) State {
	st := State{Chains: chainNames()}
	for _, r := range rs.Rules {
		if strings.HasPrefix(r.Chain, chainPrefix) {
			st.Rules = append(st.Rules, r.Line())
		} else {
			st.Jumps = append(st.Jumps, r.Line())
		}
	}
	return st
}
