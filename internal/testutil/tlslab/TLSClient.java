import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URL;
import javax.net.ssl.HttpsURLConnection;

/** The Java client of the tlslab tests (see clients.go). */
public class TLSClient {
    public static void main(String[] args) throws Exception {
        get(args[0]);
        if (args.length > 1) {
            new BufferedReader(new InputStreamReader(System.in)).readLine();
            get(args[0]);
        }
    }

    static void get(String u) {
        try {
            HttpsURLConnection c = (HttpsURLConnection) new URL(u).openConnection();
            c.setConnectTimeout(10000);
            c.setReadTimeout(10000);
            c.setRequestProperty("Connection", "close");
            System.out.println("ok " + c.getResponseCode());
            c.disconnect();
        } catch (Exception e) {
            System.out.println("fail " + e.getClass().getSimpleName() + " " + String.valueOf(e.getMessage()).replace('\n', ' '));
        }
        System.out.flush();
    }
}
