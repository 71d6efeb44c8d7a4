package lint

import (
	"strings"

	"egret.io/egret/internal/noproxy"
)

// javaOptionVars are variables the JVM (or common launch scripts) read for
// options. The JVM itself reads JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS (the
// java launcher, JDK 9+) and _JAVA_OPTIONS; JAVA_OPTS and CATALINA_OPTS are
// read by the start scripts of many images.
var javaOptionVars = []string{"JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS", "JAVA_OPTS", "CATALINA_OPTS"}

func isJavaOptionsVar(name string) bool {
	for _, n := range javaOptionVars {
		if n == name {
			return true
		}
	}
	return false
}

// javaProps returns the -Dkey=value system properties in an options string,
// split as the JVM splits JAVA_TOOL_OPTIONS.
func javaProps(s string) map[string]string {
	return propsFromWords(noproxy.SplitJavaOptions(s))
}

func propsFromWords(words []string) map[string]string {
	out := map[string]string{}
	for _, w := range words {
		if !strings.HasPrefix(w, "-D") {
			continue
		}
		k, v, _ := strings.Cut(w[2:], "=")
		if k != "" {
			out[k] = v
		}
	}
	return out
}

// jvmSettings are the JVM proxy properties a container sets, wherever they
// come from (option variables, command, arguments).
type jvmSettings struct {
	props   map[string]string
	sources map[string]*envVar // property -> the variable that set it (nil: command line)
	unknown bool               // an option variable exists whose value cannot be seen
}

func jvmSettingsOf(c *container) jvmSettings {
	s := jvmSettings{props: map[string]string{}, sources: map[string]*envVar{}}
	for _, n := range javaOptionVars {
		v := c.env.get(n)
		if v == nil {
			continue
		}
		if !v.known {
			s.unknown = true
			continue
		}
		for k, val := range javaProps(v.value) {
			s.props[k], s.sources[k] = val, v
		}
	}
	var words []string
	for _, w := range append(append([]string{}, c.c.Command...), c.c.Args...) {
		words = append(words, noproxy.SplitJavaOptions(w)...)
	}
	for k, val := range propsFromWords(words) {
		s.props[k], s.sources[k] = val, nil
	}
	if c.env.opaque {
		s.unknown = true
	}
	return s
}
