// Package webhook is egret's Kubernetes admission webhook.
//
// Mutate and Validate are pure: a Pod, its Namespace, the cluster NO_PROXY
// (package discovery) and a Policy in; a new Pod, admission warnings or a
// denial out. Mutate injects both-case HTTP_PROXY/HTTPS_PROXY/NO_PROXY,
// JAVA_TOOL_OPTIONS (appended), NODE_USE_ENV_PROXY=1 and, per mode, the
// native egret sidecar and the `egret iptables` init container. It keeps
// every value the user set and reports conflicts as warnings; mutating a
// mutated pod changes nothing. Validate runs the pod rules of package lint
// (one rule set for `egret lint` and the webhook).
//
// Handlers wrap both as controller-runtime admission handlers (/mutate,
// /validate); Run serves them with TLS from a CA the binary maintains in a
// Secret (or files from cert-manager) beside the NO_PROXY discovery
// controller.
package webhook
