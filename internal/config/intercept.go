package config

import (
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"egret.io/egret/internal/intercept"
)

// InterceptSpec is the file's interception section (docs/interception.md):
// the gateway terminates TLS for the sites listed, injects their
// credentials and applies their method and path rules. Gateway role only.
type InterceptSpec struct {
	// CADir is the mounted interception CA Secret (tls.crt, tls.key and
	// the optional trust.crt).
	CADir string `json:"ca_dir,omitempty"`
	// OriginCAFile holds CA certificates origins are verified with, beside
	// the system roots (an internal CA of some destinations).
	OriginCAFile string `json:"origin_ca_file,omitempty"`
	// Sites are tried in order; the first whose hosts match is the site.
	Sites []InterceptSiteSpec `json:"sites,omitempty"`
	// Secrets are the Secrets ("namespace/name") the credentials of
	// EgressPolicies and the ClusterEgressPolicy may name; the gateway
	// reads exactly these from the API server (an EgressPolicy only those
	// of its own namespace).
	Secrets []string `json:"secrets,omitempty"`
	// PublishConfigMap ("namespace/name") is where the gateway writes its
	// interception CA's certificates (never the key) for the webhook's
	// trust bundle (--intercept-ca-configmap).
	PublishConfigMap string `json:"publish_configmap,omitempty"`
}

// InterceptSiteSpec is one intercepted destination.
type InterceptSiteSpec struct {
	// Hosts: "api.example.com", ".example.com" or "*.example.com".
	Hosts []string `json:"hosts,omitempty"`
	// Exempt are TLS server names that stay opaque tunnels (pinned or
	// client-certificate origins).
	Exempt      []string                  `json:"exempt,omitempty"`
	Credentials []InterceptCredentialSpec `json:"credentials,omitempty"`
	HTTP        InterceptHTTPSpec         `json:"http,omitempty"`
}

// InterceptCredentialSpec is a header egret sets from a mounted Secret.
type InterceptCredentialSpec struct {
	// Name names it in logs (a Secret's namespace/name), never its value.
	Name string `json:"name,omitempty"`
	// Header defaults to Authorization (required for scheme raw).
	Header string `json:"header,omitempty"`
	// Scheme is bearer (default), basic or raw.
	Scheme string `json:"scheme,omitempty"`
	// Dir is the mounted Secret: its token (or username and password) key.
	Dir string `json:"dir,omitempty"`
	// Files name the files instead of Dir.
	Files []string `json:"files,omitempty"`
}

// InterceptHTTPSpec are a site's method and path rules.
type InterceptHTTPSpec struct {
	Mode    string              `json:"mode,omitempty"`    // enforce (default) or report
	Default string              `json:"default,omitempty"` // allow or deny
	Rules   []InterceptRuleSpec `json:"rules,omitempty"`
}

// InterceptRuleSpec is one method and path rule.
type InterceptRuleSpec struct {
	Action       string   `json:"action,omitempty"`
	Methods      []string `json:"methods,omitempty"`
	Paths        []string `json:"paths,omitempty"`
	PathPrefixes []string `json:"path_prefixes,omitempty"`
}

// Intercept is the validated interception configuration; nil when off.
type Intercept struct {
	CADir        string
	OriginCAFile string
	// Sites are the engine's specs, every credential's files spelled out.
	Sites []intercept.SiteSpec
	// Secrets are the Secrets policies' credentials may name
	// (namespace/name).
	Secrets []string
	// PublishNamespace and PublishName name the ConfigMap the CA's
	// certificates are published to; "" when not published.
	PublishNamespace, PublishName string
}

// SiteSpec maps a site of the file to the engine's form.
func (s InterceptSiteSpec) SiteSpec() intercept.SiteSpec {
	out := intercept.SiteSpec{Hosts: s.Hosts, Exempt: s.Exempt}
	for _, c := range s.Credentials {
		cs := intercept.CredentialSpec{Name: c.Name, Header: c.Header, Scheme: c.Scheme, Files: c.Files}
		if len(cs.Files) == 0 && c.Dir != "" {
			if strings.EqualFold(c.Scheme, "basic") {
				cs.Files = []string{filepath.Join(c.Dir, intercept.UsernameFile), filepath.Join(c.Dir, intercept.PasswordFile)}
			} else {
				cs.Files = []string{filepath.Join(c.Dir, intercept.TokenFile)}
			}
		}
		out.Credentials = append(out.Credentials, cs)
	}
	out.HTTP = intercept.RulesSpec{Mode: s.HTTP.Mode, Default: s.HTTP.Default}
	for _, r := range s.HTTP.Rules {
		out.HTTP.Rules = append(out.HTTP.Rules, intercept.RuleSpec{Action: r.Action, Methods: r.Methods, Paths: r.Paths, PathPrefixes: r.PathPrefixes})
	}
	return out
}

// intercept reads the interception section. A sidecar never terminates
// TLS: asking it to is refused, naming the gateway.
func (l *loader) intercept(f *File, p *Proxy, bad func(error)) {
	fi := f.Intercept
	if fi.CADir == "" && fi.OriginCAFile == "" && len(fi.Sites) == 0 && len(fi.Secrets) == 0 {
		return
	}
	if p.Role != RoleGateway {
		bad(atKey("intercept", fmt.Errorf("the sidecar never terminates TLS: move the intercept section to the egress gateway's configuration (role: gateway) and route these hosts to the gateway")))
		return
	}
	if fi.CADir == "" {
		bad(atKey("intercept.ca_dir", fmt.Errorf("interception needs ca_dir: the directory the interception CA Secret (tls.crt, tls.key) is mounted at")))
		return
	}
	if len(fi.Sites) == 0 && len(fi.Secrets) == 0 && !p.Policy.Enabled {
		bad(atKey("intercept.sites", fmt.Errorf("interception needs at least one site, or per-workload policies (EGRET_POLICY) whose intercept rules name the sites: list the hosts to intercept under sites")))
		return
	}
	out := &Intercept{CADir: fi.CADir, OriginCAFile: fi.OriginCAFile}
	if ref := fi.PublishConfigMap; ref != "" {
		ns, name, ok := strings.Cut(ref, "/")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			bad(atKey("intercept.publish_configmap", fmt.Errorf("%q: a ConfigMap is namespace/name, like egret-system/egret-intercept-ca", ref)))
		}
		out.PublishNamespace, out.PublishName = ns, name
	}
	for i, ref := range fi.Secrets {
		ns, name, ok := strings.Cut(ref, "/")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			bad(atKey(fmt.Sprintf("intercept.secrets[%d]", i), fmt.Errorf("%q: a Secret is namespace/name, like shop/openai", ref)))
			continue
		}
		out.Secrets = append(out.Secrets, ref)
	}
	for i, s := range fi.Sites {
		spec := s.SiteSpec()
		for j, c := range s.Credentials {
			if c.Dir != "" && len(c.Files) > 0 {
				bad(atKey(fmt.Sprintf("intercept.sites[%d].credentials[%d]", i, j), fmt.Errorf("credential %s: give dir or files, not both", c.Name)))
			}
		}
		if _, err := intercept.CompileSite(spec, nil); err != nil {
			bad(atKey(fmt.Sprintf("intercept.sites[%d]", i), err))
			continue
		}
		out.Sites = append(out.Sites, spec)
	}
	p.Intercept = out
}
