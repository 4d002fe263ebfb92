/**
 * The Python sandbox's worker: a Node worker thread that loads Pyodide (CPython compiled
 * to WebAssembly) once, locks the thread down, and evaluates each program it is sent.
 *
 * The worker's source is a plain CommonJS string started with `eval: true` (no build
 * step; the same from source and from the compiled package). It loads Pyodide from the
 * resolved path of its package, passed as `workerData`.
 *
 * What the worker does so that nothing a program does reaches the host:
 * - Pyodide's file system is its own, in memory: no host directory is mounted. Writes are
 *   allowed only under `/tmp` and the home directory, both emptied before each
 *   evaluation, and count against the memory limit;
 * - after loading, the thread's own ways out are cut: `child_process`, `fs`, `net`,
 *   `http(s)`, `dns`, `dgram`, `tls`, `http2`, `inspector`, `worker_threads`' `Worker`,
 *   `process.binding` / `dlopen`, `fetch`, `WebSocket` and `BroadcastChannel` throw, and
 *   the `Function` constructors and `eval` are gone, so even a program that reached a
 *   JavaScript object through Pyodide's bridge could neither run JavaScript text nor
 *   touch the host;
 * - the WebAssembly memory may grow to its size after loading plus `memoryMb`, no more
 *   (a refused growth is a `MemoryError` in Python, reported as `OutOfMemory`);
 * - standard output and error are counted against `outputChars`; past it the program is
 *   stopped at its next jump or call.
 *
 * @since 0.1.0
 */
import { serveSource } from "../code/WorkerPool.ts"
import { harnessSource } from "./harness.ts"

/** What the main thread asks the worker: one evaluation. @internal */
export interface WorkerRequest {
  readonly id: number
  readonly source: string
  /** function tests: the function's name and each call's arguments */
  readonly entry: string | undefined
  readonly calls: ReadonlyArray<ReadonlyArray<unknown>> | undefined
  /** stdin/stdout cases: each case's standard input */
  readonly stdin: ReadonlyArray<string> | undefined
  readonly limits: { readonly work: number; readonly memoryBytes: number; readonly outputChars: number; readonly resultChars: number }
}

const evaluationSource = String.raw`
const ENOSPC = 51, EROFS = 69, EIO = 29
const HOME = "/home/pyodide"

// The WebAssembly memory's cap: unlimited while Pyodide loads, then its size plus the evaluation's memoryMb.
// A refused growth raises the flag the harness reads at each jump and call (2: memory cap).
let memoryCap = Infinity, memoryRefused = false, raiseFlag = (code) => {}
const grow = WebAssembly.Memory.prototype.grow
WebAssembly.Memory.prototype.grow = function (pages) {
  if (this.buffer.byteLength + pages * 65536 > memoryCap) {
    memoryRefused = true
    raiseFlag(2)
    throw new RangeError("memory limit")
  }
  return grow.call(this, pages)
}


// Cuts the thread's ways to the host once Pyodide is loaded (see the module's documentation).
function lockDown() {
  const refuse = (what) => function () { throw new Error(what + " is not available in the sandbox") }
  const cut = (name, keys) => {
    let mod
    try { mod = require(name) } catch { return }
    for (const key of keys ?? Object.keys(mod)) if (typeof mod[key] === "function") try { mod[key] = refuse(name + "." + key) } catch {}
    if (mod.promises !== undefined) for (const key of Object.keys(mod.promises)) try { mod.promises[key] = refuse(name + ".promises." + key) } catch {}
  }
  for (const name of ["node:child_process", "node:fs", "node:net", "node:http", "node:https", "node:http2", "node:dns", "node:dgram", "node:tls", "node:inspector", "node:cluster"]) cut(name)
  cut("node:worker_threads", ["Worker"])
  cut("node:module", ["createRequire", "register"])
  require("node:module").syncBuiltinESMExports()
  for (const key of ["binding", "_linkedBinding", "dlopen", "kill", "chdir", "abort"]) try { process[key] = refuse("process." + key) } catch {}
  for (const key of ["fetch", "WebSocket", "EventSource", "BroadcastChannel", "XMLHttpRequest", "require", "Request", "Response", "Headers"]) try { delete globalThis[key] } catch {}
  const stub = refuse("code generation from strings")
  for (const f of [function () {}, async function () {}, function* () {}, async function* () {}]) {
    Object.defineProperty(Object.getPrototypeOf(f), "constructor", { value: stub, writable: false, configurable: false })
  }
  Object.defineProperty(globalThis, "eval", { value: stub, writable: false, configurable: false })
  // the interpreter's own reports of a fatal error would reach the host's console: the reply carries them instead
  for (const key of ["log", "error", "warn", "info", "debug", "trace"]) console[key] = () => {}
}

// Writes go only under /tmp and the home directory, and count against the memory limit.
function guardFiles(py, state) {
  const FS = py.FS
  const normalize = require("node:path").posix.normalize
  const writable = (p) => {
    const n = normalize(String(p))
    return n === "/tmp" || n.startsWith("/tmp/") || n === HOME || n.startsWith(HOME + "/") || n.startsWith("/dev/")
  }
  const guard = (name, pathOf) => {
    const original = FS[name]
    FS[name] = function (...args) {
      const p = pathOf(args)
      if (p !== undefined && !writable(p)) throw new FS.ErrnoError(EROFS)
      return original.apply(this, args)
    }
  }
  for (const name of ["mknod", "mkdir", "unlink", "rmdir", "symlink", "truncate", "chmod", "utime"]) guard(name, (a) => (typeof a[0] === "string" ? a[0] : undefined))
  guard("rename", (a) => (writable(a[0]) ? a[1] : a[0]))
  const write = FS.write
  FS.write = function (stream, buffer, offset, length, position, canOwn) {
    if (FS.isFile(stream.node.mode)) {
      if (!writable(stream.path)) throw new FS.ErrnoError(EROFS)
      state.fileBytes += length
      if (state.fileBytes > state.limits.memoryBytes) {
        state.filesFull = true
        raiseFlag(2)
        throw new FS.ErrnoError(ENOSPC)
      }
    }
    return write.call(this, stream, buffer, offset, length, position, canOwn)
  }
  const fresh = (dir) => {
    try { FS.unmount(dir) } catch {}
    FS.mount(FS.filesystems.MEMFS, {}, dir)
  }
  return () => { fresh("/tmp"); fresh(HOME) }
}

// Standard output and error: counted against the cap; past it the harness is told to stop the program.
function installOutput(py, state) {
  const decoder = () => new TextDecoder("utf-8", { fatal: false })
  let out = decoder()
  const take = (buffer, keep) => {
    if (state.outputExceeded || state.outputChars + buffer.length > state.limits.outputChars) {
      if (!state.outputExceeded && keep) state.output += out.decode(buffer.subarray(0, Math.max(0, state.limits.outputChars - state.outputChars)))
      state.outputExceeded = true
      raiseFlag(1)
      // an I/O error ends a flood inside one call of C code; the flag stops a program that catches it
      throw new py.FS.ErrnoError(EIO)
    }
    state.outputChars += buffer.length
    if (keep) state.output += out.decode(buffer, { stream: true })
    return buffer.length
  }
  py.setStdout({ write: (b) => take(b, true), isatty: false })
  py.setStderr({ write: (b) => take(b, false), isatty: false })
  return () => {
    out = decoder()
  }
}

// One evaluation: function tests or stdin/stdout cases; the reply, and whether the worker must be retired.
function evaluate(py, H, state, resetFiles, request) {
  state.limits = request.limits
  state.output = ""
  state.outputChars = 0
  state.outputExceeded = false
  state.fileBytes = 0
  state.filesFull = false
  memoryRefused = false
  resetFiles()
  H.reset()
  H.begin(request.limits.work)
  memoryCap = state.baseMemory + request.limits.memoryBytes
  let answer
  try {
    answer = request.entry !== undefined ? runCalls(py, H, state, request) : runStdio(py, H, state, request)
  } finally {
    memoryCap = Infinity
  }
  if (!answer.ok) {
    if (memoryRefused || state.filesFull) answer = { ok: false, reason: "OutOfMemory", message: answer.message.replace(/threw [\s\S]*$/, "") + "ran out of memory (" + Math.round(request.limits.memoryBytes / 1048576) + " MB)" }
    else if (state.outputExceeded) answer = { ok: false, reason: "OutputLimit", message: answer.message.replace(/threw [\s\S]*$/, "") + "printed more than " + request.limits.outputChars + " characters" }
    else if (answer.reason === "Timeout") answer = { ...answer, message: answer.message + "ran past its work budget of " + request.limits.work + " jumps and calls (an exception counts 100)" }
  }
  // an interpreter that ran out of memory is kept: the memory is free again, and the cap holds for the next program
  const broken = false
  return { reply: answer.ok ? { ...answer, output: state.output } : { ...answer, output: state.output }, broken }
}

function runCalls(py, H, state, request) {
  const args = py.toPy(request.calls)
  try {
    const r = H.calls(request.source, request.entry, args, request.limits.resultChars)
    try { return r.toJs({ dict_converter: Object.fromEntries }) } finally { r.destroy() }
  } finally { args.destroy() }
}

function runStdio(py, H, state, request) {
  const outputs = []
  for (let i = 0; i < request.stdin.length; i++) {
    const input = request.stdin[i]
    let given = false
    py.setStdin({ stdin: () => (given ? null : ((given = true), input)), autoEOF: true })
    const start = state.output.length
    const r = H.stdio(request.source, i, input)
    let answer
    try { answer = r.toJs({ dict_converter: Object.fromEntries }) } finally { r.destroy() }
    if (!answer.ok) return answer
    outputs.push(state.output.slice(start))
  }
  return { ok: true, outputs, work: H.work() }
}

;(async () => {
  const { loadPyodide } = await import(workerData.pyodideUrl)
  const py = await loadPyodide({ indexURL: workerData.indexURL, env: { PYTHONHASHSEED: "0", HOME }, stdin: () => null, packages: [] })
  py.unregisterJsModule("js")
  py.unregisterJsModule("pyodide_js")
  py.runPython(workerData.harness)
  const pick = (name) => py.globals.get(name)
  const H = { begin: pick("H_begin"), reset: pick("H_reset"), calls: pick("H_calls"), stdio: pick("H_stdio"), work: pick("H_work") }
  const flag = pick("H_flag").getBuffer("u8")
  const flagAddress = flag.data.byteOffset
  flag.release()
  // written straight into the interpreter's memory: no call into Python from inside a write or malloc
  raiseFlag = (code) => { py._module.HEAPU8[flagAddress] = code }
  const state = { baseMemory: 0, limits: undefined, output: "", outputChars: 0, outputExceeded: false, fileBytes: 0, filesFull: false }
  const resetFiles = guardFiles(py, state)
  installOutput(py, state)
  lockDown()
  state.baseMemory = py._module.HEAP8.buffer.byteLength
  return { py, H, state, resetFiles }
})().then(
  ({ py, H, state, resetFiles }) => {
    // the interpreter failing under the program (a fatal error), or the thread's own stack
    // running out under recursion past a raised recursion limit, retires the worker
    serve((request) => {
      const { reply, broken } = evaluate(py, H, state, resetFiles, request)
      return { ...reply, broken }
    }, "overflowed the interpreter's stack", () => state.output)
  },
  (e) => parentPort.postMessage({ ready: false, message: String(e && e.message) }),
)
`

/** The worker's source (CommonJS, run with `eval: true`). @internal */
export const workerSource = [
  `"use strict"`,
  `const { parentPort, workerData } = require("node:worker_threads")`,
  serveSource,
  evaluationSource,
].join("\n")

/** What the worker needs to start: Pyodide's module URL, its folder and the harness. @internal */
export const workerData = (pyodideUrl: string, indexURL: string) => ({ pyodideUrl, indexURL, harness: harnessSource })
