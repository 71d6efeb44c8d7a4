// Package discovery computes a cluster's NO_PROXY from the live cluster and
// keeps it in a ConfigMap in every opted-in namespace.
//
// Compute is pure: Inputs (ServiceCIDRs, Node podCIDRs, the kubernetes
// Service and its EndpointSlices, user additions) in, an ordered, de-duplicated
// Result out, each entry with the sources it came from. Read gathers Inputs
// from a client.Reader (an informer cache or a direct client). Controller runs
// both under a controller-runtime manager: every replica tracks the current
// Result (the webhook reads it), the elected leader writes the ConfigMaps.
package discovery
