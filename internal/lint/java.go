package lint

import "strings"

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

// javaProps returns the -Dkey=value system properties in an options string.
// Words are split on blanks; single and double quotes group.
func javaProps(s string) map[string]string {
	return propsFromWords(splitWords(s))
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

// splitWords splits s on blanks, honouring single and double quotes.
func splitWords(s string) []string {
	var out []string
	var b strings.Builder
	in := false
	var quote byte
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case quote != 0 && ch == quote:
			quote = 0
		case quote != 0:
			b.WriteByte(ch)
		case ch == '"' || ch == '\'':
			quote, in = ch, true
		case ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r':
			if in {
				out = append(out, b.String())
				b.Reset()
				in = false
			}
		default:
			b.WriteByte(ch)
			in = true
		}
	}
	if in {
		out = append(out, b.String())
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
		words = append(words, splitWords(w)...)
	}
	for k, val := range propsFromWords(words) {
		s.props[k], s.sources[k] = val, nil
	}
	if c.env.opaque {
		s.unknown = true
	}
	return s
}
