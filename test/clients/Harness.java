import java.io.BufferedReader;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.HttpURLConnection;
import java.net.URL;
import javax.net.ssl.HostnameVerifier;
import javax.net.ssl.HttpsURLConnection;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManager;
import javax.net.ssl.X509TrustManager;

/**
 * Java side of egret's NO_PROXY differential tests: a real HttpURLConnection
 * GET per case, through the JDK's ProxySelector.getDefault(). The test runs
 * it inside a network namespace where every name resolves to a local origin
 * and the proxies are local recording proxies; the test decides "direct" or
 * "proxy" from what those listeners see.
 *
 * Input lines on stdin: ID TAB URL TAB prop=value TAB ... (the case's -D
 * properties, set before the request; all proxy properties are cleared
 * between cases). With the argument "env" the properties are not touched:
 * the JVM took them from JAVA_TOOL_OPTIONS / JDK_JAVA_OPTIONS. Output, once
 * the request has ended: ID TAB detail TAB version.
 */
public class Harness {
    static final String[] KEYS = {"http.proxyHost", "http.proxyPort", "https.proxyHost", "https.proxyPort",
        "proxyHost", "proxyPort", "socksProxyHost", "socksProxyPort", "http.nonProxyHosts"};

    public static void main(String[] args) throws Exception {
        boolean fromEnv = args.length > 0 && args[0].equals("env");
        SSLContext ssl = SSLContext.getInstance("TLS");
        ssl.init(null, new TrustManager[] {new X509TrustManager() {
            public void checkClientTrusted(java.security.cert.X509Certificate[] c, String a) {}
            public void checkServerTrusted(java.security.cert.X509Certificate[] c, String a) {}
            public java.security.cert.X509Certificate[] getAcceptedIssuers() { return new java.security.cert.X509Certificate[0]; }
        }}, null);
        HttpsURLConnection.setDefaultSSLSocketFactory(ssl.getSocketFactory());
        HttpsURLConnection.setDefaultHostnameVerifier((HostnameVerifier) (h, s) -> true);
        String version = System.getProperty("java.version");
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
            String detail;
            try {
                HttpURLConnection c = (HttpURLConnection) new URL(f[1]).openConnection();
                c.setConnectTimeout(5000);
                c.setReadTimeout(5000);
                c.setInstanceFollowRedirects(false);
                int code = c.getResponseCode();
                try (InputStream s = code < 400 ? c.getInputStream() : c.getErrorStream()) {
                    if (s != null) s.readAllBytes();
                }
                detail = "status " + code;
            } catch (Exception e) {
                detail = e.getClass().getSimpleName() + ": " + e.getMessage();
            }
            System.out.println(f[0] + "\t" + detail.replace('\t', ' ').replace('\n', ' ') + "\t" + version);
            System.out.flush();
        }
    }
}
