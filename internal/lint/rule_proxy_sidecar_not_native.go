package lint

const idSidecarNotNative = "proxy-sidecar-not-native"

var ruleSidecarNotNative = Rule{
	ID:       idSidecarNotNative,
	Severity: Error,
	Summary:  "a proxy sidecar runs as a plain container instead of a native sidecar",
	Help: "A proxy in `containers` starts in parallel with the application, so the first requests race it " +
		"and fail, and it keeps a Job's pod running after the job is done. Declare it under `initContainers` " +
		"with `restartPolicy: Always` (a native sidecar: beta in Kubernetes 1.29, GA in 1.33) and a " +
		"startupProbe or readinessProbe, so the application starts only once the proxy listens and the proxy stops " +
		"after it. A proxy in `initContainers` without `restartPolicy: Always` never exits, so the pod never starts.",
	pod: checkSidecarNotNative,
}

func checkSidecarNotNative(p *pod) {
	apps := 0
	for _, c := range p.containers {
		if !c.isInit() && c.proxy == notProxy {
			apps++
		}
	}
	for _, c := range p.containers {
		switch {
		case c.proxy == notProxy:
		case c.isInit() && !c.native:
			p.report(idSidecarNotNative, Error, c, c.field,
				"%s proxy %q is an init container without restartPolicy: Always, so it never exits and the pod never starts: add restartPolicy: Always", c.proxy, c.c.Name)
		case !c.isInit() && apps > 0:
			p.report(idSidecarNotNative, Error, c, c.field,
				"%s proxy %q runs as a plain container beside the application, which races it at start (and a Job never completes): move it to initContainers with restartPolicy: Always and a startupProbe", c.proxy, c.c.Name)
		}
	}
}
