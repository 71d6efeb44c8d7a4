package lint

import "errors"

const idRefMissing = "reference-missing"

var ruleRefMissing = Rule{
	ID:       idRefMissing,
	Severity: Error,
	Summary:  "a non-optional ConfigMap or Secret reference points at a missing object or key",
	Help: "The kubelet refuses to start a container whose non-optional `configMapKeyRef`, `secretKeyRef`, " +
		"`configMapRef` or `secretRef` names a missing object or key (CreateContainerConfigError). Add the key, " +
		"fix the name, or mark the reference `optional: true`.",
	pod: checkRefMissing,
}

func checkRefMissing(p *pod) {
	for _, r := range p.refs {
		if r.optional || errors.Is(r.err, ErrUnavailable) {
			continue
		}
		c := p.containerAt(r.field)
		switch {
		case errors.Is(r.err, errMissingKey):
			p.report(idRefMissing, Error, c, r.field, "%s %s has no key %q, so the container does not start: add the key or mark the reference optional", r.kind, qualify(p.ns, r.name), r.key)
		case errors.Is(r.err, ErrNotFound):
			p.report(idRefMissing, Error, c, r.field, "%s %s does not exist, so the container does not start: create it or mark the reference optional", r.kind, qualify(p.ns, r.name))
		default:
			p.report(idRefMissing, Warning, c, r.field, "%s %s could not be read: %v", r.kind, qualify(p.ns, r.name), r.err)
		}
	}
}
