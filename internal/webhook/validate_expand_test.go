package webhook

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestValidateDependentVariables: the webhook judges $(VAR) the way the
// kubelet expands it (lint's expansion). It cannot read Secret values, so a
// password made of references to Secret variables is accepted (not a plain
// value), and whether the Secret's value needs percent-encoding is not known
// here (egret lint checks it when the Secret is in its input). A password
// written into the manifest is refused under enforce.
func TestValidateDependentVariables(t *testing.T) {
	fromSecret := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "proxy-creds"}, Key: key}}}
	}
	np := "localhost,127.0.0.1,::1,[::1],.svc,.cluster.local,kubernetes,kubernetes.default,kubernetes.default.svc," +
		"kubernetes.default.svc.cluster.local,169.254.169.254,10.96.0.0/16,10.244.0.0/23,10.96.0.1,172.18.0.2"
	withURL := func(url string) *corev1.Pod {
		return pod(nil, fromSecret("PROXY_USER", "user"), fromSecret("PROXY_PASS", "pass"),
			corev1.EnvVar{Name: "HTTPS_PROXY", Value: url}, corev1.EnvVar{Name: "https_proxy", Value: "$(HTTPS_PROXY)"},
			corev1.EnvVar{Name: "HTTP_PROXY", Value: url}, corev1.EnvVar{Name: "http_proxy", Value: "$(HTTP_PROXY)"},
			corev1.EnvVar{Name: "NO_PROXY", Value: np}, corev1.EnvVar{Name: "no_proxy", Value: "$(NO_PROXY)"})
	}
	enforce := Input{Policy: testPolicy(t, func(c *Config) { c.Validation = "enforce" }), Namespace: ns("shop", nil, nil), Cluster: testCluster()}
	rules := func(res ValidateResult) string {
		var ids []string
		for _, f := range res.Findings {
			ids = append(ids, f.Rule+": "+f.Message)
		}
		return strings.Join(ids, "\n")
	}

	res := Validate(withURL("https://$(PROXY_USER):$(PROXY_PASS)@gate.corp.example:8443"), enforce)
	if res.Denied != "" || strings.Contains(rules(res), "proxy-credentials-in-value") || strings.Contains(rules(res), "proxy-url-unencoded") {
		t.Errorf("URL built from Secret variables: denied %q, findings:\n%s", res.Denied, rules(res))
	}

	res = Validate(withURL("http://$(PROXY_USER):$(PROXY_PASS)@gate.corp.example:8080"), enforce)
	if res.Denied != "" || !strings.Contains(rules(res), "proxy-credentials-cleartext") {
		t.Errorf("http:// with Secret credentials: want admitted with a clear-text warning; denied %q, findings:\n%s", res.Denied, rules(res))
	}

	res = Validate(withURL("https://$(PROXY_USER):hunter2@gate.corp.example:8443"), enforce)
	if !strings.Contains(res.Denied, "proxy-credentials-in-value") || !strings.Contains(res.Denied, "HTTPS_PROXY carries a user name and password as a plain value") {
		t.Errorf("literal password: want denied for proxy-credentials-in-value, got %q", res.Denied)
	}
	if strings.Contains(res.Denied, "hunter2") {
		t.Errorf("the denial shows the password: %s", res.Denied)
	}
}
