package lint

// Rule describes one check. The rule set is fixed at build time; Rules lists
// it for documentation and SARIF.
type Rule struct {
	ID       string   // kebab-case, stable; also the anchor in docs/lint.md (see DocsURL)
	Severity Severity // the default severity of its findings
	Summary  string   // one line: what the rule finds
	Help     string   // why it matters and what to change (plain text, a few sentences)

	pod func(*pod)   // a rule about one pod; nil for set rules
	set func(*check) // a rule about the whole input (gateways, NetworkPolicy); nil for pod rules
}

// Scope says whether a rule needs more than one pod.
func (r Rule) Scope() string {
	if r.set != nil {
		return "manifest"
	}
	return "pod"
}

// rules is the rule set, sorted by ID; each rule lives in its own rule_*.go
// file. rules_test.go checks the order, the IDs and that every rule is
// documented in docs/lint.md.
var rules = []Rule{
	ruleConfigFileNoProxy,
	ruleConfigFileCredentials,
	ruleConfigFileProxy,
	ruleContainerdMirror,
	ruleCurlUpper,
	ruleEgressPolicyCoverage,
	ruleGatewayAntiAffinity,
	ruleGatewayNetworkPolicy,
	ruleGatewayPDB,
	ruleGatewayReplicas,
	ruleJVMHTTPSNonProxy,
	ruleJVMNonProxyHosts,
	ruleJVMProxyProps,
	ruleJVMTrustStore,
	ruleMavenSettingsProxy,
	ruleNoProxyIgnored,
	ruleNoProxyIncomplete,
	ruleNoProxyMissing,
	ruleNoProxyTooBroad,
	ruleNodeEnvProxy,
	ruleCredentialsCleartext,
	ruleCredentialsInValue,
	ruleSidecarNotNative,
	ruleProxyUnexpected,
	ruleURLScheme,
	ruleURLUnencoded,
	ruleCaseMismatch,
	ruleSingleCase,
	ruleRefMissing,
	ruleRefUnresolved,
	ruleShortNameViaProxy,
	ruleTLSCAMissing,
}

// Rules returns the rule set sorted by ID. The result is a copy.
func Rules() []Rule {
	out := make([]Rule, len(rules))
	copy(out, rules)
	return out
}

// RuleByID returns the rule with the given ID.
func RuleByID(id string) (Rule, bool) {
	for _, r := range rules {
		if r.ID == id {
			return r, true
		}
	}
	return Rule{}, false
}
