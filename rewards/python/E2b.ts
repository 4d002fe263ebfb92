/**
 * Python programs run in E2B cloud sandboxes (e2b.dev), through E2B's JavaScript SDK (the
 * `e2b` package, an optional peer of gyre, loaded only when this backend is chosen).
 *
 * One fresh sandbox per evaluation: created from `template`, the program's files written
 * to `/tmp/gyre`, its runs made, and killed at the end (also when the evaluation fails or
 * is interrupted, and when the layer's scope closes). A sandbox is the program's whole
 * machine, so anything it left in a shared one (a planted `sitecustomize.py`, a process
 * left behind) would meet the next program: a sandbox of its own is the only isolation
 * that holds. Each sandbox is also created with
 * a life of its evaluation's time limits plus twice `requestSlackSeconds`, so E2B kills and
 * stops billing one that gyre could not (a crashed host). At most `concurrency` sandboxes
 * live at once (E2B's plans cap concurrent sandboxes; past the cap E2B answers 429). A
 * sandbox reaches no network unless `internet` is set; the layer's first sandbox is checked
 * for `bash`, the interpreter and `timeout`, so a template without them masks samples
 * rather than scoring every program 0.
 *
 * Function tests are one command: the remote harness (`remoteHarness.ts`, as for Sandbox
 * Fusion) loads the program afresh for each test and prints the results as JSON after a
 * random marker; the expected values stay on the host. Each stdin case is one command, the
 * program as it is with the case's input file. A run is
 * `ulimit -d <memoryMb>; exec timeout -k 1 <serviceTimeout> python3 <file>`: the time limit
 * is kept by the sandbox's own clock (exit 124, or a kill past it), so a slow network never
 * turns into a program's `Timeout`; the SDK's command timeout (`serviceTimeout` plus
 * `requestSlackSeconds`) only stops waiting for a sandbox that stopped answering.
 *
 * A service outage is never the program's fault: an SDK error (a refused connection, a
 * 5xx or 429 answer, a request or command that ran past its timeout, a sandbox gone) is a
 * `PythonSandboxError` (`Unavailable`), which the reward retries and then masks.
 *
 * @since 0.1.0
 */
import { Config, Effect, Option, Redacted, Semaphore } from "effect"
import { type CommandHandle, type E2bSdk, importE2b, isMissing, missingE2b, type SdkSandbox } from "./E2bSdk.ts"
import { checkLimits, defaultLimits, type PythonLimits } from "./Limits.ts"
import { type PythonEvaluation, PythonProgramError, type PythonRequest, PythonSandboxError, type PythonSandboxShape } from "./PythonSandbox.ts"
import { remoteScript } from "./remoteHarness.ts"
import { exitFault, newMarker, readAnswer } from "./remoteRun.ts"

// ===== Options =====

/** Options of the E2B backend. @since 0.1.0 @category models */
export interface E2bOptions {
  /** the API key; default: `E2B_API_KEY` */
  readonly apiKey?: string | Redacted.Redacted<string>
  /** the sandbox template: it needs `bash`, `python3` and coreutils' `timeout` (default `"base"`, E2B's own) */
  readonly template?: string
  /** E2B's domain (default: `E2B_DOMAIN`, else the SDK's, `e2b.app`) */
  readonly domain?: string
  /** the control plane's URL, for a self-hosted E2B (default: `E2B_API_URL`, else the SDK's, `https://api.<domain>`) */
  readonly apiUrl?: string
  /** one URL for every sandbox's own API, for a self-hosted E2B (default: `E2B_SANDBOX_URL`, else the SDK's) */
  readonly sandboxUrl?: string
  /** whether programs may reach the internet (default false: a program's packages come with the template) */
  readonly internet?: boolean
  /** sandboxes alive at once, at most (default 20, the smallest plan's cap) */
  readonly concurrency?: number
  /** the interpreter's command in the template (default `"python3"`) */
  readonly python?: string
  /** how long to wait for E2B beyond a run's own limit, and for each request (default 30 seconds) */
  readonly requestSlackSeconds?: number
  /** the default limits of every evaluation (`serviceTimeout`, `memoryMb`, `outputChars`, `resultChars` apply) */
  readonly limits?: Partial<PythonLimits>
}

/** The API key setting. @since 0.1.0 @category config */
export const e2bApiKeyConfig = Config.Redacted("E2B_API_KEY")

/** The SDK's own connection settings, read here so that a `ConfigProvider` sets them too. */
const connectionConfig = Config.all({
  domain: Config.option(Config.String("E2B_DOMAIN")),
  apiUrl: Config.option(Config.String("E2B_API_URL")),
  sandboxUrl: Config.option(Config.String("E2B_SANDBOX_URL")),
})

const WORKDIR = "/tmp/gyre"
/** what a run may write to standard error before it is stopped: a traceback's worth */
const STDERR_CHARS = 65_536

interface Settings {
  readonly sdk: E2bSdk
  readonly apiKey: string
  readonly template: string
  readonly connection: { readonly domain?: string; readonly apiUrl?: string; readonly sandboxUrl?: string }
  readonly python: string
  readonly slackMillis: number
  readonly internet: boolean
}

const unavailable = (message: string) => new PythonSandboxError({ reason: "Unavailable", message: `E2B ${message}` })
const sdkFailure = (doing: string) => (e: unknown) =>
  unavailable(`${doing}: ${e instanceof Error ? `${e.name}: ${e.message}${e.cause instanceof Error ? ` (${e.cause.message})` : ""}` : String(e)}`.slice(0, 600))

// ===== Sandboxes =====

/** A fresh sandbox whose life covers `runs` runs; E2B kills it after that even if gyre cannot. */
const create = (s: Settings, runs: number, limits: PythonLimits) =>
  Effect.tryPromise({
    try: (signal) =>
      s.sdk.Sandbox.create(s.template, {
        apiKey: s.apiKey,
        ...s.connection,
        timeoutMs: Math.ceil(runs * (limits.serviceTimeout + 2) * 1000 + 2 * s.slackMillis),
        requestTimeoutMs: s.slackMillis,
        metadata: { createdBy: "gyre pythonTests" },
        allowInternetAccess: s.internet,
        signal,
      }),
    catch: sdkFailure("could not create a sandbox"),
  })

/** Kills a sandbox; a failure is logged, never the evaluation's: the sandbox's own life ends it. */
const kill = (s: Settings, sandbox: SdkSandbox) =>
  Effect.tryPromise(() => sandbox.kill({ requestTimeoutMs: s.slackMillis })).pipe(
    Effect.catch((e) => Effect.logWarning(`E2B: could not kill sandbox ${sandbox.sandboxId} (it ends with its own timeout): ${e instanceof Error ? e.message : String(e)}`)),
    Effect.asVoid,
  )

const write = (s: Settings, sandbox: SdkSandbox, files: Array<{ path: string; data: string }>) =>
  Effect.tryPromise({ try: (signal) => sandbox.files.write(files, { requestTimeoutMs: s.slackMillis, signal }), catch: sdkFailure("could not write the program's files") })

// ===== Runs =====

interface RunOutcome {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
  readonly timedOut: boolean
  /** it printed past `stdoutChars` or `STDERR_CHARS` and was stopped */
  readonly flooded: boolean
}

/**
 * Fails when the template lacks what a run needs: without this, every program would end
 * with status 127, scored as its own fault. Once per layer, on its first sandbox.
 */
const checkTemplate = (s: Settings, sandbox: SdkSandbox) =>
  Effect.tryPromise({
    try: async () => {
      const probe = `for c in bash ${s.python} timeout; do command -v "$c" > /dev/null || echo "$c"; done`
      const handle = await sandbox.commands.run(probe, { background: true, timeoutMs: s.slackMillis, requestTimeoutMs: s.slackMillis })
      return (await handle.wait()).stdout.trim()
    },
    catch: sdkFailure("could not check the sandbox's template"),
  }).pipe(
    Effect.flatMap((missing) =>
      missing === ""
        ? Effect.void
        : Effect.fail(new PythonSandboxError({ reason: "Protocol", message: `E2B template "${s.template}" has no ${missing.split("\n").join(", ")}: pythonTests needs bash, ${s.python} and coreutils' timeout in it` })),
    ),
  )

/** The command of one run: memory and time limited inside the sandbox. */
const commandOf = (s: Settings, limits: PythonLimits, file: string, stdinFile: string | undefined) =>
  `ulimit -d ${Math.ceil(limits.memoryMb * 1024)}; exec timeout -k 1 ${limits.serviceTimeout}s ${s.python} ${file} < ${stdinFile ?? "/dev/null"}`

/** One run of `file`; output past the caps stops it, and it is read as the sandbox ended it. */
const runFile = (s: Settings, sandbox: SdkSandbox, limits: PythonLimits, file: string, stdinFile: string | undefined, stdoutChars: number) =>
  Effect.gen(function* () {
    const waitMillis = limits.serviceTimeout * 1000 + s.slackMillis
    const started = Date.now()
    const { result, flooded } = yield* Effect.tryPromise({
      try: async () => {
        let out = 0
        let err = 0
        let flooded = false
        let handle: CommandHandle | undefined
        const count = (n: number, stderr: boolean) => {
          if (stderr) err += n
          else out += n
          if (!flooded && (out > stdoutChars || err > STDERR_CHARS)) {
            flooded = true
            void handle?.kill().catch(() => false)
          }
        }
        handle = await sandbox.commands.run(commandOf(s, limits, file, stdinFile), {
          background: true,
          cwd: WORKDIR,
          envs: { PYTHONHASHSEED: "0", PYTHONIOENCODING: "utf-8" },
          timeoutMs: waitMillis,
          requestTimeoutMs: s.slackMillis,
          onStdout: (d) => count(d.length, false),
          onStderr: (d) => count(d.length, true),
        })
        if (flooded) void handle.kill().catch(() => false)
        const result = await handle.wait().catch((e: unknown) => {
          if (e instanceof s.sdk.CommandExitError) return { exitCode: e.exitCode, stdout: e.stdout, stderr: e.stderr }
          throw e
        })
        return { result, flooded }
      },
      catch: sdkFailure("could not run the program"),
    }).pipe(Effect.timeoutOrElse({ duration: waitMillis + 1000, orElse: () => Effect.fail(unavailable(`did not answer within ${waitMillis + 1000} ms`)) }))
    const code = result.exitCode
    // 124: `timeout` stopped it; a kill (137) after the limit is `timeout`'s too, one before it is memory
    const timedOut = code === 124 || (code === 137 && Date.now() - started >= limits.serviceTimeout * 1000)
    return { code, stdout: result.stdout, stderr: result.stderr, timedOut, flooded } satisfies RunOutcome
  })

/** Function tests: one run of the remote harness, its answer read after the marker. */
const runCalls = (s: Settings, sandbox: SdkSandbox, calls: NonNullable<PythonRequest["calls"]>, source: string, limits: PythonLimits) =>
  Effect.gen(function* () {
    const marker = newMarker()
    yield* write(s, sandbox, [{ path: `${WORKDIR}/harness.py`, data: remoteScript(source, calls.entry, calls.args, marker) }])
    // room for the answer line: each result's JSON, escaped once more in the answer's
    const answerChars = 2 * calls.args.length * (limits.resultChars + 16) + 4096
    const run = yield* runFile(s, sandbox, limits, "harness.py", undefined, limits.outputChars + answerChars)
    if (run.flooded) return yield* new PythonProgramError({ reason: "OutputLimit", message: `printed more than ${limits.outputChars} characters`, output: run.stdout.slice(0, limits.outputChars) })
    return yield* readAnswer(run.stdout, marker, limits, "E2B", (output) => exitFault(run, "", limits, output))
  })

/** Stdin cases: one run each, the program as it is, the inputs written beside it. */
const runStdio = (s: Settings, sandbox: SdkSandbox, inputs: ReadonlyArray<string>, source: string, limits: PythonLimits) =>
  Effect.gen(function* () {
    yield* write(s, sandbox, [{ path: `${WORKDIR}/main.py`, data: source }, ...inputs.map((data, i) => ({ path: `${WORKDIR}/stdin${i}.txt`, data }))])
    const outputs: Array<string> = []
    for (const i of inputs.keys()) {
      const run = yield* runFile(s, sandbox, limits, "main.py", `stdin${i}.txt`, limits.outputChars)
      const where = `case ${i + 1}: `
      const output = run.stdout.slice(0, limits.outputChars)
      if (run.flooded || run.stdout.length > limits.outputChars) return yield* new PythonProgramError({ reason: "OutputLimit", message: `${where}printed more than ${limits.outputChars} characters`, output })
      if (run.code !== 0 || run.timedOut) return yield* exitFault(run, where, limits, output)
      outputs.push(run.stdout)
    }
    return outputs
  })

// ===== Constructor =====

/** The SDK, or a defect that says how to install it. */
const loadSdk = (load: () => Promise<E2bSdk>) =>
  Effect.tryPromise({ try: load, catch: (e) => e }).pipe(Effect.catch((e) => Effect.die(isMissing(e) ? new Error(missingE2b) : e)))

/** The settings of the options; invalid options throw a RangeError. @internal */
export const checkE2bOptions = (options: E2bOptions) => {
  const base = checkLimits({ ...defaultLimits, ...options.limits })
  const concurrency = options.concurrency ?? 20
  if (!(Number.isInteger(concurrency) && concurrency >= 1)) throw new RangeError(`PythonSandbox: e2b.concurrency must be a positive integer, got ${concurrency}`)
  const slack = options.requestSlackSeconds ?? 30
  if (!(Number.isFinite(slack) && slack > 0)) throw new RangeError(`PythonSandbox: e2b.requestSlackSeconds must be a positive number, got ${slack}`)
  const python = options.python ?? "python3"
  if (!/^[A-Za-z0-9_./-]+$/.test(python)) throw new RangeError(`PythonSandbox: e2b.python must be a command name or path, got ${JSON.stringify(python)}`)
  return { base, concurrency, slackMillis: slack * 1000, python, template: options.template ?? "base", internet: options.internet ?? false }
}

/**
 * Builds the E2B backend in the layer's scope: the SDK is loaded (a defect naming the
 * install command when the `e2b` package is missing), the API key is the option's, else
 * `E2B_API_KEY`; sandboxes still alive when the scope closes are killed.
 * @since 0.1.0 @category constructors
 */
export const makeE2b = Effect.fnUntraced(function* (options: E2bOptions = {}, load: () => Promise<E2bSdk> = importE2b) {
  const { base, concurrency, ...rest } = checkE2bOptions(options)
  const sdk = yield* loadSdk(load)
  const key = options.apiKey ?? Option.getOrUndefined(yield* Config.option(e2bApiKeyConfig).pipe(Effect.orElseSucceed(() => Option.none())))
  const apiKey = key === undefined ? "" : Redacted.isRedacted(key) ? Redacted.value(key) : key
  if (apiKey.trim() === "") return yield* Effect.die(new Error("PythonSandbox: backend { e2b } needs an API key: pass { e2b: { apiKey } } or set E2B_API_KEY"))
  const configured = yield* connectionConfig.pipe(Effect.orElseSucceed(() => ({ domain: Option.none<string>(), apiUrl: Option.none<string>(), sandboxUrl: Option.none<string>() })))
  const connection: Settings["connection"] = {}
  for (const name of ["domain", "apiUrl", "sandboxUrl"] as const) {
    const value = options[name] ?? Option.getOrUndefined(configured[name])
    if (value !== undefined) Object.assign(connection, { [name]: value })
  }
  const s: Settings = { sdk, apiKey, connection, ...rest }
  const permits = yield* Semaphore.make(concurrency)
  const live = new Set<SdkSandbox>()
  yield* Effect.addFinalizer(() => Effect.forEach([...live], (sandbox) => kill(s, sandbox), { concurrency: "unbounded", discard: true }))
  const acquire = (runs: number, limits: PythonLimits) =>
    Effect.acquireRelease(create(s, runs, limits).pipe(Effect.tap((sandbox) => Effect.sync(() => live.add(sandbox)))), (sandbox) =>
      kill(s, sandbox).pipe(Effect.ensuring(Effect.sync(() => live.delete(sandbox)))))
  let templateChecked = false
  const sandboxFor = (runs: number, limits: PythonLimits) =>
    Effect.gen(function* () {
      const sandbox = yield* acquire(runs, limits)
      if (!templateChecked) yield* checkTemplate(s, sandbox).pipe(Effect.tap(() => Effect.sync(() => (templateChecked = true))))
      return sandbox
    })
  const evaluate = (request: PythonRequest, limits: PythonLimits) =>
    Effect.gen(function* () {
      const started = Date.now()
      if (request.calls !== undefined) {
        const { results, output } = yield* runCalls(s, yield* sandboxFor(1, limits), request.calls, request.source, limits)
        return { results, outputs: [], output, work: undefined, millis: Date.now() - started } satisfies PythonEvaluation
      }
      const inputs = request.stdin ?? []
      const outputs = inputs.length === 0 ? [] : yield* runStdio(s, yield* sandboxFor(inputs.length, limits), inputs, request.source, limits)
      return { results: [], outputs, output: outputs.join(""), work: undefined, millis: Date.now() - started } satisfies PythonEvaluation
    })
  const run = (request: PythonRequest): Effect.Effect<PythonEvaluation, PythonProgramError | PythonSandboxError> =>
    Effect.suspend(() => permits.withPermits(1)(Effect.scoped(evaluate(request, { ...base, ...request.limits }))))
  return { run } satisfies PythonSandboxShape
})
