/**
 * A FAKE E2B, for tests: not E2B, but two loopback HTTP servers written from E2B's public
 * API references, which the real `e2b` SDK talks to when its `apiUrl` and `sandboxUrl`
 * options (E2B_API_URL / E2B_SANDBOX_URL, the settings a self-hosted E2B uses) point at
 * them. So the tests drive the SDK's own code (its REST client, its Connect RPC
 * transport, its errors), not a stand-in for it.
 *
 * The control plane (E2B's spec/openapi.yml), `X-API-KEY` checked:
 *   POST /v2/sandboxes (and the older POST /sandboxes)  NewSandbox { templateID, timeout, ... }
 *     -> 201 Sandbox { templateID, sandboxID, clientID, envdVersion, envdAccessToken, domain }
 *   DELETE /sandboxes/{sandboxID}  -> 204, or 404 { code, message }
 * A sandbox also ends by itself after its `timeout` seconds, as E2B's do.
 *
 * The sandboxes' own API, envd (spec/envd/envd.yaml and spec/envd/process/process.proto),
 * one URL for all sandboxes: the `E2b-Sandbox-Id` header picks the sandbox and
 * `X-Access-Token` must be its `envdAccessToken` (an unknown sandbox gets the proxy's 502):
 *   POST /files?path=&username=  multipart, each part a file named by its path -> [EntryInfo]
 *   POST /process.Process/Start  Connect server stream, JSON: StartRequest { process: { cmd,
 *     args, envs, cwd }, stdin } -> StartResponse events { start: { pid } }, { data: { stdout
 *     | stderr: base64 } }, { end: { exitCode, exited, status } }, then the end-stream
 *     message; `connect-timeout-ms` is the call's deadline (past it: the process is killed
 *     and the stream ends with `deadline_exceeded`)
 *   POST /process.Process/SendSignal  Connect unary JSON { process: { pid }, signal }
 *   GET /health -> 204
 *
 * A sandbox is a fresh directory: absolute paths of files and of `cwd` are taken inside
 * it, and commands run for real, with the machine's `bash` and `python3`, `HOME` inside
 * the sandbox. That is the fake's departure from E2B: no VM around the process, so
 * neither `allow_internet_access: false` nor the sandbox's memory is enforced here (the
 * requests say what was asked for).
 *
 * `mode` simulates outages (a refused connection needs no fake: a closed port):
 * `"create503"` and `"create429"` (the control plane's errors), `"createHang"` (create
 * never answers), `"envd502"` (the sandbox's proxy answers 502), `"startHang"` (a command
 * that never starts). `failFirst` makes the first n creates 503 and the rest normal.
 */
import { spawn, type ChildProcess } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"

export type E2bFakeMode = "normal" | "create503" | "create429" | "createHang" | "envd502" | "startHang"

interface FakeSandbox {
  readonly id: string
  readonly root: string
  readonly token: string
  readonly timeoutSeconds: number
  readonly processes: Map<number, ChildProcess>
  readonly expiry: NodeJS.Timeout
}

export interface E2bFake {
  readonly apiUrl: string
  readonly sandboxUrl: string
  readonly apiKey: string
  /** "METHOD path" of every request, in order */
  readonly requests: Array<string>
  /** every NewSandbox body received */
  readonly creates: Array<Record<string, unknown>>
  /** every command line a sandbox ran (the `-c` argument) */
  readonly commands: Array<string>
  /** ids of sandboxes created and not yet killed or expired */
  readonly live: () => ReadonlyArray<string>
  /** ids of sandboxes killed through the API */
  readonly killed: Array<string>
  /** the most sandboxes alive at once */
  maxLive: number
  /** every file written, by the path the SDK named */
  readonly files: Map<string, string>
  mode: E2bFakeMode
  failFirst: number
  readonly close: () => Promise<void>
}

const readBody = (req: IncomingMessage) =>
  new Promise<Buffer>((done) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => done(Buffer.concat(chunks)))
  })

const json = (res: ServerResponse, status: number, body?: unknown) => {
  res.writeHead(status, body === undefined ? {} : { "content-type": "application/json" })
  res.end(body === undefined ? undefined : JSON.stringify(body))
}

/** A Connect envelope: flags, a big-endian length, the JSON message. */
const envelope = (flags: number, message: unknown) => {
  const data = Buffer.from(JSON.stringify(message), "utf8")
  const head = Buffer.alloc(5)
  head.writeUInt8(flags, 0)
  head.writeUInt32BE(data.length, 1)
  return Buffer.concat([head, data])
}

/** The sandbox's path for a path the SDK names: absolute ones inside its root, relative ones in its home. */
const inside = (sandbox: FakeSandbox, path: string) => resolve(sandbox.root, path.startsWith("/") ? `.${path}` : `home/user/${path}`)

/** Ends a sandbox: its processes (each its own process group) killed, its directory removed. */
const destroy = (sandbox: FakeSandbox) => {
  clearTimeout(sandbox.expiry)
  for (const child of sandbox.processes.values()) {
    try {
      process.kill(-child.pid!, "SIGKILL")
    } catch {
      // already gone
    }
  }
  rmSync(sandbox.root, { recursive: true, force: true })
}

/** Starts the fake on two free ports of 127.0.0.1. */
export const startE2bFake = async (): Promise<E2bFake> => {
  const sandboxes = new Map<string, FakeSandbox>()
  const hanging = new Set<ServerResponse>()
  const fake: E2bFake = {
    apiUrl: "",
    sandboxUrl: "",
    apiKey: `e2b_${randomBytes(20).toString("hex")}`,
    requests: [],
    creates: [],
    commands: [],
    live: () => [...sandboxes.keys()],
    killed: [],
    maxLive: 0,
    files: new Map(),
    mode: "normal",
    failFirst: 0,
    close: async () => {},
  }

  const create = (body: Record<string, unknown>, res: ServerResponse) => {
    if (typeof body["templateID"] !== "string") return json(res, 400, { code: 400, message: "templateID is required" })
    const timeout = body["timeout"] ?? 15
    if (!(typeof timeout === "number" && Number.isInteger(timeout) && timeout >= 0)) return json(res, 400, { code: 400, message: "timeout must be a non-negative integer" })
    if (body["templateID"] !== "base") return json(res, 404, { code: 404, message: `template '${body["templateID"]}' not found` })
    const id = `i${randomBytes(10).toString("hex")}`
    const root = mkdtempSync(join(tmpdir(), "e2b-fake-"))
    mkdirSync(join(root, "home/user"), { recursive: true })
    const expiry = setTimeout(() => {
      const s = sandboxes.get(id)
      if (s !== undefined) destroy(s)
      sandboxes.delete(id)
    }, timeout * 1000).unref()
    const sandbox: FakeSandbox = { id, root, token: randomBytes(16).toString("hex"), timeoutSeconds: timeout, processes: new Map(), expiry }
    sandboxes.set(id, sandbox)
    fake.maxLive = Math.max(fake.maxLive, sandboxes.size)
    json(res, 201, { templateID: "rki5dems9wqfm4r03t7g", alias: "base", sandboxID: id, clientID: "6532622b", envdVersion: "0.5.4", envdAccessToken: sandbox.token, trafficAccessToken: null, domain: null })
  }

  const controlPlane = async (req: IncomingMessage, res: ServerResponse) => {
    const body = await readBody(req)
    fake.requests.push(`${req.method} ${req.url}`)
    if (req.headers["x-api-key"] !== fake.apiKey) return json(res, 401, { code: 401, message: "Invalid API key" })
    if (req.method === "POST" && (req.url === "/v2/sandboxes" || req.url === "/sandboxes")) {
      fake.creates.push(JSON.parse(body.toString("utf8")) as Record<string, unknown>)
      if (fake.mode === "createHang") return void hanging.add(res)
      if (fake.mode === "create429") return json(res, 429, { code: 429, message: "You have reached the maximum number of concurrent E2B sandboxes" })
      if (fake.mode === "create503" || fake.failFirst > 0) {
        fake.failFirst = Math.max(0, fake.failFirst - 1)
        return json(res, 503, { code: 503, message: "Service Unavailable" })
      }
      return create(fake.creates.at(-1)!, res)
    }
    const kill = /^\/sandboxes\/([^/?]+)$/.exec(req.url ?? "")
    if (req.method === "DELETE" && kill !== null) {
      const sandbox = sandboxes.get(kill[1]!)
      if (sandbox === undefined) return json(res, 404, { code: 404, message: `sandbox ${kill[1]} not found` })
      destroy(sandbox)
      sandboxes.delete(sandbox.id)
      fake.killed.push(sandbox.id)
      return json(res, 204)
    }
    json(res, 404, { code: 404, message: "not found" })
  }

  /** POST /files: the multipart parts written into the sandbox, parent folders made. */
  const upload = async (sandbox: FakeSandbox, req: IncomingMessage, body: Buffer, res: ServerResponse) => {
    const form = await new Request("http://sandbox/files", { method: "POST", headers: { "content-type": req.headers["content-type"] ?? "" }, body: new Uint8Array(body) }).formData()
    const entries = []
    for (const part of form.getAll("file")) {
      if (typeof part === "string") return json(res, 400, { code: 400, message: "a file part has no file name" })
      const path = inside(sandbox, part.name)
      mkdirSync(dirname(path), { recursive: true })
      const data = Buffer.from(await part.arrayBuffer())
      writeFileSync(path, data)
      fake.files.set(part.name, data.toString("utf8"))
      entries.push({ name: part.name.split("/").at(-1), type: "file", path: part.name })
    }
    json(res, 200, entries)
  }

  /** Process/Start: runs the command and streams its events as Connect envelopes. */
  const start = (sandbox: FakeSandbox, req: IncomingMessage, body: Buffer, res: ServerResponse) => {
    const request = JSON.parse(body.subarray(5, 5 + body.readUInt32BE(1)).toString("utf8")) as { process: { cmd: string; args?: Array<string>; envs?: Record<string, string>; cwd?: string } }
    if (fake.mode === "startHang") return void hanging.add(res)
    const { cmd, args = [], envs = {}, cwd } = request.process
    fake.commands.push(args.at(-1) ?? "")
    const dir = cwd === undefined ? inside(sandbox, "") : inside(sandbox, cwd)
    mkdirSync(dir, { recursive: true })
    const child = spawn(cmd, args, { cwd: dir, detached: true, stdio: ["ignore", "pipe", "pipe"], env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", HOME: inside(sandbox, ""), LANG: "C.UTF-8", ...envs } })
    sandbox.processes.set(child.pid!, child)
    res.writeHead(200, { "content-type": "application/connect+json" })
    res.write(envelope(0, { event: { start: { pid: child.pid } } }))
    const send = (key: "stdout" | "stderr") => (chunk: Buffer) => res.write(envelope(0, { event: { data: { [key]: chunk.toString("base64") } } }))
    child.stdout!.on("data", send("stdout"))
    child.stderr!.on("data", send("stderr"))
    const deadline = Number(req.headers["connect-timeout-ms"] ?? 0)
    let late = false
    const timer = deadline > 0 ? setTimeout(() => ((late = true), process.kill(-child.pid!, "SIGKILL")), deadline) : undefined
    child.on("close", (code, signal) => {
      clearTimeout(timer)
      sandbox.processes.delete(child.pid!)
      if (late) return res.end(envelope(2, { error: { code: "deadline_exceeded", message: "context deadline exceeded" } }))
      const exitCode = code ?? -1
      res.write(envelope(0, { event: { end: { exitCode, exited: code !== null, status: code !== null ? `exit status ${code}` : `signal: ${signal === "SIGKILL" ? "killed" : signal}` } } }))
      res.end(envelope(2, {}))
    })
  }

  /** Process/SendSignal: the process (its group) signalled. */
  const signal = (sandbox: FakeSandbox, body: Buffer, res: ServerResponse) => {
    const request = JSON.parse(body.toString("utf8")) as { process?: { pid?: number }; signal?: string }
    const child = sandbox.processes.get(request.process?.pid ?? -1)
    if (child === undefined) return json(res, 404, { code: "not_found", message: `process with pid ${request.process?.pid} not found` })
    process.kill(-child.pid!, request.signal === "SIGNAL_SIGTERM" ? "SIGTERM" : "SIGKILL")
    json(res, 200, {})
  }

  const envd = async (req: IncomingMessage, res: ServerResponse) => {
    const body = await readBody(req)
    const path = (req.url ?? "").split("?")[0]
    fake.requests.push(`${req.method} sandbox ${path}`)
    const sandbox = sandboxes.get(String(req.headers["e2b-sandbox-id"]))
    if (fake.mode === "envd502" || sandbox === undefined) return json(res, 502, { code: 502, message: "The sandbox was not found", sandboxId: req.headers["e2b-sandbox-id"] })
    if (req.method === "GET" && path === "/health") return json(res, 204)
    if (req.headers["x-access-token"] !== sandbox.token) return json(res, 401, { code: 401, message: "invalid access token" })
    if (req.method === "POST" && path === "/files") return upload(sandbox, req, body, res)
    if (req.method === "POST" && path === "/process.Process/Start") return start(sandbox, req, body, res)
    if (req.method === "POST" && path === "/process.Process/SendSignal") return signal(sandbox, body, res)
    json(res, 404, { code: "unimplemented", message: `${path} is not served by this fake` })
  }

  const listen = async (handler: (req: IncomingMessage, res: ServerResponse) => Promise<void>) => {
    const server: Server = createServer((req, res) => void handler(req, res))
    // an idle connection the SDK keeps is not closed under it on a loaded machine (a reset is an outage)
    server.keepAliveTimeout = 120_000
    await new Promise<void>((done) => server.listen(0, "127.0.0.1", done))
    return { server, url: `http://127.0.0.1:${(server.address() as { port: number }).port}` }
  }
  const api = await listen(controlPlane)
  const sandboxHost = await listen(envd)
  return Object.assign(fake, {
    apiUrl: api.url,
    sandboxUrl: sandboxHost.url,
    close: async () => {
      for (const res of hanging) res.destroy()
      for (const sandbox of sandboxes.values()) destroy(sandbox)
      sandboxes.clear()
      for (const { server } of [api, sandboxHost]) {
        server.closeAllConnections()
        await new Promise<void>((done) => server.close(() => done()))
      }
    },
  })
}
