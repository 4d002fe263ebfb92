/**
 * The sandbox's worker: a Node worker thread that loads QuickJS (compiled to
 * WebAssembly) once and evaluates each program it is sent under a work budget, a memory
 * limit, a stack limit and an output cap.
 *
 * The worker's source is a plain CommonJS string, started with `eval: true`, so it needs
 * no build step and runs the same from source (tsx, vitest) and from the compiled package.
 * It reaches QuickJS by the resolved paths of its packages, passed as `workerData`.
 *
 * Each test of an evaluation runs in a fresh QuickJS runtime and context: the program is
 * loaded again and called once, so nothing one test does (a counter, a closure over earlier
 * inputs, a replaced built-in) reaches the next.
 *
 * The work budget is a count, not a clock: QuickJS calls its interrupt handler about once
 * per 10,000 jumps back and function calls, and each call spends one unit of the budget,
 * for the whole evaluation (every test's loading, call, promise jobs and result reading).
 * The same program on the same tests spends the same work however loaded the machine is,
 * so its verdict never depends on the load. Work done inside one long call into QuickJS'
 * own C code is not counted; the host's wall-clock backstop (see `Sandbox.ts`) ends that.
 *
 * What a program sees: the ECMAScript built-ins of QuickJS and `print` / `console.log`
 * (output, capped). Nothing of the host is passed in: no `process`, `require`, file
 * system, network, timers or module loader. Arguments are built in the sandbox value by
 * value from JSON; results come out the same way, with `JSON.stringify` semantics only
 * (see `quickjsValues.ts`). A returned Promise (an `async` function's) is awaited: the jobs
 * the program queued run under the same budget, and a promise still pending when they are
 * done fails with `NeverSettled`. Jobs still queued after a test run under the budget too
 * (a job flood runs out of it).
 *
 * @since 0.1.0
 */
import { quickjsValuesSource } from "./quickjsValues.ts"
import { serveSource } from "./WorkerPool.ts"

/** What the main thread asks the worker: one evaluation. @internal */
export interface WorkerRequest {
  readonly id: number
  readonly source: string
  /** each call's arguments; absent: the program's own value is the result */
  readonly calls: ReadonlyArray<ReadonlyArray<unknown>> | undefined
  readonly limits: {
    readonly work: number
    readonly memoryBytes: number
    readonly stackBytes: number
    readonly outputChars: number
    readonly resultChars: number
  }
}

/** What the worker answers. `work`: interrupt checks spent; `broken`: the worker must not be used again. @internal */
export type WorkerReply =
  | { readonly id: number; readonly ok: true; readonly value: string | undefined; readonly results: ReadonlyArray<string | undefined>; readonly output: string; readonly work: number; readonly millis: number; readonly broken: boolean }
  | { readonly id: number; readonly ok: false; readonly reason: string; readonly message: string; readonly output: string; readonly millis: number; readonly broken: boolean }

const evaluationSource = String.raw`
// Runs the jobs the program queued (promise callbacks), in batches, until none is left or
// the budget is spent; the fault of one that failed, or a Timeout with jobs still queued.
function drainJobs(state) {
  const rt = state.rt
  while (rt.hasPendingJob()) {
    if (state.exhausted || state.outputExceeded) {
      // a runtime stopped with jobs queued cannot be freed cleanly: its worker is retired instead
      state.abandoned = true
      return faultOf(state, state.vm.undefined)
    }
    const done = rt.executePendingJobs(256)
    if (done.error) {
      state.abandoned = true
      const f = faultOf(state, done.error)
      done.error.dispose()
      return f
    }
    // a promise reaction takes in the interrupt that ended its job: the budget is checked
    // here, and the runtime (left with half-run jobs) is not freed
    if (state.exhausted || state.outputExceeded) {
      state.abandoned = true
      return faultOf(state, state.vm.undefined)
    }
  }
  return undefined
}

// A returned value once its jobs have run: a promise's outcome (awaited), else the value itself.
// { handle, owned } to read (dispose it when owned), or { fault }.
function settle(state, h) {
  const jobs = drainJobs(state)
  if (jobs !== undefined) return { fault: jobs }
  const p = state.vm.getPromiseState(h)
  if (p.type === "fulfilled" && p.notAPromise) return { handle: h, owned: false }
  if (p.type === "fulfilled") return { handle: p.value, owned: true }
  if (p.type === "rejected") {
    const f = faultOf(state, p.error)
    p.error.dispose()
    return { fault: { reason: f.reason, message: f.reason === "Threw" ? "returned a promise that rejected: " + f.message.replace(/^threw /, "") : f.message } }
  }
  return { fault: { reason: "NeverSettled", message: "returned a promise that never settled" } }
}

// Reads a returned value as JSON (a promise awaited first); { text } or { fault }.
function readResult(state, h) {
  if (state.outputExceeded) return { fault: faultOf(state, h) }
  const settled = settle(state, h)
  if (settled.fault !== undefined) return settled
  try { return { text: readJson(state, settled.handle) } }
  catch (e) {
    if (e instanceof NotSerializable) return { fault: unreadable(e.fault) }
    if (e instanceof ResultTooLong) return { fault: { reason: "OutputLimit", message: "returned " + e.message + ", over the limit of " + state.limits.resultChars } }
    throw e
  }
  finally { if (settled.owned) settled.handle.dispose() }
}

const consumeFault = (state, h) => {
  const f = faultOf(state, h)
  h.dispose()
  return f
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

// The reader of QuickJS' own errors: the message of an InternalError, "" for anything else.
// InternalError is QuickJS' own (not in the standard): its constructor is taken away from
// the program, so an object with its prototype is one the engine raised (out of memory,
// stack overflow), never one the program made, however it is named.
const ENGINE_ERROR = [
  "(() => {",
  "  const proto = InternalError.prototype, prototypeOf = Object.getPrototypeOf, descriptor = Object.getOwnPropertyDescriptor",
  "  const apply = Reflect.apply, hasOwn = Object.prototype.hasOwnProperty",
  "  delete globalThis.InternalError",
  "  delete proto.constructor",
  "  return (e) => {",
  "    if (typeof e !== 'object' || e === null || prototypeOf(e) !== proto) return ''",
  "    const m = descriptor(e, 'message')",
  "    return m !== undefined && apply(hasOwn, m, ['value']) && typeof m.value === 'string' ? m.value : ''",
  "  }",
  "})()",
].join("\n")

function prepare(state) {
  const vm = state.vm
  vm.unwrapResult(vm.evalCode(PRELUDE, "prelude.js")).dispose()
  state.stringify = vm.getProp(vm.global, "JSON").consume((json) => vm.getProp(json, "stringify"))
  state.engineError = vm.unwrapResult(vm.evalCode(ENGINE_ERROR, "prelude.js"))
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

// The interrupt handler: each call is one unit of work; past the budget (or the output
// cap) it stops the program, and no catch can hold that.
function spend(state) {
  if (state.outputExceeded || state.exhausted) return true
  state.work++
  if (state.work > state.limits.work) state.exhausted = true
  return state.exhausted
}

// Loads the program in a fresh runtime and context and hands its value to use; frees both
// whatever happens (unless jobs were left queued: see drainJobs). { text } or { fault }.
function inFreshContext(mod, state, use) {
  const rt = (state.rt = mod.newRuntime())
  rt.setMemoryLimit(state.limits.memoryBytes)
  rt.setMaxStackSize(state.limits.stackBytes)
  rt.setInterruptHandler(() => spend(state))
  state.vm = rt.newContext()
  let read
  try { read = loadAndUse(state, use) }
  finally { free(state) }
  if (state.unfreeable && read.fault === undefined) {
    return { fault: { reason: "Crashed", message: "crashed the sandbox: QuickJS could not free the runtime it ran in (its promise jobs failed inside QuickJS' own code, e.g. out of memory)" } }
  }
  return read
}

function loadAndUse(state, use) {
  prepare(state)
  const loaded = state.vm.evalCode(state.source, "program.js")
  if (loaded.error) return { fault: consumeFault(state, loaded.error) }
  try {
    return state.outputExceeded ? { fault: faultOf(state, loaded.value) } : use(loaded.value)
  } finally { loaded.value.dispose() }
}

// Frees the test's context and runtime. An engine error a promise reaction took in can leave
// objects QuickJS cannot free, and freeing aborts the module: the worker is retired then.
function free(state) {
  if (!state.abandoned) {
    try {
      if (state.stringify !== undefined) state.stringify.dispose()
      if (state.engineError !== undefined) state.engineError.dispose()
      state.vm.dispose()
      state.rt.dispose()
    } catch (e) {
      state.abandoned = state.unfreeable = true
    }
  }
  state.stringify = state.engineError = undefined
}

// One test: the program's value called with the test's arguments, its result read, and
// the jobs it left queued run; { text } or { fault } (its message names the test).
function callOnce(state, program, args, index) {
  const vm = state.vm
  const fail = (f) => ({ fault: { reason: f.reason, message: "test " + (index + 1) + ": " + f.message } })
  if (vm.typeof(program) !== "function") return { fault: { reason: "NotAFunction", message: "is not a function (its value is of type " + vm.typeof(program) + ")" } }
  const handles = args.map((a) => toHandle(vm, a))
  const called = vm.callFunction(program, vm.undefined, ...handles)
  for (const h of handles) h.dispose()
  if (called.error) return fail(consumeFault(state, called.error))
  const read = called.value.consume((v) => readResult(state, v))
  if (read.fault !== undefined) return fail(read.fault)
  // jobs still queued run under the budget too; a budget spent where nothing could throw (inside QuickJS' own code) ends here
  const jobs = drainJobs(state)
  if (jobs !== undefined) return fail(jobs)
  if (state.exhausted) return fail(faultOf(state, vm.undefined))
  return read
}

// One evaluation: without calls, the program's value; with calls, each test in a fresh
// runtime and context, all under one work budget. The reply, and whether a runtime was left unfreed.
function evaluate(mod, request) {
  const state = { source: request.source, limits: request.limits, output: "", outputExceeded: false, work: 0, exhausted: false, abandoned: false, unfreeable: false,
    rt: undefined, vm: undefined, stringify: undefined, engineError: undefined }
  const failed = (f) => ({ ok: false, reason: f.reason, message: f.message, output: state.output })
  const results = []
  if (request.calls === undefined) {
    const read = inFreshContext(mod, state, (program) => readResult(state, program))
    if (read.fault !== undefined) return { reply: failed(read.fault), abandoned: state.abandoned }
    return { reply: { ok: true, value: read.text, results, output: state.output, work: state.work }, abandoned: state.abandoned }
  }
  for (let i = 0; i < request.calls.length; i++) {
    const read = inFreshContext(mod, state, (program) => callOnce(state, program, request.calls[i], i))
    if (read.fault !== undefined) return { reply: failed(read.fault), abandoned: state.abandoned }
    results.push(read.text)
  }
  return { reply: { ok: true, value: undefined, results, output: state.output, work: state.work }, abandoned: state.abandoned }
}

core.newQuickJSWASMModuleFromVariant(variantModule.default ?? variantModule).then(
  (mod) => {
    // a worker whose memory grew past the limit by more than QuickJS' own overhead is retired
    serve((request) => {
      const { reply, abandoned } = evaluate(mod, request)
      return { ...reply, broken: abandoned || mod.getWasmMemory().buffer.byteLength > request.limits.memoryBytes + 64 * 1048576 }
    }, "overflowed its stack", () => "")
  },
  (e) => parentPort.postMessage({ ready: false, message: String(e && e.message) }),
)
`

/** The worker's source (CommonJS, run with `eval: true`). @internal */
export const workerSource = [
  `"use strict"`,
  `const { parentPort, workerData } = require("node:worker_threads")`,
  `const core = require(workerData.core)`,
  `const variantModule = require(workerData.variant)`,
  quickjsValuesSource,
  serveSource,
  evaluationSource,
].join("\n")
