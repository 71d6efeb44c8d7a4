package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"egret.io/egret/internal/intercept"
)

// Interception in policies (docs/interception.md, "In a policy"): a
// policy's intercept sites become intercept.Sites whose credentials come
// from Secrets the gateway's configuration grants. An EgressPolicy names
// Secrets of its own namespace only; the ClusterEgressPolicy names
// namespace/name.

// compileIntercept compiles p's intercept sites. why is the condition
// reason of the errors.
func compileIntercept(p *EgressPolicy, cluster bool, ic Interception) (intercept.Sites, string, []error) {
	if ic == nil {
		return nil, ReasonInterceptUnavailable, []error{errors.New("intercept: this gateway has no interception CA (intercept.ca_dir in its configuration): ask its operator, or remove intercept")}
	}
	var out intercept.Sites
	var errs []error
	why := ReasonInvalid
	for i := range p.Spec.Intercept {
		is := &p.Spec.Intercept[i]
		spec := intercept.SiteSpec{Hosts: is.Hosts, Exempt: is.Exempt}
		if is.HTTP != nil {
			spec.HTTP = *is.HTTP
		}
		type ref struct {
			ns, name string
			keys     []string
		}
		var refs []ref
		bad := false
		for j := range is.Credentials {
			cr := &is.Credentials[j]
			ns, name, err := secretRef(cr.Secret, p.Namespace, cluster)
			if err != nil {
				errs, bad = append(errs, fmt.Errorf("intercept[%d].credentials[%d]: %w", i, j, err)), true
				why = ReasonSecretNotGranted
				continue
			}
			if !ic.Granted(ns, name) {
				errs, bad = append(errs, fmt.Errorf("intercept[%d].credentials[%d]: the Secret %s/%s is not granted to policies by this gateway (its intercept.secrets)", i, j, ns, name)), true
				why = ReasonSecretNotGranted
				continue
			}
			keys, err := secretKeys(cr)
			if err != nil {
				errs, bad = append(errs, fmt.Errorf("intercept[%d].credentials[%d]: %w", i, j, err)), true
				continue
			}
			sources := make([]string, len(keys))
			for k, key := range keys {
				sources[k] = "Secret " + ns + "/" + name + " key " + key
			}
			spec.Credentials = append(spec.Credentials, intercept.CredentialSpec{
				Name: ns + "/" + name, Header: cr.Header, Scheme: cr.Scheme, Files: sources,
			})
			refs = append(refs, ref{ns, name, keys})
		}
		if bad {
			continue
		}
		n := 0
		site, err := intercept.CompileSiteWith(spec, func(cs intercept.CredentialSpec) (*intercept.Credential, error) {
			r := refs[n]
			n++
			return ic.Credential(cs, r.ns, r.name, r.keys)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("intercept[%d]: %w", i, err))
			continue
		}
		out = append(out, site)
	}
	if len(errs) == 0 {
		why = ""
	}
	return out, why, errs
}

// secretRef reads a credential's Secret: a name of the policy's namespace
// in an EgressPolicy, namespace/name in the ClusterEgressPolicy.
func secretRef(s, namespace string, cluster bool) (ns, name string, err error) {
	ns, name, qualified := strings.Cut(s, "/")
	switch {
	case cluster && !qualified:
		return "", "", fmt.Errorf("secret %q: the ClusterEgressPolicy names a Secret as namespace/name", s)
	case !cluster && qualified:
		return "", "", fmt.Errorf("secret %q: an EgressPolicy names a Secret of its own namespace (a name, without namespace/)", s)
	case !cluster:
		ns, name = namespace, s
	}
	if es := validation.IsDNS1123Subdomain(name); len(es) > 0 {
		return "", "", fmt.Errorf("secret %q: %s", s, es[0])
	}
	if es := validation.IsDNS1123Label(ns); len(es) > 0 {
		return "", "", fmt.Errorf("secret %q: namespace: %s", s, es[0])
	}
	return ns, name, nil
}

// secretKeys are the Secret's keys a credential reads.
func secretKeys(cr *InterceptCredential) ([]string, error) {
	want := 1
	def := []string{intercept.TokenFile}
	if strings.EqualFold(cr.Scheme, "basic") {
		want, def = 2, []string{intercept.UsernameFile, intercept.PasswordFile}
	}
	if len(cr.Keys) == 0 {
		return def, nil
	}
	if len(cr.Keys) != want {
		return nil, fmt.Errorf("keys: a %s credential reads %s key(s), not %d", strings.ToLower(cmpOr(cr.Scheme, "bearer")), strconv.Itoa(want), len(cr.Keys))
	}
	for _, k := range cr.Keys {
		if es := validation.IsConfigMapKey(k); len(es) > 0 {
			return nil, fmt.Errorf("keys: %q: %s", k, es[0])
		}
	}
	return cr.Keys, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// InterceptSite returns the intercepted site of host for the workload, or
// nil: the cluster default's sites first (they hold for every client, as
// its deny rules do), then the deciding policy's. Report-only policies
// intercept nothing.
func (e *Effective) InterceptSite(host string) *intercept.Site {
	if e == nil {
		return nil
	}
	return e.sites.Lookup(host)
}

// validating is the Interception of Compile: every Secret granted, no
// value read.
type validating struct{}

func (validating) Granted(string, string) bool { return true }

func (validating) Credential(spec intercept.CredentialSpec, _, _ string, _ []string) (*intercept.Credential, error) {
	return intercept.NewCredential(spec, "")
}
