package lint

import (
	"reflect"
	"strings"
	"testing"
)

// TestParseCfg: each tool's configuration format, the settings the rules
// compare with the environment.
func TestParseCfg(t *testing.T) {
	tests := []struct {
		name, file, data string
		proxies          map[string]string
		noProxy          []string
		own, password    bool
		mirrors          []string
	}{
		{name: "maven-first-active-per-protocol", file: "/root/.m2/settings.xml",
			data: `<settings><proxies>
			  <proxy><active>false</active><protocol>http</protocol><host>off</host><port>1</port></proxy>
			  <proxy><protocol>http</protocol><host>gw</host><port>3128</port><username>u</username><password>p</password><nonProxyHosts>localhost|*.svc</nonProxyHosts></proxy>
			  <proxy><protocol>http</protocol><host>second</host></proxy></proxies></settings>`,
			proxies: map[string]string{"http": "http://gw:3128"}, noProxy: []string{"localhost", "*.svc"}, own: true, password: true},
		{name: "npmrc", file: "/home/node/.npmrc", data: "; comment\nproxy=http://gw:3128\nhttps-proxy = \"http://u:p@gw:3128\"\nnoproxy=.svc,localhost\n",
			proxies: map[string]string{"http": "http://gw:3128", "https": "http://u:p@gw:3128"}, noProxy: []string{".svc", "localhost"}, own: true, password: true},
		{name: "pip", file: "/etc/pip.conf", data: "[global]\ntimeout = 60\nproxy = http://gw:3128\n[list]\nformat=columns\n",
			proxies: map[string]string{"all": "http://gw:3128"}},
		{name: "apt-flat-and-direct", file: "/etc/apt/apt.conf.d/90proxy",
			data:    "Acquire::http::Proxy \"http://gw:3128\";\nAcquire::https::Proxy \"http://gw:3128\"; // same\nAcquire::http::Proxy::mirror.corp DIRECT;\n",
			proxies: map[string]string{"http": "http://gw:3128", "https": "http://gw:3128"}, noProxy: []string{"mirror.corp"}, own: true},
		{name: "apt-nested", file: "/etc/apt/apt.conf", data: "Acquire {\n  http {\n    Proxy \"http://gw:3128\";\n    Proxy::deb.corp \"DIRECT\";\n  };\n};\n",
			proxies: map[string]string{"http": "http://gw:3128"}, noProxy: []string{"deb.corp"}, own: true},
		{name: "gitconfig", file: "/root/.gitconfig", data: "[http]\n\tproxy = http://gw:3128\n[http \"https://git.corp\"]\n\tproxy = \"\"\n[user]\n\tname = x\n",
			proxies: map[string]string{"http": "http://gw:3128"}, noProxy: []string{"git.corp"}},
		{name: "hosts-toml", file: "/etc/containerd/certs.d/docker.io/hosts.toml",
			data:    "server = \"https://registry-1.docker.io\"\n[host.\"https://m1.internal:5000\"]\n  capabilities = [\"pull\"]\n[host.\"http://10.0.0.5:5000\"]\n",
			proxies: map[string]string{}, mirrors: []string{"https://registry-1.docker.io", "http://10.0.0.5:5000", "https://m1.internal:5000"}},
		{name: "agent-proxy-url-deep", file: "/etc/prometheus/prometheus.yml",
			data:    "scrape_configs:\n- job_name: x\n  proxy_url: http://gw:3128\n  static_configs: [{targets: [a:1]}]\n",
			proxies: map[string]string{"all": "http://gw:3128"}},
		{name: "datadog-proxy-block", file: "/etc/datadog-agent/datadog.yaml",
			data:    "proxy:\n  http: http://gw:3128\n  https: http://gw:3128\n  no_proxy:\n  - .svc\n  - 10.0.0.0/8\n",
			proxies: map[string]string{"http": "http://gw:3128", "https": "http://gw:3128"}, noProxy: []string{".svc", "10.0.0.0/8"}, own: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, ok := cfgKindOf(tt.file)
			if !ok {
				t.Fatalf("%s not recognised", tt.file)
			}
			c, err := parseCfg(k, tt.data)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.proxies, tt.proxies) {
				t.Errorf("proxies %v, want %v", c.proxies, tt.proxies)
			}
			if strings.Join(c.noProxy, ",") != strings.Join(tt.noProxy, ",") || c.ownNoProxy != tt.own {
				t.Errorf("noProxy %q own %v, want %q own %v", c.noProxy, c.ownNoProxy, tt.noProxy, tt.own)
			}
			if c.password != tt.password {
				t.Errorf("password %v", c.password)
			}
			if strings.Join(c.mirrors, ",") != strings.Join(tt.mirrors, ",") {
				t.Errorf("mirrors %q, want %q", c.mirrors, tt.mirrors)
			}
		})
	}
}

// FuzzParseCfg: no input makes a configuration parser panic.
func FuzzParseCfg(f *testing.F) {
	for _, s := range []string{"<settings><proxies><proxy><host>h</host></proxy></proxies></settings>", "proxy=http://gw:3128\n",
		"[global]\nproxy=x\n", "Acquire { http { Proxy \"x\"; }; };", "[http \"u\"]\nproxy=\n", "server = \"x\"\n[host.\"y\"]\n",
		"a:\n  proxy_url: x\n  no_proxy: [a, b]\n", "}{;\"", "[", "Acquire::http::Proxy::"} {
		for k := cfgMaven; k <= cfgAgent; k++ {
			f.Add(int(k), s)
		}
	}
	f.Fuzz(func(t *testing.T, kind int, data string) {
		if kind < int(cfgMaven) || kind > int(cfgAgent) {
			return
		}
		parseCfg(cfgKind(kind), data)
	})
}
