/**
 * Python programs run by a Sandbox Fusion server (bytedance/SandboxFusion, the sandbox
 * tinker-cookbook's code recipe uses), over its HTTP API:
 *
 *   POST {url}/run_code  { code, language: "python", run_timeout, memory_limit_MB, stdin? }
 *   -> { status: "Success" | "Failed" | "SandboxError", message,
 *        run_result?: { status: "Finished" | "Error" | "TimeLimitExceeded", return_code, stdout, stderr, execution_time } }
 *
 * Function tests are one request: a script (`remoteHarness.ts`) that loads the program
 * afresh for each test, calls its function and prints the results as JSON after a random
 * marker; the expected values stay on the host, where results are compared. Each stdin
 * case is one request with the program as it is and the case's `stdin`.
 *
 * A service outage is never the program's fault: a refused connection, no answer within
 * the request timeout, a 5xx, a 429 or `status: "SandboxError"` (or a run whose own
 * status is `Error`) is a `PythonSandboxError` (`Unavailable`), which the reward retries
 * and then masks. The program's own time limit is the server's `run_timeout` (a
 * wall-clock limit on the server: there is no work budget here).
 *
 * @since 0.1.0
 */
import { Config, Effect, Option, Schema } from "effect"
import { checkLimits, defaultLimits, type PythonLimits } from "./Limits.ts"
import { type PythonEvaluation, PythonProgramError, type PythonRequest, PythonSandboxError, type PythonSandboxShape } from "./PythonSandbox.ts"
import { remoteScript } from "./remoteHarness.ts"
import { exitFault, newMarker, readAnswer } from "./remoteRun.ts"

/** Options of the Sandbox Fusion backend. @since 0.1.0 @category models */
export interface SandboxFusionOptions {
  /** the server, e.g. `http://localhost:8080` (or its `/run_code` URL); default: `SANDBOX_FUSION_URL` */
  readonly url?: string
  /** how long to wait for one answer beyond the run's own limit (default 30 seconds) */
  readonly requestSlackSeconds?: number
  /** the default limits of every evaluation (`serviceTimeout`, `memoryMb`, `outputChars`, `resultChars` apply) */
  readonly limits?: Partial<PythonLimits>
}

/** The server's URL setting. @since 0.1.0 @category config */
export const sandboxFusionUrlConfig = Config.String("SANDBOX_FUSION_URL")

const CommandResult = Schema.Struct({
  status: Schema.String,
  return_code: Schema.optional(Schema.NullOr(Schema.Number)),
  stdout: Schema.optional(Schema.NullOr(Schema.String)),
  stderr: Schema.optional(Schema.NullOr(Schema.String)),
  execution_time: Schema.optional(Schema.NullOr(Schema.Number)),
})
const RunCodeResponse = Schema.Struct({
  status: Schema.String,
  message: Schema.optional(Schema.NullOr(Schema.String)),
  run_result: Schema.optional(Schema.NullOr(CommandResult)),
})
type RunResult = typeof CommandResult.Type
const decodeResponse = Schema.decodeUnknownEffect(Schema.fromJsonString(RunCodeResponse))

const unavailable = (url: string, message: string) => new PythonSandboxError({ reason: "Unavailable", message: `Sandbox Fusion at ${url} ${message}` })

/** The `/run_code` endpoint of a server URL. */
const endpointOf = (url: string): string => {
  const trimmed = url.replace(/\/+$/, "")
  return trimmed.endsWith("/run_code") ? trimmed : `${trimmed}/run_code`
}

/** One `/run_code` request: the run's result, or the service's failure. */
const runCode = (endpoint: string, body: Record<string, unknown>, waitMillis: number) =>
  Effect.gen(function* () {
    const response = yield* Effect.tryPromise({
      try: async (signal) => {
        const res = await fetch(endpoint, { method: "POST", headers: { "content-type": "application/json", accept: "application/json" }, body: JSON.stringify(body), signal })
        return { status: res.status, text: await res.text() }
      },
      catch: (e) => unavailable(endpoint, `could not be reached: ${e instanceof Error ? `${e.message}${e.cause instanceof Error ? ` (${e.cause.message})` : ""}` : String(e)}`),
    }).pipe(Effect.timeoutOrElse({ duration: waitMillis, orElse: () => Effect.fail(unavailable(endpoint, `did not answer within ${waitMillis} ms`)) }))
    if (response.status >= 500 || response.status === 429) return yield* unavailable(endpoint, `answered HTTP ${response.status}: ${response.text.slice(0, 300)}`)
    if (response.status !== 200) return yield* new PythonSandboxError({ reason: "Protocol", message: `Sandbox Fusion at ${endpoint} refused the request with HTTP ${response.status}: ${response.text.slice(0, 300)}` })
    const decoded = yield* decodeResponse(response.text).pipe(
      Effect.mapError((e) => new PythonSandboxError({ reason: "Protocol", message: `Sandbox Fusion at ${endpoint} sent an answer that does not decode: ${e.message}` })),
    )
    const run = decoded.run_result ?? undefined
    if (decoded.status === "SandboxError" || run === undefined || run.status === "Error") {
      return yield* unavailable(endpoint, `reported its own error: ${(decoded.message ?? run?.stderr ?? "").slice(0, 300)}`)
    }
    return run
  })

/** What a run's end means for the program: its time limit, a crash, or a non-zero exit. */
const runFault = (run: RunResult, where: string, limits: PythonLimits, output: string) =>
  exitFault({ code: run.return_code ?? 0, stderr: run.stderr ?? "", timedOut: run.status === "TimeLimitExceeded" }, where, limits, output)

const requestBody = (code: string, limits: PythonLimits, stdin?: string) => ({
  code,
  language: "python",
  run_timeout: limits.serviceTimeout,
  memory_limit_MB: Math.ceil(limits.memoryMb),
  ...(stdin === undefined ? {} : { stdin }),
})

/** Function tests: one run of the remote harness, its answer read after the marker. */
const runCalls = (endpoint: string, waitMillis: number, request: PythonRequest & { calls: NonNullable<PythonRequest["calls"]> }, limits: PythonLimits) =>
  Effect.gen(function* () {
    const marker = newMarker()
    const started = Date.now()
    const run = yield* runCode(endpoint, requestBody(remoteScript(request.source, request.calls.entry, request.calls.args, marker), limits), waitMillis)
    const { results, output } = yield* readAnswer(run.stdout ?? "", marker, limits, "Sandbox Fusion", (output) => runFault(run, "", limits, output))
    return { results, outputs: [], output, work: undefined, millis: Date.now() - started } satisfies PythonEvaluation
  })

/** Stdin cases: one run each, the program as it is. */
const runStdio = (endpoint: string, waitMillis: number, request: PythonRequest, limits: PythonLimits) =>
  Effect.gen(function* () {
    const started = Date.now()
    const outputs: Array<string> = []
    for (const [i, stdin] of (request.stdin ?? []).entries()) {
      const run = yield* runCode(endpoint, requestBody(request.source, limits, stdin), waitMillis)
      const stdout = run.stdout ?? ""
      const where = `case ${i + 1}: `
      if (stdout.length > limits.outputChars) return yield* new PythonProgramError({ reason: "OutputLimit", message: `${where}printed more than ${limits.outputChars} characters`, output: stdout.slice(0, limits.outputChars) })
      if (run.status !== "Finished" || (run.return_code ?? 0) !== 0) return yield* runFault(run, where, limits, stdout)
      outputs.push(stdout)
    }
    return { results: [], outputs, output: outputs.join(""), work: undefined, millis: Date.now() - started } satisfies PythonEvaluation
  })

/**
 * Builds the Sandbox Fusion backend; the URL is the option's, else `SANDBOX_FUSION_URL`.
 * @since 0.1.0 @category constructors
 */
export const makeSandboxFusion = Effect.fnUntraced(function* (options: SandboxFusionOptions = {}) {
  const base = checkLimits({ ...defaultLimits, ...options.limits })
  const configured = options.url ?? Option.getOrUndefined(yield* Config.option(sandboxFusionUrlConfig).pipe(Effect.orElseSucceed(() => Option.none<string>())))
  if (configured === undefined || configured.trim() === "") {
    return yield* Effect.die(new Error("PythonSandbox: backend { sandboxFusion } needs a server URL: pass { sandboxFusion: { url: \"http://host:8080\" } } or set SANDBOX_FUSION_URL"))
  }
  const endpoint = endpointOf(configured)
  const slack = (options.requestSlackSeconds ?? 30) * 1000
  const run = (request: PythonRequest): Effect.Effect<PythonEvaluation, PythonProgramError | PythonSandboxError> =>
    Effect.suspend((): Effect.Effect<PythonEvaluation, PythonProgramError | PythonSandboxError> => {
      const limits = { ...base, ...request.limits }
      const waitMillis = limits.serviceTimeout * 1000 + slack
      return request.calls !== undefined
        ? runCalls(endpoint, waitMillis, { ...request, calls: request.calls }, limits)
        : runStdio(endpoint, waitMillis, request, limits)
    })
  return { run } satisfies PythonSandboxShape
})
