/**
 * The sandbox's worker: a Node worker thread that loads QuickJS (compiled to
 * WebAssembly) once and evaluates each program it is sent in a fresh QuickJS runtime and
 * context, under a memory limit, a stack limit, an interrupt deadline and an output cap.
 *
 * The worker's source is a plain CommonJS string, started with `eval: true`, so it needs
 * no build step and runs the same from source (tsx, vitest) and from the compiled package.
 * It reaches QuickJS by the resolved paths of its packages, passed as `workerData`.
 *
 * What a program sees: the ECMAScript built-ins of QuickJS and `print` / `console.log`
 * (output, capped). Nothing of the host is passed in: no `process`, `require`, file
 * system, network, timers or module loader. Arguments are built in the sandbox value by
 * value from JSON; results come out the same way, with `JSON.stringify` semantics only:
 * the context's own `JSON.stringify`, taken before the program ran (so a program that
 * replaces `JSON` changes nothing), and nothing else. A result that JSON cannot read (a
 * `toJSON` or a getter that throws) fails with `ResultNotSerializable`, one whose reading
 * overflows the stack with `StackOverflow`, never read another way. A returned Promise
 * (an `async` function's) is awaited: the jobs the program queued run under the same
 * deadline, and a promise still pending when they are done fails with `NeverSettled`.
 * Jobs still queued after the last call run under the deadline too (a job flood times out).
 *
 * @since 0.1.0
 */

/** What the main thread asks the worker: one evaluation. @internal */
export interface WorkerRequest {
  readonly id: number
  readonly source: string
  /** each call's arguments; absent: the program's own value is the result */
  readonly calls: ReadonlyArray<ReadonlyArray<unknown>> | undefined
  readonly limits: {
    readonly timeMillis: number
    readonly memoryBytes: number
    readonly stackBytes: number
    readonly outputChars: number
    readonly resultChars: number
  }
}

/** What the worker answers. `broken`: the worker must not be used again. @internal */
export type WorkerReply =
  | { readonly id: number; readonly ok: true; readonly value: string | undefined; readonly results: ReadonlyArray<string | undefined>; readonly output: string; readonly millis: number; readonly broken: boolean }
  | { readonly id: number; readonly ok: false; readonly reason: string; readonly message: string; readonly output: string; readonly millis: number; readonly broken: boolean }

/** The worker's source (CommonJS, run with `eval: true`). @internal */
export const workerSource = String.raw`
"use strict"
const { parentPort, workerData } = require("node:worker_threads")
const core = require(workerData.core)
const variantModule = require(workerData.variant)

const clip = (s, n) => (s.length > n ? s.slice(0, n) : s)

// A JSON value as a QuickJS value, built by the host (never by the program's own JSON).
function toHandle(vm, v) {
  if (v === null) return vm.null
  switch (typeof v) {
    case "number": return vm.newNumber(v)
    case "string": return vm.newString(v)
    case "boolean": return v ? vm.true : vm.false
    case "undefined": return vm.undefined
  }
  const target = Array.isArray(v) ? vm.newArray() : vm.newObject()
  for (const [k, x] of Object.entries(v)) {
    const h = toHandle(vm, x)
    vm.setProp(target, Array.isArray(v) ? Number(k) : k, h)
    h.dispose()
  }
  return target
}

// A result JSON cannot read: what reading it threw.
class NotSerializable extends Error {
  constructor(error) { super(error.message); this.error = error }
}

// The JSON text of a QuickJS object or boolean, by the context's own JSON.stringify taken
// before the program ran, and by nothing else (undefined when JSON has no text for it).
function stringifyStrict(state, h) {
  const vm = state.vm
  const out = vm.callFunction(state.stringify, vm.undefined, h)
  if (out.error) {
    const error = describe(state, out.error)
    out.error.dispose()
    throw new NotSerializable(error)
  }
  return out.value.consume((x) => {
    if (vm.typeof(x) !== "string") return undefined
    const n = stringLength(vm, x)
    if (n > state.limits.resultChars) throw new ResultTooLong(n)
    return vm.getString(x)
  })
}

// A QuickJS string as a host string, through the context's own JSON.stringify taken before
// the program ran (so NUL and lone surrogates survive the crossing as escapes); plain
// getString when that call fails (after the deadline every call is interrupted).
function readString(state, h) {
  const vm = state.vm
  const out = vm.callFunction(state.stringify, vm.undefined, h)
  if (out.error) {
    out.error.dispose()
    return vm.getString(h)
  }
  const text = out.value.consume((x) => (vm.typeof(x) === "string" ? vm.getString(x) : undefined))
  try { return JSON.parse(text) } catch (e) { return vm.getString(h) }
}

// The length of a QuickJS string (its own property: no code of the program runs).
const stringLength = (vm, h) => vm.getProp(h, "length").consume((n) => vm.getNumber(n))

// A QuickJS value as JSON text (undefined when it has none: a function, a symbol, undefined).
function readJson(state, h) {
  const vm = state.vm
  const type = vm.typeof(h)
  let text
  if (type === "string") {
    const n = stringLength(vm, h)
    if (n > state.limits.resultChars) throw new ResultTooLong(n)
    text = JSON.stringify(readString(state, h))
  }
  else if (type === "number") text = JSON.stringify(vm.getNumber(h))
  else if (type === "boolean" || type === "object") text = stringifyStrict(state, h)
  if (text !== undefined && text.length > state.limits.resultChars) throw new ResultTooLong(text.length)
  return text
}

class ResultTooLong extends Error {
  constructor(n) { super("a result of " + n + " characters") ; this.chars = n }
}

// Any QuickJS value as short text, for messages and output.
function show(state, h) {
  const vm = state.vm
  const t = vm.typeof(h)
  try {
    if (t === "string") return readString(state, h)
    if (t === "number") return String(vm.getNumber(h))
    if (t === "object" || t === "boolean") return String(stringifyStrict(state, h))
  } catch (e) {}
  return "[" + t + "]"
}

// How a QuickJS error reads: its name and message, as text the host can trust.
function describe(state, h) {
  const vm = state.vm
  try {
    const field = (key) => vm.getProp(h, key).consume((x) => (vm.typeof(x) === "string" ? readString(state, x) : ""))
    const name = vm.typeof(h) === "object" ? field("name") : ""
    const message = vm.typeof(h) === "object" ? field("message") : ""
    if (name === "" && message === "") return { name: "", message: clip(show(state, h), 500) }
    return { name: clip(name, 100), message: clip(message, 500) }
  } catch (e) {
    return { name: "", message: "an error that could not be read" }
  }
}

// How a result that cannot be read fails: its stack overflow or deadline as such, else ResultNotSerializable.
function unreadable(state, error) {
  const f = faultOf(state, error)
  if (f.reason !== "Threw") return f
  return { reason: "ResultNotSerializable", message: "returned a result JSON cannot read (" + f.message + ")" }
}

// Runs the jobs the program queued (promise callbacks), in batches, until none is left or
// the deadline passes; the fault of one that failed, or a Timeout with jobs still queued.
function drainJobs(state, rt) {
  while (rt.hasPendingJob()) {
    if (Date.now() > state.deadline || state.outputExceeded) {
      // a runtime stopped with jobs queued cannot be freed cleanly: its worker is retired instead
      state.abandoned = true
      return faultOf(state, { name: "InternalError", message: "interrupted" })
    }
    const done = rt.executePendingJobs(256)
    if (done.error) {
      state.abandoned = true
      const f = faultOf(state, describe(state, done.error))
      done.error.dispose()
      return f
    }
  }
  return undefined
}

// A returned value once its jobs have run: a promise's outcome (awaited), else the value itself.
// { handle, owned } to read (dispose it when owned), or { fault }.
function settle(state, rt, h) {
  const jobs = drainJobs(state, rt)
  if (jobs !== undefined) return { fault: jobs }
  const p = state.vm.getPromiseState(h)
  if (p.type === "fulfilled" && p.notAPromise) return { handle: h, owned: false }
  if (p.type === "fulfilled") return { handle: p.value, owned: true }
  if (p.type === "rejected") {
    const f = faultOf(state, describe(state, p.error))
    p.error.dispose()
    return { fault: { reason: f.reason, message: f.reason === "Threw" ? "returned a promise that rejected: " + f.message.replace(/^threw /, "") : f.message } }
  }
  return { fault: { reason: "NeverSettled", message: "returned a promise that never settled" } }
}

// Reads a returned value as JSON (a promise awaited first); { text } or { fault }.
function readResult(state, rt, h) {
  const settled = settle(state, rt, h)
  if (settled.fault !== undefined) return settled
  try { return { text: readJson(state, settled.handle) } }
  catch (e) {
    if (e instanceof NotSerializable) return { fault: unreadable(state, e.error) }
    throw e
  }
  finally { if (settled.owned) settled.handle.dispose() }
}

function faultOf(state, error) {
  if (state.outputExceeded) return { reason: "OutputLimit", message: "printed more than " + state.limits.outputChars + " characters" }
  const { name, message } = error
  if (name === "InternalError" && message === "interrupted") return { reason: "Timeout", message: "ran past its time limit of " + state.limits.timeMillis + " ms" }
  if (message === "out of memory") return { reason: "OutOfMemory", message: "ran out of memory (" + Math.round(state.limits.memoryBytes / 1048576) + " MB)" }
  if (message === "stack overflow") return { reason: "StackOverflow", message: "overflowed its stack (" + Math.round(state.limits.stackBytes / 1024) + " KB)" }
  return { reason: "Threw", message: name === "" ? "threw " + message : "threw " + name + ": " + message }
}

// What is taken away from the global object before a program runs: shared memory, and
// every way to make an ArrayBuffer, whose memory QuickJS does not count against the
// runtime's limit (a loop of them would grow the worker's memory to 2 GB); WeakRef and
// FinalizationRegistry, which observe garbage collection. Math.random is made repeatable,
// so that a program's score depends on the program alone.
const REMOVED = ["SharedArrayBuffer", "Atomics", "ArrayBuffer", "DataView", "Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array", "Uint16Array",
  "Int32Array", "Uint32Array", "Float16Array", "Float32Array", "Float64Array", "BigInt64Array", "BigUint64Array", "WeakRef", "FinalizationRegistry"]
const PRELUDE = REMOVED.map((name) => "delete globalThis." + name + ";").join("") +
  "{ let s = 0x2545f491; Math.random = function random() { s ^= s << 13; s ^= s >>> 17; s ^= s << 5; return (s >>> 0) / 4294967296 } }"

function prepare(state) {
  const vm = state.vm
  vm.unwrapResult(vm.evalCode(PRELUDE, "prelude.js")).dispose()
  state.stringify = vm.getProp(vm.global, "JSON").consume((json) => vm.getProp(json, "stringify"))
  installOutput(state)
}

function installOutput(state) {
  const vm = state.vm
  const print = vm.newFunction("print", (...args) => {
    // a string longer than the room left is not read at all
    const room = state.limits.outputChars - state.output.length
    if (args.some((h) => vm.typeof(h) === "string" && stringLength(vm, h) > room)) state.outputExceeded = true
    if (state.outputExceeded) throw new Error("output limit reached")
    const line = args.map((h) => show(state, h)).join(" ") + "\n"
    if (state.output.length + line.length > state.limits.outputChars) {
      state.output += line.slice(0, Math.max(0, state.limits.outputChars - state.output.length))
      state.outputExceeded = true
    } else state.output += line
    // Past the cap every call throws; the interrupt handler also stops the program at its next check.
    if (state.outputExceeded) throw new Error("output limit reached")
  })
  const console = vm.newObject()
  vm.setProp(console, "log", print)
  vm.setProp(vm.global, "console", console)
  vm.setProp(vm.global, "print", print)
  console.dispose()
  print.dispose()
}

// Runs one program in a fresh runtime and context; disposes both whatever happens.
function evaluate(mod, request) {
  const state = { limits: request.limits, output: "", outputExceeded: false, deadline: Date.now() + request.limits.timeMillis, vm: undefined, stringify: undefined, abandoned: false }
  const rt = mod.newRuntime()
  rt.setMemoryLimit(request.limits.memoryBytes)
  rt.setMaxStackSize(request.limits.stackBytes)
  rt.setInterruptHandler(() => state.outputExceeded || Date.now() > state.deadline)
  const vm = (state.vm = rt.newContext())
  const fault = (f) => ({ ok: false, reason: f.reason, message: f.message, output: state.output })
  const fail = (h, prefix) => {
    const f = faultOf(state, describe(state, h))
    h.dispose()
    return fault({ reason: f.reason, message: prefix + f.message })
  }
  try {
    prepare(state)
    const loaded = vm.evalCode(request.source, "program.js")
    if (loaded.error) return fail(loaded.error, "")
    const program = loaded.value
    try {
      if (state.outputExceeded) return fault(faultOf(state, {}))
      if (request.calls === undefined) {
        const read = readResult(state, rt, program)
        return read.fault !== undefined ? fault(read.fault) : { ok: true, value: read.text, results: [], output: state.output }
      }
      if (vm.typeof(program) !== "function") return fault({ reason: "NotAFunction", message: "is not a function (its value is of type " + vm.typeof(program) + ")" })
      const results = []
      for (let i = 0; i < request.calls.length; i++) {
        const args = request.calls[i].map((a) => toHandle(vm, a))
        const called = vm.callFunction(program, vm.undefined, ...args)
        for (const a of args) a.dispose()
        if (called.error) return fail(called.error, "test " + (i + 1) + ": ")
        try {
          if (state.outputExceeded) return fault(faultOf(state, {}))
          const read = readResult(state, rt, called.value)
          if (read.fault !== undefined) return fault({ reason: read.fault.reason, message: "test " + (i + 1) + ": " + read.fault.message })
          results.push(read.text)
        } finally { called.value.dispose() }
      }
      // jobs still queued run under the deadline too, and one passed inside QuickJS' own code (a toJSON that never returns) ends here
      const jobs = drainJobs(state, rt)
      if (jobs !== undefined) return fault(jobs)
      if (Date.now() > state.deadline) return fault(faultOf(state, { name: "InternalError", message: "interrupted" }))
      return { ok: true, value: undefined, results, output: state.output }
    } finally { program.dispose() }
  } catch (e) {
    if (e instanceof ResultTooLong) return fault({ reason: "OutputLimit", message: "returned " + e.message + ", over the limit of " + request.limits.resultChars })
    throw e
  } finally {
    if (!state.abandoned) {
      if (state.stringify !== undefined) state.stringify.dispose()
      vm.dispose()
      rt.dispose()
    }
    lastAbandoned = state.abandoned
  }
}

// whether the last evaluation left its runtime unfreed (its worker must be retired)
let lastAbandoned = false

core.newQuickJSWASMModuleFromVariant(variantModule.default ?? variantModule).then(
  (mod) => {
    parentPort.on("message", (request) => {
      const started = Date.now()
      let reply
      try {
        const result = evaluate(mod, request)
        // a worker whose memory grew past the limit by more than QuickJS' own overhead is retired
        reply = { ...result, broken: lastAbandoned || mod.getWasmMemory().buffer.byteLength > request.limits.memoryBytes + 64 * 1048576 }
      } catch (e) {
        // The host's own stack ran out under deep recursion in QuickJS, or the module failed:
        // its memory is in an unknown state, so this worker is retired.
        const overflow = e instanceof RangeError && /call stack/.test(String(e.message))
        reply = overflow
          ? { ok: false, reason: "StackOverflow", message: "overflowed its stack", output: "", broken: true }
          : { ok: false, reason: "Crashed", message: "crashed the sandbox: " + clip(String(e && e.name) + ": " + String(e && e.message), 300), output: "", broken: true }
      }
      parentPort.postMessage({ id: request.id, millis: Date.now() - started, ...reply })
    })
    parentPort.postMessage({ ready: true })
  },
  (e) => parentPort.postMessage({ ready: false, message: String(e && e.message) }),
)
`
