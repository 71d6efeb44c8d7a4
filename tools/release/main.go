// Command release signs egret's release artefacts and verifies them, with
// sigstore's libraries (github.com/sigstore/sigstore-go): make release runs
//
//	release keygen -dir DIR                      # cosign.key (encrypted, cosign's format) and cosign.pub
//	release pubkey -key cosign.key               # its public key, PEM
//	release sign -key cosign.key FILE...         # FILE.sigstore.json: a Sigstore bundle per file
//	release provenance -key cosign.key -out provenance.sigstore.json -version V -commit C FILE...
//	                                             # an SLSA v1 provenance statement over FILEs, signed (DSSE)
//	release verify -pub cosign.pub -dir DIR      # every bundle in DIR, by sigstore-go's verifier
//
// The password of an encrypted key is $COSIGN_PASSWORD (empty when
// unset), as for cosign. Signing is key-based and offline (no Fulcio, no
// Rekor): the bundles verify with `cosign verify-blob --key cosign.pub
// --bundle FILE.sigstore.json --insecure-ignore-tlog FILE` as with this
// command's verify. A publishing pipeline that wants keyless signatures
// signs the same files with `cosign sign-blob --bundle` (docs/release.md).
package main

import (
	"fmt"
	"os"
)

const usage = `usage: release keygen -dir DIR
       release pubkey -key KEY
       release sign -key KEY FILE...
       release provenance -key KEY -out FILE -version V -commit C [-builder ID] FILE...
       release verify -pub PUB -dir DIR`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "keygen":
		err = keygen(os.Args[2:])
	case "pubkey":
		err = pubkey(os.Args[2:])
	case "sign":
		err = signFiles(os.Args[2:])
	case "provenance":
		err = provenance(os.Args[2:])
	case "verify":
		err = verifyDir(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q\n%s", os.Args[1], usage)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}
