# Real Ruby client for egret's NO_PROXY differential tests: Net::HTTP with
# its default proxy (:ENV, URI::Generic#find_proxy). The test runs this inside
# a network namespace where every name of the cases resolves to a local
# origin and the case proxies are local recording proxies; the test decides
# "direct" or "proxy" from what those listeners see.
#
# Usage: ruby clients.rb
# One case per line on stdin: {"id", "env", "url"}; the case's environment
# replaces ENV, then one GET is made; once it has ended, one line on stdout:
# {"id", "detail", "version"}.
require "json"
require "net/http"
require "openssl"
require "uri"

$stdout.sync = true
$stderr.reopen(File::NULL) # Net::HTTP warns about HTTP_PROXY on every request
version = "#{RUBY_VERSION} (uri #{URI::VERSION}, net-http #{Net::HTTP::VERSION})"
$stdin.each_line do |line|
  next if line.strip.empty?
  c = JSON.parse(line)
  ENV.replace(c["env"])
  detail =
    begin
      u = URI(c["url"])
      http = Net::HTTP.new(u.hostname, u.port)
      http.use_ssl = u.scheme == "https"
      http.verify_mode = OpenSSL::SSL::VERIFY_NONE
      http.open_timeout = http.read_timeout = 5
      res = http.start { |h| h.get(u.request_uri) }
      "status #{res.code}"
    rescue Exception => e
      "#{e.class}: #{e.message.lines.first}"
    end
  puts JSON.generate({ "id" => c["id"], "detail" => detail.to_s.strip, "version" => version })
end
