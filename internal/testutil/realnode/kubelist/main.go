// Command kubelist is the real-node tests' client-go program in a pod
// (realnode.ClientGoImage): with the pod's ServiceAccount
// (rest.InClusterConfig: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)
// it lists the pods of its namespace through client-go's own transport,
// which takes its proxy from the environment (http.ProxyFromEnvironment)
// as every client-go program in a pod does. It prints the API server's
// URL, the proxy net/http picks for it ("direct" for none) and the pods'
// names, and exits 1 on an error.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func main() {
	if err := run(); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	cfg.Timeout = 20 * time.Second
	req, err := http.NewRequest(http.MethodGet, cfg.Host, nil)
	if err != nil {
		return err
	}
	proxy, err := http.ProxyFromEnvironment(req)
	if err != nil {
		return err
	}
	via := "direct"
	if proxy != nil {
		via = proxy.Redacted()
	}
	fmt.Printf("host %s\nproxy %s\n", cfg.Host, via)
	ns, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pods, err := cs.CoreV1().Pods(strings.TrimSpace(string(ns))).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	fmt.Printf("pods %s\n", strings.Join(names, " "))
	return nil
}
