// Package noproxy knows how NO_PROXY and the *_PROXY variables are read: by
// egret itself (Parse, Entry.Match: Go's net/http rules) and by each client
// runtime egret models (curl, wget, Python, Node, Java, ...). It explains a
// URL per client, lints a NO_PROXY value and renders it for other consumers
// (environment, ConfigMap, JAVA_TOOL_OPTIONS, systemd drop-ins).
//
// Everything here is a pure function of its inputs: no environment is read
// and nothing is sent on the network.
package noproxy
