'use strict'
// Real Node.js clients for egret's NO_PROXY differential tests
// (internal/noproxy/differential_test.go). The test runs this script inside a
// network namespace where every name of the cases resolves to a local origin
// and the proxies of the cases are local recording proxies: the test decides
// "direct" or "proxy" from what those listeners see, not from this script.
//
// Usage: node clients.js MODE [PACKAGE_DIR]
// One case per line on stdin: {"id", "env", "url"}; after the request has
// ended (answer, error or timeout), one line on stdout:
// {"id", "detail", "version"} (and "result" for proxy-from-env, which only
// returns a URL and connects nowhere).
//
// MODE, with the environment installed in process.env per case:
//   agent        Node's http/https with a new Agent({proxyEnv}) per case: the
//                ProxyConfig NODE_USE_ENV_PROXY=1 gives the global agents
//   undici DIR   undici's EnvHttpProxyAgent (a new agent per case) + request
//   axios DIR    axios.get (axios reads the environment per request)
//   pfe DIR      proxy-from-env's getProxyForUrl (reported, not observed)
// MODE, with the process's own environment (one process per environment):
//   core         Node's http/https (NODE_USE_ENV_PROXY=1 in the environment)
//   fetch        Node's fetch (its bundled undici)
//   global-agent DIR   global-agent's bootstrap, then http/https
const path = require('path')
const fs = require('fs')
const http = require('http')
const https = require('https')
const readline = require('readline')

const TIMEOUT = 5000
const mode = process.argv[2]
const dir = process.argv[3] ? path.resolve(process.argv[3]) : ''

function pkgVersion () {
  if (!dir) return ''
  return JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')).version
}

async function load () {
  try {
    return require(dir)
  } catch (e) {
    if (e.code !== 'ERR_REQUIRE_ESM' && e.code !== 'MODULE_NOT_FOUND') throw e
    const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'))
    let entry = pkg.main || 'index.js'
    const ex = pkg.exports && (pkg.exports['.'] || pkg.exports)
    if (typeof ex === 'string') entry = ex
    else if (ex && (ex.import || ex.default)) entry = ex.import || ex.default
    if (typeof entry === 'object') entry = entry.default
    return import(require('url').pathToFileURL(path.join(dir, entry)).href)
  }
}

function setEnv (env) {
  for (const k of Object.keys(process.env)) delete process.env[k]
  Object.assign(process.env, env)
}

function errText (e) {
  if (!e) return ''
  const c = e.cause ? ' (' + errText(e.cause) + ')' : ''
  return String(e.code || e.name || 'Error') + ': ' + String(e.message || e).split('\n')[0] + c
}

function coreGet (url, env) {
  return new Promise((resolve) => {
    let req
    try {
      const mod = url.startsWith('https:') ? https : http
      const opts = { rejectUnauthorized: false }
      if (env) opts.agent = new mod.Agent(env.NODE_USE_ENV_PROXY === '1' ? { proxyEnv: env } : {})
      req = mod.get(url, opts, (res) => {
        res.resume()
        res.on('end', () => resolve('status ' + res.statusCode))
        res.on('error', (e) => resolve(errText(e)))
      })
      req.on('error', (e) => resolve(errText(e)))
      req.setTimeout(TIMEOUT, () => req.destroy(new Error('timeout')))
    } catch (e) { resolve(errText(e)) }
  })
}

async function runCase (lib, c) {
  try {
    if (mode === 'undici') {
      setEnv(c.env)
      const agent = new lib.EnvHttpProxyAgent()
      try {
        const r = await lib.request(c.url, { dispatcher: agent, headersTimeout: TIMEOUT, bodyTimeout: TIMEOUT })
        await r.body.text()
        return 'status ' + r.statusCode
      } finally { agent.close().catch(() => {}) }
    }
    if (mode === 'axios') {
      setEnv(c.env)
      const axios = lib.default || lib
      const r = await axios.get(c.url, { timeout: TIMEOUT, maxRedirects: 0, validateStatus: () => true })
      return 'status ' + r.status
    }
    if (mode === 'pfe') {
      setEnv(c.env)
      const p = lib.getProxyForUrl(c.url)
      if (!p) return { result: 'D', detail: 'getProxyForUrl returned ""' }
      let u
      try { u = new URL(p) } catch (e) { return { result: 'E', detail: 'unparsable ' + p } }
      return { result: u.hostname === '127.0.0.1' && u.port !== '' ? 'P:' + u.port : 'E', detail: p }
    }
    if (mode === 'fetch') {
      const r = await fetch(c.url, { signal: AbortSignal.timeout(TIMEOUT) })
      await r.text()
      return 'status ' + r.status
    }
    if (mode === 'agent') return await coreGet(c.url, c.env)
    return await coreGet(c.url) // core, global-agent
  } catch (e) { return errText(e) }
}

async function main () {
  let lib = null
  let version = pkgVersion()
  if (mode === 'undici' || mode === 'axios' || mode === 'pfe') lib = await load()
  if (mode === 'global-agent') {
    const ga = await load()
    ga.bootstrap()
  }
  if (mode === 'core' || mode === 'agent') version = process.versions.node
  if (mode === 'fetch') version = process.versions.undici
  process.removeAllListeners('warning')
  process.on('warning', () => {})
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity })
  for await (const line of rl) {
    if (!line.trim()) continue
    const c = JSON.parse(line)
    const r = await runCase(lib, c)
    const out = typeof r === 'object' ? { id: c.id, ...r } : { id: c.id, detail: r }
    out.version = version
    process.stdout.write(JSON.stringify(out) + '\n')
  }
}
main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1) })
