package main

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/secure-systems-lab/go-securesystemslib/encrypted"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
)

// cosign's PEM block type for an encrypted private key (cosign
// generate-key-pair writes the same).
const encryptedKeyType = "ENCRYPTED SIGSTORE PRIVATE KEY"

func keygen(args []string) error {
	fs := flag.NewFlagSet("keygen", flag.ExitOnError)
	dir := fs.String("dir", ".", "where to write cosign.key and cosign.pub")
	fs.Parse(args)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	enc, err := encrypted.Encrypt(der, []byte(os.Getenv("COSIGN_PASSWORD")))
	if err != nil {
		return err
	}
	pub, err := cryptoutils.MarshalPublicKeyToPEM(key.Public())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*dir, "cosign.key"), pem.EncodeToMemory(&pem.Block{Type: encryptedKeyType, Bytes: enc}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*dir, "cosign.pub"), pub, 0o644)
}

func pubkey(args []string) error {
	fs := flag.NewFlagSet("pubkey", flag.ExitOnError)
	keyPath := fs.String("key", "", "the private key (cosign.key)")
	fs.Parse(args)
	kp, err := loadKey(*keyPath)
	if err != nil {
		return err
	}
	pem, err := kp.GetPublicKeyPem()
	if err != nil {
		return err
	}
	_, err = os.Stdout.WriteString(pem)
	return err
}

// keypair is a P-256 key from a file, as sigstore-go's signer wants it.
type keypair struct {
	key *ecdsa.PrivateKey
}

func loadKey(path string) (*keypair, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%s: not a PEM private key (make one with release keygen or cosign generate-key-pair)", path)
	}
	var k crypto.PrivateKey
	switch block.Type {
	case encryptedKeyType, "ENCRYPTED COSIGN PRIVATE KEY":
		der, err := encrypted.Decrypt(block.Bytes, []byte(os.Getenv("COSIGN_PASSWORD")))
		if err != nil {
			return nil, fmt.Errorf("%s: decrypt: %v (set COSIGN_PASSWORD)", path, err)
		}
		k, err = x509.ParsePKCS8PrivateKey(der)
		if err != nil {
			return nil, err
		}
	default:
		k, err = cryptoutils.UnmarshalPEMToPrivateKey(b, cryptoutils.SkipPassword)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%s: want an ECDSA P-256 key (cosign's), got %T", path, k)
	}
	return &keypair{key: ec}, nil
}

// hint names a public key in a bundle: base64 of the SHA-256 of its DER, as
// sigstore-go's ephemeral keys do.
func hint(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return base64.StdEncoding.EncodeToString(sum[:]), nil
}

func (k *keypair) GetHashAlgorithm() protocommon.HashAlgorithm {
	return protocommon.HashAlgorithm_SHA2_256
}

func (k *keypair) GetSigningAlgorithm() protocommon.PublicKeyDetails {
	return protocommon.PublicKeyDetails_PKIX_ECDSA_P256_SHA_256
}

func (k *keypair) GetHint() []byte {
	h, _ := hint(k.key.Public())
	return []byte(h)
}

func (k *keypair) GetKeyAlgorithm() string { return "ECDSA" }

func (k *keypair) GetPublicKey() crypto.PublicKey { return k.key.Public() }

func (k *keypair) GetPublicKeyPem() (string, error) {
	b, err := cryptoutils.MarshalPublicKeyToPEM(k.key.Public())
	return string(b), err
}

func (k *keypair) SignData(_ context.Context, data []byte) ([]byte, []byte, error) {
	sum := sha256.Sum256(data)
	sig, err := ecdsa.SignASN1(rand.Reader, k.key, sum[:])
	if err != nil {
		return nil, nil, err
	}
	return sig, sum[:], nil
}

var errUsage = errors.New(usage)
