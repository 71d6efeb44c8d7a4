// Package trust knows how each client runtime finds the CA certificates it
// trusts, and builds what egret gives pods behind a TLS-intercepting proxy:
// one PEM bundle (the system roots plus the corporate CAs, never the
// corporate CAs alone) and a PKCS#12 trust store of the same certificates
// for the JVM.
//
// The per-runtime model is data (Runtimes): which variable, Java property or
// file each runtime reads, in which order, whether it adds to or replaces
// the runtime's default roots, and when it reads the file again — each row
// with its source. Resolve says, for one environment, which file a runtime
// will use; InjectedEnv and JavaProperties are the settings egret's webhook
// injects, and a test proves they reach every modelled runtime. The model
// sits beside package noproxy's client models (which say where a request
// goes; this package says whom the client then believes) and follows its
// style: pure functions of their inputs, no environment read, nothing sent.
//
// ParsePEM, Build and Bundle turn a source (a trust-manager Bundle target or
// any ConfigMap or Secret with PEM certificates) into the files egret
// writes; every input is bounded and a private key in a source is refused.
package trust
