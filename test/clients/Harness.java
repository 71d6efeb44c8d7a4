import java.net.Proxy;
import java.net.ProxySelector;
import java.net.URI;
import java.net.InetSocketAddress;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.List;

/**
 * Java side of egret's NO_PROXY differential tests: asks the JDK's own
 * ProxySelector.getDefault() for each case. Input lines on stdin:
 * ID<TAB>URL<TAB>prop=value<TAB>prop=value... (the -D properties of the
 * case; all proxy properties are cleared between cases). Output lines:
 * ID<TAB>D | P:<host>:<port> | S:<host>:<port> | E
 */
public class Harness {
    static final String[] KEYS = {"http.proxyHost", "http.proxyPort", "https.proxyHost", "https.proxyPort",
        "proxyHost", "proxyPort", "socksProxyHost", "socksProxyPort", "http.nonProxyHosts"};

    public static void main(String[] args) throws Exception {
        boolean fromEnv = args.length > 0 && args[0].equals("env");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) continue;
            String[] f = line.split("\t", -1);
            if (!fromEnv) {
                for (String k : KEYS) System.clearProperty(k);
                for (int i = 2; i < f.length; i++) {
                    int eq = f[i].indexOf('=');
                    if (eq > 0) System.setProperty(f[i].substring(0, eq), f[i].substring(eq + 1));
                }
            }
            String out;
            try {
                List<Proxy> ps = ProxySelector.getDefault().select(new URI(f[1]));
                Proxy p = ps.get(0);
                if (p.type() == Proxy.Type.DIRECT) {
                    out = "D";
                } else {
                    InetSocketAddress a = (InetSocketAddress) p.address();
                    out = (p.type() == Proxy.Type.SOCKS ? "S:" : "P:") + a.getHostString() + ":" + a.getPort();
                }
            } catch (Exception e) {
                out = "E";
            }
            System.out.println(f[0] + "\t" + out);
        }
    }
}
