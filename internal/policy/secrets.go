package policy

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"weak"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"egret.io/egret/internal/intercept"
)

// Secrets is the Interception of a gateway that intercepts: the Secrets
// its configuration grants to policies' credentials (Grants, each
// "namespace/name"), read from the API server one by one — the gateway
// lists and watches exactly those Secrets, never a namespace's — and the
// credentials built from them, kept current as a Secret changes: a new
// value takes effect for the next request; a deleted Secret, or one
// without the key, leaves its credentials unloaded (their requests are
// answered 503, never sent without the credential); a value egret refuses
// (a line break, a control character) leaves the previous one in force.
// Logs name the Secret and its key, never a value.
type Secrets struct {
	// Client reads the Secrets; required.
	Client kubernetes.Interface
	// Grants returns the granted Secrets ("namespace/name"), as the
	// configuration in force says.
	Grants func() []string
	// Context bounds the watches; nil means context.Background().
	Context context.Context
	// Logger receives what happened to a Secret; nil discards it.
	Logger *slog.Logger

	// The credentials are held weakly: a credential no compiled policy
	// holds any more is collected, and its entries go at the next
	// Credential call, so what tenants' policy edits leave behind (header
	// names, schemes) is not kept.
	mu      sync.Mutex
	creds   map[string]weak.Pointer[intercept.Credential] // by credKey
	watches map[string]*secretWatch                       // by namespace/name
}

type secretWatch struct {
	data  map[string][]byte // nil: no Secret (yet, or deleted)
	creds []boundCredential
}

type boundCredential struct {
	c    weak.Pointer[intercept.Credential]
	keys []string
}

// held counts the credentials still held (for tests).
func (s *Secrets) held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune()
	return len(s.creds)
}

// prune drops the entries of collected credentials (s.mu is held).
func (s *Secrets) prune() {
	for k, wp := range s.creds {
		if wp.Value() == nil {
			delete(s.creds, k)
		}
	}
	for _, w := range s.watches {
		w.creds = slices.DeleteFunc(w.creds, func(b boundCredential) bool { return b.c.Value() == nil })
	}
}

// Granted reports whether the configuration grants namespace/name.
func (s *Secrets) Granted(namespace, name string) bool {
	if s.Grants == nil {
		return false
	}
	ref := namespace + "/" + name
	for _, g := range s.Grants() {
		if g == ref {
			return true
		}
	}
	return false
}

// Credential returns the credential of spec from the keys of
// namespace/name; equal specs share one, so policies compiled again do
// not add watchers.
func (s *Secrets) Credential(spec intercept.CredentialSpec, namespace, name string, keys []string) (*intercept.Credential, error) {
	ref := namespace + "/" + name
	key := strings.Join(append([]string{ref, strings.ToLower(spec.Scheme), strings.ToLower(spec.Header)}, keys...), "\x00")
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.creds[key].Value(); c != nil {
		return c, nil
	}
	c, err := intercept.NewCredential(spec, "")
	if err != nil {
		return nil, err
	}
	if s.creds == nil {
		s.creds, s.watches = map[string]weak.Pointer[intercept.Credential]{}, map[string]*secretWatch{}
	}
	s.prune()
	s.creds[key] = weak.Make(c)
	w := s.watches[ref]
	if w == nil {
		w = &secretWatch{}
		s.watches[ref] = w
		s.watch(namespace, name)
	}
	b := boundCredential{c: weak.Make(c), keys: keys}
	w.creds = append(w.creds, b)
	if w.data != nil {
		s.apply(ref, w.data, c, keys)
	}
	return c, nil
}

// watch follows one Secret (s.mu is held).
func (s *Secrets) watch(namespace, name string) {
	ctx := s.Context
	if ctx == nil {
		ctx = context.Background()
	}
	ref := namespace + "/" + name
	lw := cache.NewListWatchFromClient(s.Client.CoreV1().RESTClient(), "secrets", namespace, fields.OneTermEqualSelector("metadata.name", name))
	_, inf := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Secret{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { s.update(ref, obj) },
			UpdateFunc: func(_, obj any) { s.update(ref, obj) },
			DeleteFunc: func(any) { s.update(ref, nil) },
		},
	})
	go inf.RunWithContext(ctx)
}

func (s *Secrets) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// update puts a Secret's new data (obj nil: deleted) in force.
func (s *Secrets) update(ref string, obj any) {
	var data map[string][]byte
	if sec, ok := obj.(*corev1.Secret); ok {
		data = sec.Data
		if data == nil {
			data = map[string][]byte{}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.watches[ref]
	if w == nil {
		return
	}
	w.data = data
	if data == nil {
		s.logger().Warn("intercept credential Secret deleted: its credentials are unloaded, and their requests refused", "secret", ref)
		for _, b := range w.creds {
			if c := b.c.Value(); c != nil {
				c.Clear()
			}
		}
		return
	}
	for _, b := range w.creds {
		if c := b.c.Value(); c != nil {
			s.apply(ref, data, c, b.keys)
		}
	}
}

// apply sets one credential from a Secret's data (s.mu is held).
func (s *Secrets) apply(ref string, data map[string][]byte, c *intercept.Credential, keys []string) {
	parts := make([][]byte, len(keys))
	for i, k := range keys {
		v, ok := data[k]
		if !ok {
			s.logger().Error("intercept credential Secret has no such key: the credential is unloaded, and its requests refused", "secret", ref, "key", k)
			c.Clear()
			return
		}
		parts[i] = v
	}
	if err := c.Set(parts); err != nil {
		s.logger().Error("intercept credential not reloaded; the previous value stays in force", "error", err.Error())
		return
	}
	s.logger().Info("intercept credential loaded", "credential", c.Name, "header", c.Header)
}
