'use strict'
// grpc-js's side of egret's NO_PROXY differential tests
// (internal/noproxy/differential_test.go), run inside a network namespace
// where every name of the cases resolves to a local origin and the proxies
// are local recording proxies: the test decides "direct" or "proxy" from
// what those listeners see.
//
// Usage: node grpc.js PACKAGE_DIR (an @grpc/grpc-js release)
// One case per line on stdin: {"id", "env", "url"}. The environment is put
// in process.env (grpc-js reads it for every new channel); the URL's host,
// as written, and its port are the channel's target, https:// a TLS
// channel, http:// a plaintext one. The channel connects once; when it is
// ready or has failed, one line on stdout: {"id", "detail", "version"}.
const path = require('path')
const readline = require('readline')

const dir = path.resolve(process.argv[2])
const grpc = require(dir)
const version = require(path.join(dir, 'package.json')).version

function target (u) {
  const m = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\/([^/?#]*)/.exec(u)
  const tls = m[1].toLowerCase() === 'https'
  let auth = m[2]
  const at = auth.lastIndexOf('@')
  if (at >= 0) auth = auth.slice(at + 1)
  let host = auth
  let port = tls ? '443' : '80'
  if (auth.startsWith('[')) {
    const end = auth.indexOf(']')
    host = auth.slice(0, end + 1)
    const rest = auth.slice(end + 1)
    if (rest.startsWith(':') && rest.length > 1) port = rest.slice(1)
  } else {
    const i = auth.lastIndexOf(':')
    if (i >= 0) {
      host = auth.slice(0, i)
      if (auth.slice(i + 1) !== '') port = auth.slice(i + 1)
    }
  }
  return { target: host + ':' + port, tls }
}

function setEnv (env) {
  for (const k of Object.keys(process.env)) delete process.env[k]
  Object.assign(process.env, env)
}

const S = grpc.connectivityState
// Each channel has its own subchannels and never reconnects once it has
// failed: a closed channel's backoff timer would otherwise connect again
// during a later case.
const OPTIONS = {
  'grpc.use_local_subchannel_pool': 1,
  'grpc.initial_reconnect_backoff_ms': 86400000,
  'grpc.max_reconnect_backoff_ms': 86400000
}

function runCase (c) {
  return new Promise((resolve) => {
    setEnv(c.env)
    const t = target(c.url)
    let client
    try {
      const creds = t.tls ? grpc.credentials.createSsl() : grpc.credentials.createInsecure()
      client = new grpc.Client(t.target, creds, OPTIONS)
    } catch (e) {
      resolve(t.target + ' ' + String(e && e.message))
      return
    }
    const ch = client.getChannel()
    const deadline = Date.now() + 3000
    const step = () => {
      const s = ch.getConnectivityState(true)
      if (s === S.READY) {
        // The test's origin answers no HTTP/2 and closes: grpc-js before
        // 1.13 connects again at once when a ready connection ends, which
        // must be seen during this case, not the next one.
        ch.watchConnectivityState(s, Date.now() + 1000, () => {
          client.close()
          setTimeout(() => resolve(t.target + ' READY'), 20)
        })
        return
      }
      if (s === S.TRANSIENT_FAILURE || s === S.SHUTDOWN || Date.now() >= deadline) {
        client.close()
        resolve(t.target + ' ' + S[s])
        return
      }
      ch.watchConnectivityState(s, deadline, step)
    }
    step()
  })
}

const rl = readline.createInterface({ input: process.stdin })
const queue = []
let busy = false
async function pump () {
  if (busy) return
  busy = true
  while (queue.length) {
    const c = queue.shift()
    const detail = await runCase(c)
    process.stdout.write(JSON.stringify({ id: c.id, detail, version }) + '\n')
  }
  busy = false
}
rl.on('line', (l) => { queue.push(JSON.parse(l)); pump() })
