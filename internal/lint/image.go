package lint

import (
	"path"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// runtime is a language runtime or tool whose proxy handling differs.
type runtime int

const (
	rtPython runtime = 1 << iota
	rtNode
	rtJVM
	rtCurl
)

// runtimeSet is the set of runtimes found in a container.
type runtimeSet int

func (s runtimeSet) has(r runtime) bool { return int(s)&int(r) != 0 }

// imageBase returns the last path element of an image reference without its
// tag or digest, lower-cased: "docker.io/library/python:3.12@sha256:.." -> "python".
func imageBase(image string) string {
	s := strings.ToLower(strings.TrimSpace(image))
	if i := strings.IndexByte(s, '@'); i >= 0 {
		s = s[:i]
	}
	s = path.Base(s)
	if i := strings.IndexByte(s, ':'); i >= 0 {
		s = s[:i]
	}
	return s
}

// imageRepo returns the image reference without registry host, tag or digest:
// "ghcr.io/egret-io/egret:v1" -> "egret-io/egret".
func imageRepo(image string) string {
	s := strings.ToLower(strings.TrimSpace(image))
	if i := strings.IndexByte(s, '@'); i >= 0 {
		s = s[:i]
	}
	if i := strings.LastIndexByte(s, ':'); i > strings.LastIndexByte(s, '/') {
		s = s[:i]
	}
	if i := strings.IndexByte(s, '/'); i >= 0 {
		if h := s[:i]; strings.ContainsAny(h, ".:") || h == "localhost" {
			s = s[i+1:]
		}
	}
	return s
}

var (
	jvmImages    = []string{"java", "openjdk", "jdk", "jre", "eclipse-temurin", "temurin", "amazoncorretto", "corretto", "zulu", "azul", "ibm-semeru", "semeru", "sapmachine", "liberica", "graalvm", "maven", "gradle", "tomcat", "jetty", "wildfly", "jboss", "payara", "open-liberty", "websphere-liberty"}
	pythonImages = []string{"python", "pypy", "miniconda", "anaconda", "conda"}
	nodeImages   = []string{"node", "nodejs", "javascript-node", "typescript-node", "bun", "deno"}
	// commandWord finds a runtime started from a command or a shell script.
	commandWord = regexp.MustCompile(`(?:^|[\s;&|(/"'])(java|node|npm|npx|yarn|pnpm|python|python[23](?:\.\d+)?|gunicorn|uvicorn|celery|pip|curl)(?:$|[\s;&|)"'])`)
)

// hasPrefixWord reports whether base is one of names, or starts with one
// followed by a digit, '-', '_' or '.' ("openjdk17", "python3.12-slim").
// "node-exporter" is not Node: for "node" only digits and "js" may follow.
func hasPrefixWord(base string, names []string) bool {
	for _, n := range names {
		if base == n {
			return true
		}
		if !strings.HasPrefix(base, n) {
			continue
		}
		next := base[len(n)]
		if n == "node" {
			if next >= '0' && next <= '9' {
				return true
			}
			continue
		}
		if next >= '0' && next <= '9' || next == '-' || next == '_' || next == '.' {
			return true
		}
	}
	return false
}

// detectRuntimes guesses the runtimes in a container from its image name,
// its command and arguments, and JVM-specific variables.
func detectRuntimes(c *corev1.Container, env *environment, injected bool) runtimeSet {
	var s runtimeSet
	base := imageBase(c.Image)
	if hasPrefixWord(base, jvmImages) {
		s |= runtimeSet(rtJVM)
	}
	if hasPrefixWord(base, pythonImages) {
		s |= runtimeSet(rtPython)
	}
	if hasPrefixWord(base, nodeImages) || strings.HasSuffix(base, "-node") {
		s |= runtimeSet(rtNode)
	}
	if base == "curl" || strings.HasPrefix(imageRepo(c.Image), "curlimages/") {
		s |= runtimeSet(rtCurl)
	}
	words := append(append([]string{}, c.Command...), c.Args...)
	for _, m := range commandWord.FindAllStringSubmatch(strings.Join(words, " "), -1) {
		switch w := m[1]; {
		case w == "java":
			s |= runtimeSet(rtJVM)
		case w == "node" || w == "npm" || w == "npx" || w == "yarn" || w == "pnpm":
			s |= runtimeSet(rtNode)
		case w == "curl":
			s |= runtimeSet(rtCurl)
		default:
			s |= runtimeSet(rtPython)
		}
	}
	for _, name := range env.order {
		if injected && (name == "JAVA_TOOL_OPTIONS" || name == "NODE_USE_ENV_PROXY") {
			continue // egret's webhook adds them to every container
		}
		if strings.HasPrefix(name, "JAVA_") || name == "JDK_JAVA_OPTIONS" || name == "_JAVA_OPTIONS" || name == "JVM_OPTS" || name == "CATALINA_OPTS" {
			s |= runtimeSet(rtJVM)
		}
		if name == "NODE_OPTIONS" || name == "NODE_ENV" || name == "NODE_USE_ENV_PROXY" {
			s |= runtimeSet(rtNode)
		}
		if name == "PYTHONPATH" || name == "PYTHONUNBUFFERED" || name == "PYTHONDONTWRITEBYTECODE" {
			s |= runtimeSet(rtPython)
		}
	}
	return s
}

// proxyKind names the forward proxy running in a container.
type proxyKind string

const (
	notProxy  proxyKind = ""
	portProxy proxyKind = "proxy on port 3128" // an unknown image listening on 3128
)

// ProxyPort is the port forward proxies listen on by convention.
const ProxyPort = 3128

var proxyImages = []string{"squid", "tinyproxy", "smokescreen", "privoxy", "3proxy", "goproxy", "envoy-forward-proxy"}

// egretSubcommands are egret subcommands that are not the proxy.
var egretSubcommands = map[string]bool{"iptables": true, "webhook": true, "lint": true, "doctor": true, "echo": true, "node": true, "noproxy": true, "version": true}

// detectProxy reports which forward proxy runs in c: egret (unless its
// command names another subcommand), squid, tinyproxy, smokescreen and
// similar images, or any container listening on port 3128.
func detectProxy(c *corev1.Container) proxyKind {
	base := imageBase(c.Image)
	words := append(append([]string{}, c.Command...), c.Args...)
	if base == "egret" || (len(c.Command) > 0 && path.Base(c.Command[0]) == "egret") {
		for _, w := range words {
			if egretSubcommands[w] {
				return notProxy
			}
			if w == "proxy" {
				break
			}
		}
		return "egret"
	}
	for _, n := range proxyImages {
		if base == n || strings.HasPrefix(base, n+"-") || strings.HasPrefix(base, n+"_") {
			return proxyKind(n)
		}
	}
	for _, w := range words {
		for _, n := range []string{"squid", "tinyproxy", "smokescreen"} {
			if path.Base(w) == n {
				return proxyKind(n)
			}
		}
	}
	for _, p := range c.Ports {
		if p.ContainerPort == ProxyPort {
			return portProxy
		}
	}
	return notProxy
}

// isGatewayCommand reports whether the container runs `egret proxy --role gateway`.
func isGatewayCommand(c *corev1.Container) bool {
	words := append(append([]string{}, c.Command...), c.Args...)
	for i, w := range words {
		if w == "--role=gateway" || w == "-role=gateway" {
			return true
		}
		if (w == "--role" || w == "-role") && i+1 < len(words) && words[i+1] == "gateway" {
			return true
		}
	}
	return false
}
