'use strict'
// Real Node.js clients for egret's NO_PROXY differential tests.
//
// Usage: node clients.js MODE < cases.json > results.jsonl
// MODE: undici6 | undici722 | undici8 | pfe1 | pfe2 (in-process, the case's
// environment is installed in process.env per case) | core | global-agent
// | fetch (the environment is the process's own: one process per environment, the
// cases then differ only by URL). net.connect / net.createConnection /
// tls.connect are replaced by a recorder that fails at once, so the real
// decision code runs up to the first connection and nothing is sent.
// Each result line: {"id", "result": "D" | "P:<port>" | "E", "detail"}.
const net = require('net')
const tls = require('tls')
const http = require('http')
const https = require('https')

let first = null
function recorder (orig) {
  return function (...args) {
    let o = args[0]
    if (typeof o !== 'object' || o === null) o = { port: args[0], host: args[1] }
    if (!first) {
      let host = o.host || o.hostname || 'localhost'
      // undici 8 connects to a proxy IP through a custom lookup.
      if (typeof o.lookup === 'function') o.lookup(host, {}, (e, addr) => { if (!e && typeof addr === 'string') host = addr })
      first = { host, port: Number(o.port) }
    }
    const s = new net.Socket()
    process.nextTick(() => s.destroy(Object.assign(new Error('egret-intercepted'), { code: 'EGRET_INTERCEPTED' })))
    return s
  }
}
const origCreateConnection = net.createConnection
net.connect = recorder(net.connect)
net.createConnection = net.connect
tls.connect = recorder(tls.connect)
// Node < 24: http.Agent captured net.createConnection when it loaded (newer
// Nodes wrap it in a function that holds the proxy logic: keep that).
if (http.Agent.prototype.createConnection === origCreateConnection) http.Agent.prototype.createConnection = net.connect
// No name is ever resolved.
const dns = require('dns')
dns.lookup = (host, opts, cb) => { (typeof opts === 'function' ? opts : cb)(Object.assign(new Error('egret: no DNS'), { code: 'ENOTFOUND' })) }

function classify (err) {
  if (first) {
    const h = String(first.host).replace(/^\[|\]$/g, '')
    if (h === '127.0.0.1' && (first.port === 9 || first.port === 8)) return { result: 'P:' + first.port, detail: h + ':' + first.port }
    return { result: 'D', detail: h + ':' + first.port }
  }
  return { result: 'E', detail: err ? String(err && (err.code || err.message)) : 'no connection' }
}

function setEnv (env) {
  for (const k of Object.keys(process.env)) delete process.env[k]
  Object.assign(process.env, env)
}

function coreRequest (url) {
  return new Promise((resolve) => {
    let req
    try {
      const mod = url.startsWith('https:') ? https : http
      req = mod.get(url, () => resolve(null))
      req.on('error', (e) => resolve(e))
      req.setTimeout(5000, () => { req.destroy(new Error('timeout')) })
    } catch (e) { resolve(e) }
  })
}

async function runCase (mode, c) {
  first = null
  let err = null
  try {
    if (mode.startsWith('undici')) {
      setEnv(c.env)
      const undici = require(mode)
      const agent = new undici.EnvHttpProxyAgent()
      try {
        await undici.request(c.url, { dispatcher: agent, headersTimeout: 5000 })
      } catch (e) { err = e }
    } else if (mode === 'pfe1' || mode === 'pfe2') {
      setEnv(c.env)
      const mod = mode === 'pfe1' ? require('pfe1') : await import('pfe2')
      const p = mod.getProxyForUrl(c.url)
      if (!p) return { result: 'D', detail: 'getProxyForUrl returned ""' }
      const u = new URL(p)
      return { result: u.hostname === '127.0.0.1' && (u.port === '9' || u.port === '8') ? 'P:' + u.port : 'E', detail: p }
    } else if (mode === 'fetch') { // Node's fetch (bundled undici), environment fixed per process
      try {
        await fetch(c.url, { signal: AbortSignal.timeout(5000) })
      } catch (e) { err = e }
    } else { // core, global-agent: environment fixed per process
      err = await coreRequest(c.url)
    }
  } catch (e) { err = e }
  return classify(err)
}

async function main () {
  const mode = process.argv[2]
  const cases = JSON.parse(require('fs').readFileSync(0, 'utf8'))
  if (mode === 'global-agent') require('global-agent').bootstrap()
  process.removeAllListeners('warning')
  process.on('warning', () => {})
  for (const c of cases) {
    const r = await runCase(mode, c)
    process.stdout.write(JSON.stringify({ id: c.id, ...r }) + '\n')
  }
}
main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1) })
