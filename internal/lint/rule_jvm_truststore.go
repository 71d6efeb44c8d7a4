package lint

import (
	"crypto/x509"
	"path"
	"strings"

	"egret.io/egret/internal/trust"
)

const idJVMTrustStore = "jvm-truststore-incomplete"

// minPublicRoots is how many certificates a trust store must hold before
// it can stand for the system roots (Mozilla's set has about 140).
const minPublicRoots = 20

var ruleJVMTrustStore = Rule{
	ID:       idJVMTrustStore,
	Severity: Error,
	Summary:  "a JVM trust store holds only a few (corporate) CAs, not the system roots",
	Help: "-Djavax.net.ssl.trustStore replaces the JDK's cacerts: a store that holds only the corporate CA makes the " +
		"JVM trust nothing else, so every public endpoint the proxy does not intercept (and every internal one " +
		"signed by a public CA) fails with PKIX path building errors. Build the store from the system roots plus " +
		"the corporate CAs — egret's webhook writes one (truststore.p12) beside its PEM bundle.",
	pod: checkJVMTrustStore,
}

// volumeFile finds the ConfigMap or Secret key a container sees at file:
// kind ("ConfigMap", "Secret"), name and key; ok false when file is not in
// such a volume.
func (p *pod) volumeFile(c *container, file string) (kind, name, key string, ok bool) {
	file = path.Clean(file)
	for _, m := range c.c.VolumeMounts {
		dir := path.Clean(m.MountPath)
		rel := strings.TrimPrefix(file, dir+"/")
		if m.SubPath != "" {
			if file != dir {
				continue
			}
			rel = m.SubPath
		} else if rel == file {
			continue
		}
		for _, v := range p.in.Spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			switch {
			case v.ConfigMap != nil:
				kind, name = "ConfigMap", v.ConfigMap.Name
				key = rel
				for _, it := range v.ConfigMap.Items {
					if it.Path == rel {
						key = it.Key
					}
				}
			case v.Secret != nil:
				kind, name = "Secret", v.Secret.SecretName
				key = rel
				for _, it := range v.Secret.Items {
					if it.Path == rel {
						key = it.Key
					}
				}
			default:
				return "", "", "", false
			}
			return kind, name, key, true
		}
	}
	return "", "", "", false
}

func checkJVMTrustStore(p *pod) {
	if p.in.Resolver == nil {
		return
	}
	for _, c := range p.clients() {
		if !c.runtimes.has(rtJVM) {
			continue
		}
		js := jvmSettingsOf(c)
		file := js.props["javax.net.ssl.trustStore"]
		if file == "" {
			continue
		}
		kind, name, key, ok := p.volumeFile(c, file)
		if !ok {
			continue
		}
		var data map[string]string
		var err error
		if kind == "Secret" {
			data, err = p.in.Resolver.Secret(p.ns, name)
		} else {
			data, err = p.in.Resolver.ConfigMap(p.ns, name)
		}
		raw, has := data[key]
		if err != nil || !has {
			continue
		}
		passwords := []string{trust.TrustStorePassword, ""}
		if pw, set := js.props["javax.net.ssl.trustStorePassword"]; set {
			passwords = []string{pw}
		}
		var certs []*x509.Certificate
		for _, pw := range passwords {
			if cs, err := trust.ReadTrustStore([]byte(raw), pw); err == nil {
				certs = cs
				break
			}
		}
		if certs == nil || len(certs) >= minPublicRoots {
			continue // not a PKCS#12 store we can read (JKS, other password), or a full one
		}
		field := c.field
		if src := js.sources["javax.net.ssl.trustStore"]; src != nil {
			field = src.field
		}
		p.report(idJVMTrustStore, Error, c, field,
			"the JVM trust store %s (%s %s, key %s) holds only %d certificate(s) (%s) and replaces the JDK's cacerts: every endpoint not signed by them fails; build it from the system roots plus these CAs",
			file, kind, name, key, len(certs), strings.Join(trust.Names(certs), ", "))
	}
}
