package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// CAConfigMapKey is the key of the interception CA's certificates in the
// ConfigMap the gateway publishes (the webhook's --intercept-ca-configmap).
const CAConfigMapKey = "ca.crt"

// CAPublisher writes the certificates of the gateway's interception CA —
// the CA in force and the others pods must keep trusting during a rotation
// (intercept.Authority.Trusted), never a key — to one ConfigMap, for the
// webhook's trust-bundle controller to add to every injected pod's bundle
// (docs/interception.md, "Rotation with overlap"). The certificates are
// written sorted, so replicas that hold the same set write the same bytes.
type CAPublisher struct {
	// Client writes the ConfigMap; required.
	Client kubernetes.Interface
	// Namespace and Name name it.
	Namespace, Name string
	// Logger receives what happened; nil discards it.
	Logger *slog.Logger
	// Retry is the wait after a failed write; zero means 5 s.
	Retry time.Duration

	latest chan []*x509.Certificate
}

// Publish hands over the certificates to write (the latest wins); Run
// writes them.
func (p *CAPublisher) Publish(certs []*x509.Certificate) {
	if p.latest == nil {
		panic("policy: CAPublisher.Publish before Start")
	}
	for {
		select {
		case p.latest <- certs:
			return
		default:
			select {
			case <-p.latest: // drop the older set
			default:
			}
		}
	}
}

// Start prepares Publish and writes in the background until ctx ends.
func (p *CAPublisher) Start(ctx context.Context) {
	p.latest = make(chan []*x509.Certificate, 1)
	go p.run(ctx)
}

func (p *CAPublisher) run(ctx context.Context) {
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	retry := p.Retry
	if retry <= 0 {
		retry = 5 * time.Second
	}
	var pending []*x509.Certificate
	for {
		var wait <-chan time.Time
		if pending != nil {
			if err := p.write(ctx, pending); err != nil {
				log.Error("interception CA not published; the trust bundle keeps the last one", "configmap", p.Namespace+"/"+p.Name, "error", err.Error())
				wait = time.After(retry)
			} else {
				log.Info("interception CA published", "configmap", p.Namespace+"/"+p.Name, "certificates", len(pending))
				pending = nil
			}
		}
		select {
		case <-ctx.Done():
			return
		case pending = <-p.latest:
		case <-wait:
		}
	}
}

// CABundle is the ConfigMap's content for certs: sorted by fingerprint,
// each after a comment naming it.
func CABundle(certs []*x509.Certificate) string {
	type entry struct {
		fp string
		c  *x509.Certificate
	}
	es := make([]entry, 0, len(certs))
	for _, c := range certs {
		s := sha256.Sum256(c.Raw)
		es = append(es, entry{hex.EncodeToString(s[:]), c})
	}
	slices.SortFunc(es, func(a, b entry) int { return bytes.Compare([]byte(a.fp), []byte(b.fp)) })
	var b bytes.Buffer
	for i, e := range es {
		if i > 0 && e.fp == es[i-1].fp {
			continue
		}
		fmt.Fprintf(&b, "# egret interception CA (sha256 %s)\n", e.fp)
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: e.c.Raw})
	}
	return b.String()
}

func (p *CAPublisher) write(ctx context.Context, certs []*x509.Certificate) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	want := CABundle(certs)
	cms := p.Client.CoreV1().ConfigMaps(p.Namespace)
	cm, err := cms.Get(ctx, p.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "egret", "app.kubernetes.io/part-of": "egret"}},
			Data: map[string]string{CAConfigMapKey: want}}
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		return err
	case err != nil:
		return err
	case cm.Data[CAConfigMapKey] == want && len(cm.Data) == 1 && len(cm.BinaryData) == 0:
		return nil
	}
	cm.Data, cm.BinaryData = map[string]string{CAConfigMapKey: want}, nil
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}
