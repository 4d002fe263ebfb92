/**
 * What a service backend's run of a program means, on the host: the marker the remote
 * harness (`remoteHarness.ts`) writes its answer after, the answer read back and checked
 * against the limits, and the fault of a run that ended without one. Sandbox Fusion and
 * E2B share these, so a program gets the same verdict on either service.
 *
 * @since 0.1.0
 */
import { randomBytes } from "node:crypto"
import { Effect, Schema } from "effect"
import type { PythonLimits } from "./Limits.ts"
import { printable, PythonProgramError, PythonSandboxError } from "./PythonSandbox.ts"

const Answer = Schema.Union([
  Schema.Struct({ ok: Schema.Literal(true), results: Schema.Array(Schema.String) }),
  Schema.Struct({ ok: Schema.Literal(false), reason: Schema.Literals(["Threw", "NotAFunction", "StackOverflow", "OutOfMemory", "Exited", "ResultNotSerializable", "OutputLimit"]), message: Schema.String }),
])
const decodeAnswer = Schema.decodeUnknownEffect(Schema.fromJsonString(Answer))

/** A fresh marker for one run: the program cannot guess it, so it cannot forge the answer's line. @internal */
export const newMarker = (): string => `__gyre_${randomBytes(12).toString("hex")}__`

/** How a run ended: its exit status, its standard error, and whether it ran past its time limit. @internal */
export interface RunEnd {
  readonly code: number
  readonly stderr: string
  readonly timedOut: boolean
}

/** What a run's end means for the program: its time limit, memory, or an exit without an answer. @internal */
export const exitFault = (end: RunEnd, where: string, limits: PythonLimits, output: string): PythonProgramError => {
  if (end.timedOut) return new PythonProgramError({ reason: "Timeout", message: `${where}ran past the service's time limit of ${limits.serviceTimeout} s`, output })
  const stderr = printable(end.stderr.trim().split("\n").slice(-3).join(" | ").slice(0, 500))
  if (end.code === 137 || end.code === -9) return new PythonProgramError({ reason: "OutOfMemory", message: `${where}was killed (exit ${end.code}), out of memory (${limits.memoryMb} MB)`, output })
  if (/MemoryError/.test(stderr) && end.code !== 0) return new PythonProgramError({ reason: "OutOfMemory", message: `${where}ran out of memory (${limits.memoryMb} MB)`, output })
  return new PythonProgramError({ reason: end.code === 0 ? "Exited" : "Threw", message: `${where}exited with status ${end.code}${stderr === "" ? "" : `: ${stderr}`}`, output })
}

/**
 * The function tests' results in a run's standard output: what the program printed before
 * the marker (at most `outputChars`), and the results after it, decoded and checked. A run
 * with no marker failed before the harness could answer: `noAnswer` says why.
 * @internal
 */
export const readAnswer = Effect.fnUntraced(function* (stdout: string, marker: string, limits: PythonLimits, service: string, noAnswer: (output: string) => PythonProgramError) {
  const at = stdout.lastIndexOf(`\n${marker}`)
  const printed = at < 0 ? stdout : stdout.slice(0, at)
  const output = printed.slice(0, limits.outputChars)
  if (printed.length > limits.outputChars) return yield* new PythonProgramError({ reason: "OutputLimit", message: `printed more than ${limits.outputChars} characters`, output })
  if (at < 0) return yield* noAnswer(output)
  const answer = yield* decodeAnswer(stdout.slice(at + marker.length + 1).trim()).pipe(
    Effect.mapError((e) => new PythonSandboxError({ reason: "Protocol", message: `the harness's answer from ${service} does not decode: ${e.message}` })),
  )
  if (!answer.ok) return yield* new PythonProgramError({ reason: answer.reason, message: printable(answer.message), output })
  const tooLong = answer.results.findIndex((r) => r.length > limits.resultChars)
  if (tooLong >= 0) return yield* new PythonProgramError({ reason: "OutputLimit", message: `test ${tooLong + 1}: returned a result of ${answer.results[tooLong]!.length} characters, over the limit of ${limits.resultChars}`, output })
  return { results: answer.results.map((t) => JSON.parse(t) as Schema.Json), output }
})
