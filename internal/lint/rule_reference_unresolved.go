package lint

import "errors"

const idRefUnresolved = "reference-unresolved"

var ruleRefUnresolved = Rule{
	ID:       idRefUnresolved,
	Severity: Info,
	Summary:  "a ConfigMap or Secret the environment comes from is not in the input",
	Help: "Variables taken from a ConfigMap or Secret that egret cannot see are not checked. Lint the " +
		"ConfigMap or Secret together with the workload (same files or the same `kustomize build` output) to " +
		"have the real values judged.",
	pod: checkRefUnresolved,
}

func checkRefUnresolved(p *pod) {
	for _, r := range p.refs {
		if !errors.Is(r.err, ErrUnavailable) {
			continue
		}
		what := r.kind + " " + qualify(p.ns, r.name)
		if r.key != "" {
			what += " key " + r.key
		}
		p.report(idRefUnresolved, Info, p.containerAt(r.field), r.field,
			"%s is not in the input, so the variables it sets are not checked: lint it together with this workload", what)
	}
}
