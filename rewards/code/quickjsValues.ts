/**
 * How the sandbox's worker reads QuickJS values and errors on the host side: arguments
 * built from JSON, results read with `JSON.stringify` semantics only, and the reason of a
 * failure taken from the engine's own signals, never from the text of what was thrown.
 *
 * A plain CommonJS string, part of the worker's source (see `worker.ts`). Every function
 * takes the evaluation's `state`: `state.vm` is the context of the test being run,
 * `state.stringify` and `state.engineError` are functions taken from that context before
 * the program ran, so nothing the program replaces changes how it is read.
 *
 * @since 0.1.0
 */

/** The reading half of the worker's source (CommonJS). @internal */
export const quickjsValuesSource = String.raw`
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

// A result JSON cannot read: the fault of what reading it threw, or what it is.
class NotSerializable extends Error {
  constructor(fault) { super(fault.message); this.fault = fault }
}

class ResultTooLong extends Error {
  constructor(n) { super("a result of " + n + " characters") ; this.chars = n }
}

// The JSON text of a QuickJS object or boolean, by the context's own JSON.stringify taken
// before the program ran, and by nothing else (undefined when JSON has no text for it).
function stringifyStrict(state, h) {
  const vm = state.vm
  const out = vm.callFunction(state.stringify, vm.undefined, h)
  if (out.error) {
    const fault = faultOf(state, out.error)
    out.error.dispose()
    throw new NotSerializable(fault)
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
// getString when that call fails (once the budget is spent every call is interrupted).
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

// A QuickJS value as JSON text (undefined when it has none: a function, undefined). A
// BigInt or a Symbol is not JSON at all: NotSerializable, as JSON.stringify would throw.
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
  else if (type === "bigint" || type === "symbol") {
    throw new NotSerializable({ reason: "ResultNotSerializable", message: "returned a " + (type === "bigint" ? "BigInt" : "Symbol") + ", which has no JSON value" })
  }
  if (text !== undefined && text.length > state.limits.resultChars) throw new ResultTooLong(text.length)
  return text
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

// The message of an error QuickJS itself raised (its own InternalError: out of memory,
// stack overflow), "" for anything else, a program's own throws included. The check runs
// with 1 MiB of headroom over the memory limit, which the failure may have left full.
function engineMessage(state, h) {
  const vm = state.vm
  state.rt.setMemoryLimit(state.limits.memoryBytes + 1048576)
  try {
    const out = vm.callFunction(state.engineError, vm.undefined, h)
    if (out.error) {
      out.error.dispose()
      return ""
    }
    return out.value.consume((x) => (vm.typeof(x) === "string" ? vm.getString(x) : ""))
  } finally { state.rt.setMemoryLimit(state.limits.memoryBytes) }
}

// Why a program failed, from the evaluation's own signals: the output cap was hit, the
// work budget ran out (the interrupt handler stopped it), QuickJS ran out of memory or
// stack; else it threw, and the message says what.
function faultOf(state, h) {
  if (state.outputExceeded) return { reason: "OutputLimit", message: "printed more than " + state.limits.outputChars + " characters" }
  if (state.exhausted) return { reason: "Timeout", message: "ran past its work budget of " + state.limits.work + " interrupt checks" }
  const engine = engineMessage(state, h)
  if (engine === "out of memory") return { reason: "OutOfMemory", message: "ran out of memory (" + Math.round(state.limits.memoryBytes / 1048576) + " MB)" }
  if (engine === "stack overflow") return { reason: "StackOverflow", message: "overflowed its stack (" + Math.round(state.limits.stackBytes / 1024) + " KB)" }
  const { name, message } = describe(state, h)
  return { reason: "Threw", message: name === "" ? "threw " + message : "threw " + name + ": " + message }
}

// How a result that cannot be read fails: its stack overflow or budget as such, else ResultNotSerializable.
function unreadable(fault) {
  if (fault.reason !== "Threw") return fault
  return { reason: "ResultNotSerializable", message: "returned a result JSON cannot read (" + fault.message + ")" }
}
`
