// Package credentials holds the user name and password egret presents to
// upstream proxies, and rotates them without a restart.
//
// A Store keeps the current credential and, after a rotation, the previous
// one until the new one has worked once: an attempt that gets a 407 with the
// new credential is repeated with the previous one, so a Secret that is
// updated a little before the provider accepts the new password causes no
// failed request. Once the new credential has succeeded the previous one is
// dropped and the Store's retire hook runs (the proxy closes keep-alive
// connections that were authenticated with it).
//
// Dir reads the "username" and "password" files of a mounted Secret
// (PROXY_CREDENTIALS_DIR, /var/run/secrets/proxy by default), and for
// Kerberos the optional "keytab" (which may stand in for the password) and
// "krb5.conf", and re-reads them when the kubelet swaps its "..data"
// symlink.
//
// No function of this package puts a password into an error or a log
// message; Credential's String and Format print only the user name.
package credentials
