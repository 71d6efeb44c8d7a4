// Package lint finds the classic egress mistakes in Kubernetes objects: proxy
// variables without (or with an incomplete) NO_PROXY, credentials in plain
// values, one-case or disagreeing variables, JVM and Node.js containers that
// ignore the variables, proxy sidecars that are not native sidecars, and
// egress gateways without replicas, anti-affinity, a PodDisruptionBudget or
// the NetworkPolicy that makes them the only way out.
//
// One rule set, two front ends:
//
//   - CheckPod(PodInput) runs the pod rules on one pod spec. It is what the
//     admission webhook calls: PodInput carries the object identity, the
//     corev1.PodSpec, the annotations, a Resolver for the ConfigMaps and
//     Secrets referenced by envFrom/valueFrom, and the Cluster settings
//     (cluster domain and CIDRs, API server addresses, the expected proxy).
//     A Resolver returns ErrUnavailable for objects it cannot see (reported as
//     info, the variables are then not judged) and ErrNotFound for objects that
//     do not exist (a non-optional reference is then an error).
//   - Read/ReadPaths parse manifests (multi-document YAML, JSON, List kinds,
//     directories, stdin) into Objects that remember file and line, and
//     Check([]Object, Options) runs the pod rules on every workload (Pod,
//     Deployment, StatefulSet, DaemonSet, ReplicaSet, ReplicationController,
//     Job, CronJob, PodTemplate), resolving references against the ConfigMaps
//     and Secrets of the input, then the set rules that need several objects
//     (gateway replicas, anti-affinity, PodDisruptionBudget, NetworkPolicy).
//
// Every Finding names its rule (Rules lists them with a summary, help text
// and an anchor in docs/lint.md from DocsURL), a Severity (Info, Warning, Error), the
// object, the container and the field path ("spec.template.spec.containers[0].env[2]").
// Messages say what to change and never contain a secret value.
//
// WriteText, WriteJSON and WriteSARIF render findings; the JSON array (rule,
// severity, message, file, line, object, kind, namespace, name, container,
// field, docs) is a stable contract.
//
// Each rule lives in its own rule_*.go file: an ID constant, a Rule value
// with its documentation, and a check function. The NO_PROXY rules ask
// package noproxy for the per-runtime truth about entries.
package lint
