/**
 * `npx tsx run <env> [flags]`: RL (or SFT) on an env, on the embedded backend or a
 * remote Tinker-protocol service.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { Console, Effect, Layer, Option, Schema, SchemaIssue } from "effect"
import { Argument, CliError, CliOutput, Command, Flag } from "effect/cli"
import * as Advantage from "../Advantage.ts"
import { LossFn } from "../Contract.ts"
import * as Env from "../Env.ts"
import * as Metrics from "../Metrics.ts"
import * as Runner from "../Runner.ts"
import * as RunLog from "../RunLog.ts"
import { backendLayer } from "./backend.ts"
import { availableEnvs, isPath, loadEnv } from "./loadEnv.ts"
import { terminalProgress } from "./progress.ts"

const int = (name: string, description: string) => Flag.Int(name).pipe(Flag.withDescription(description), Flag.optional)
const num = (name: string, description: string) => Flag.Finite(name).pipe(Flag.withDescription(description), Flag.optional)

const flags = {
  env: Argument.String("env").pipe(
    Argument.withDescription(`an env in envs/ (${availableEnvs().join(", ")}) or a path to your module with a default Env export (not needed with --resume)`),
    Argument.optional,
  ),
  steps: int("steps", "RL steps to run (default 2000)"),
  groups: int("groups", "problems per step, one sampling group each (default 8)"),
  groupSize: int("group-size", "completions sampled per problem (default 8)"),
  loss: Flag.Literals("loss", LossFn.literals).pipe(Flag.withDescription("loss function (default ppo)"), Flag.optional),
  lossConfig: Flag.KeyValuePair("loss-config").pipe(
    Flag.withDescription("loss settings as key=value, e.g. --loss-config clip_low_threshold=0.8"),
    Flag.optional,
  ),
  advantage: Flag.Literals("advantage", Advantage.Mode.literals).pipe(
    Flag.withDescription("advantage normalization (default group_std: (r - mean) / std per group)"),
    Flag.optional,
  ),
  lr: num("lr", "Adam learning rate (default 1e-3 for LoRA on the embedded model)"),
  weightDecay: num("weight-decay", "decoupled weight decay (default 0)"),
  gradClip: num("grad-clip", "clip the gradient's global norm (default 1; 0 = off)"),
  maxTokens: int("max-tokens", "most tokens per completion (default: the env's)"),
  temperature: num("temperature", "sampling temperature (default: the env's, else 1)"),
  topP: num("top-p", "nucleus sampling threshold in (0, 1]"),
  topK: int("top-k", "sample from the k most likely tokens (0 = off)"),
  seed: int("seed", "seed for problems, sampling and initialization (default 0)"),
  difficulty: int("difficulty", "the env's difficulty knob (default: the env's)"),
  microBatch: int("micro-batch", "datums per forward_backward call (default 0 = all at once)"),
  rewardConcurrency: int("reward-concurrency", "reward evaluations in flight (default 64)"),
  sampleConcurrency: int("sample-concurrency", "sample requests in flight (default 8)"),
  evalEvery: int("eval-every", "score the held-out set every N steps (default 500; 0 = never)"),
  evalSize: int("eval-size", "held-out problems per evaluation (default: the env's eval.size, else 300)"),
  evalTemperature: num("eval-temperature", "sampling temperature for evaluation (default: the env's eval.temperature, else 1)"),
  saveEvery: int("save-every", "save a checkpoint every N steps (default 500); the last step is always saved"),
  sft: Flag.Boolean("sft").pipe(Flag.withDescription("supervised fine-tuning on the env's reference answers (cross_entropy)"), Flag.withDefault(false)),
  async: Flag.Boolean("async").pipe(Flag.withDescription("sample step k+1 while step k trains"), Flag.withDefault(false)),
  workers: Flag.Boolean("workers").pipe(
    Flag.withDescription("embedded: sampler and trainer in worker threads, training split over 2 threads (1.25-1.3x faster on 2 cores; always on with --async)"),
    Flag.withDefault(false),
  ),
  maxLag: int("max-lag", "async: most policy versions a group may lag before it is requeued or dropped (default 1; rollouts are prefetched one step ahead, so lag is at most 1)"),
  stale: Flag.Literals("stale", ["requeue", "drop"]).pipe(Flag.withDescription("async: what to do with groups older than --max-lag"), Flag.optional),
  name: Flag.String("name").pipe(Flag.withDescription("run name; the run folder is <out>/<name> (default <env>-<time>)"), Flag.optional),
  out: Flag.String("out").pipe(Flag.withDescription("folder for run folders (default runs)"), Flag.withDefault("runs")),
  resume: Flag.String("resume").pipe(
    Flag.withDescription("continue runs/<name> after its last checkpoint, with its saved settings"),
    Flag.optional,
  ),
  backend: Flag.String("backend").pipe(
    Flag.withDescription("\"embedded\" (the in-process model, default) or the URL of a Tinker-protocol service"),
    Flag.withDefault("embedded"),
  ),
  model: Flag.String("model").pipe(Flag.withDescription("embedded: folder of the base model (default models/base); http: base model name"), Flag.optional),
  loraRank: int("lora-rank", "LoRA rank (default 8)"),
  tokenizer: Flag.String("tokenizer").pipe(
    Flag.withDescription("http: folder with tokenizer.json and tokenizer_config.json of the remote model"),
    Flag.optional,
  ),
  logRolloutsEvery: int("log-rollouts-every", "write every sample of every Nth step to rollouts.jsonl (default 10; 0 = never)"),
}

type Parsed = {
  readonly [K in keyof typeof flags]: (typeof flags)[K] extends Flag.Flag<infer A> ? A : (typeof flags)[K] extends Argument.Argument<infer B> ? B : never
}

const get = <A>(o: Option.Option<A>) => Option.getOrUndefined(o)
/** `{ key: value }` when the flag was given, else `{}`: spread over the settings it overrides. */
const set = <K extends string, A>(key: K, o: Option.Option<A>): { [P in K]?: A } =>
  (Option.isSome(o) ? { [key]: o.value } : {}) as { [P in K]?: A }

/** Settings from defaults, the env, a resumed run's config and the flags, in that order. */
const settingsFrom = (
  p: Parsed,
  source: Env.AnyEnv | Env.Mixture,
  envSpec: string,
  saved: Runner.RunSettings | undefined,
  resumeDir: string | undefined,
) =>
  Effect.gen(function* () {
    const envName = source.name
    const first = Env.members(source)[0]![0]
    const base = saved ?? Runner.defaults(envName, {
      ...(get(p.name) !== undefined ? { name: get(p.name)!, outDir: Path.join(p.out, get(p.name)!) } : {}),
    })
    const name = base.name
    const outDir = resumeDir ?? Path.join(p.out, name)
    const lossConfig = get(p.lossConfig)
    const overrides = {
      ...saved?.samplingOverrides,
      ...set("maxTokens", p.maxTokens),
      ...set("temperature", p.temperature),
      ...set("topP", p.topP),
      ...set("topK", p.topK),
    }
    const candidate = {
      ...base,
      name,
      outDir,
      env: envName,
      envSpec,
      ...set("steps", p.steps),
      ...set("groups", p.groups),
      ...set("groupSize", p.groupSize),
      ...set("loss", p.loss),
      ...(lossConfig !== undefined
        ? { lossConfig: Object.fromEntries(Object.entries(lossConfig).map(([k, v]) => [k, Number(v)])) }
        : {}),
      ...set("advantage", p.advantage),
      adam: {
        ...base.adam,
        ...set("learning_rate", p.lr),
        ...set("weight_decay", p.weightDecay),
        ...set("grad_clip_norm", p.gradClip),
      },
      samplingOverrides: overrides,
      ...(saved === undefined && first.eval?.size !== undefined ? { evalSize: first.eval.size } : {}),
      ...(saved === undefined && first.eval?.temperature !== undefined ? { evalTemperature: first.eval.temperature } : {}),
      ...set("seed", p.seed),
      ...set("difficulty", p.difficulty),
      ...set("microBatch", p.microBatch),
      ...set("rewardConcurrency", p.rewardConcurrency),
      ...set("sampleConcurrency", p.sampleConcurrency),
      ...set("evalEvery", p.evalEvery),
      ...set("evalSize", p.evalSize),
      ...set("evalTemperature", p.evalTemperature),
      ...set("saveEvery", p.saveEvery),
      ...(p.sft ? { sft: true } : {}),
      ...(p.async ? { async: true } : {}),
      ...set("maxLag", p.maxLag),
      ...set("staleGroups", p.stale),
      ...set("logRolloutsEvery", p.logRolloutsEvery),
    }
    return yield* Schema.decodeUnknownEffect(Runner.RunSettings)(candidate).pipe(
      Effect.mapError((e) => new Runner.RunError({ reason: "Settings", message: `invalid settings: ${describeIssues(e.issue, candidate, flagOf)}` })),
    )
  })

/** Settings fields as the flags that set them, for error messages. */
const FLAG_OF: Record<string, string> = {
  seed: "--seed", difficulty: "--difficulty",
  steps: "--steps", groups: "--groups", groupSize: "--group-size", learning_rate: "--lr", weight_decay: "--weight-decay",
  grad_clip_norm: "--grad-clip", maxTokens: "--max-tokens", temperature: "--temperature", topP: "--top-p", topK: "--top-k",
  microBatch: "--micro-batch", rewardConcurrency: "--reward-concurrency", sampleConcurrency: "--sample-concurrency",
  evalEvery: "--eval-every", evalSize: "--eval-size", evalTemperature: "--eval-temperature", saveEvery: "--save-every",
  maxLag: "--max-lag", logRolloutsEvery: "--log-rollouts-every", lossConfig: "--loss-config",
}

/** The flag that sets a settings path, e.g. `["adam", "learning_rate"]` -> `--lr`. */
const flagOf = (path: ReadonlyArray<string>): string | undefined => {
  if (path[0] === "lossConfig" && path.length > 1) return `--loss-config ${path.slice(1).join(".")}`
  const last = path[path.length - 1]
  return last !== undefined ? FLAG_OF[last] : undefined
}

/**
 * Schema issues as one line each that names what was given: `--lr must be a value greater
 * than or equal to 0, got -1`. `name` maps a settings path to what the user wrote (a
 * flag, or a config.json field); paths it does not know are named `settings field a.b`.
 */
const describeIssues = (
  issue: SchemaIssue.Issue,
  value: unknown,
  name: (path: ReadonlyArray<string>) => string | undefined,
): string =>
  SchemaIssue.makeFormatterStandardSchemaV1()(issue).issues.map((i) => {
    const path = (i.path ?? []).map((k) => String(typeof k === "object" && k !== null ? k.key : k))
    const given = path.reduce<unknown>((v, k) => (typeof v === "object" && v !== null ? (v as Record<string, unknown>)[k] : undefined), value)
    const who = name(path) ?? (path.length > 0 ? `settings field ${path.join(".")}` : "settings")
    const what = i.message.startsWith("Expected ") ? `must be ${i.message.slice("Expected ".length)}` : `: ${i.message}`
    const got = given !== undefined && !/, got /.test(what) ? `, got ${typeof given === "number" ? String(given) : JSON.stringify(given)}` : ""
    return `${who} ${what}${got}`.replace(/ :/, ":")
  }).join("; ")

/** Flags that would change the data order of a resumed run. */
const FIXED_ON_RESUME = ["groups", "groupSize", "seed", "difficulty"] as const

const readSaved = (dir: string) =>
  Effect.gen(function* () {
    const file = Path.join(dir, "config.json")
    if (!Fs.existsSync(file)) {
      return yield* new Runner.RunError({ reason: "Resume", message: `${file} not found: --resume takes a run folder such as runs/math-2026-01-01T00-00-00` })
    }
    const json = yield* Effect.try({
      try: () => JSON.parse(Fs.readFileSync(file, "utf8")) as unknown,
      catch: (e) => new Runner.RunError({ reason: "Resume", message: `${file} is not valid JSON: ${(e as Error).message}` }),
    })
    return yield* Schema.decodeUnknownEffect(Runner.RunSettings)(json).pipe(
      Effect.mapError((e) =>
        new Runner.RunError({ reason: "Resume", message: `${file} is not a run's config: ${describeIssues(e.issue, json, (path) => `field ${path.join(".")}`)}` })
      ),
    )
  })

/** The `run` command. */
export const runCommand = Command.make("run", flags, (p) =>
  Effect.gen(function* () {
    const resumeDir = get(p.resume)
    const saved = resumeDir !== undefined ? yield* readSaved(resumeDir) : undefined
    if (saved !== undefined) {
      const changed = FIXED_ON_RESUME.filter((k) => Option.isSome(p[k]))
      if (changed.length > 0) {
        return yield* new Runner.RunError({
          reason: "Resume",
          message: `${changed.map((k) => FLAG_OF[k] ?? `--${k}`).join(", ")} cannot change on --resume (the data order depends on it); start a new run instead`,
        })
      }
    }
    const given = get(p.env)
    const spec = saved?.envSpec ?? saved?.env ?? given
    if (spec === undefined) {
      return yield* new Runner.RunError({ reason: "Settings", message: `give an env, e.g. \`npx tsx run math\` (available: ${availableEnvs().join(", ")}), or --resume runs/<name>` })
    }
    const source = yield* loadEnv(spec)
    const envSpec = isPath(spec) ? Path.resolve(spec) : spec
    const settings = yield* settingsFrom(p, source, envSpec, saved, resumeDir)
    yield* Console.log(
      `gyre: ${settings.sft ? "SFT" : "RL"} on ${settings.env} | ${settings.steps} steps x ${settings.groups} groups x ${settings.groupSize} | loss ${settings.sft ? "sft (cross_entropy)" : settings.loss} | lr ${settings.adam.learning_rate} | backend ${p.backend} | run folder ${settings.outDir}`,
    )
    const layer = backendLayer({
      backend: p.backend,
      seed: settings.seed,
      stateDir: RunLog.paths(settings.outDir).state,
      model: get(p.model) ?? (Env.isEnv(source) && p.backend === "embedded" ? source.baseModel : undefined),
      loraRank: get(p.loraRank),
      tokenizer: get(p.tokenizer),
      workers: settings.async || p.workers,
    })
    const metrics = yield* Runner.run(settings, source, { resume: resumeDir !== undefined }).pipe(
      Effect.provide(Layer.fresh(layer)),
      Effect.provideService(Runner.Progress, terminalProgress()),
    )
    const lastEval = [...metrics].reverse().find((m) => Metrics.heldOutScore(m) !== undefined)
    const score = lastEval === undefined ? undefined : Metrics.heldOutScore(lastEval)
    yield* Console.log(
      `done: ${settings.outDir} (metrics.jsonl, rollouts.jsonl, checkpoints.jsonl)${score !== undefined ? `; ${score.label} ${score.value.toFixed(3)} at step ${lastEval!["step"]}` : ""}`,
    )
  }).pipe(
    // A failed run prints one clear line (what went wrong and what to do) and exits 1.
    Effect.catch((e) =>
      Console.error(`error: ${e.message}`).pipe(Effect.andThen(Effect.sync(() => {
        process.exitCode = 1
      })))
    ),
  )).pipe(
    Command.withDescription("Reinforcement learning on an environment: sample groups, score with the env's reward, train, publish, repeat."),
    Command.withExamples([
      { command: "run math", description: "RL on envs/math.ts with the embedded model (about 4-5 minutes on 2 cores)" },
      { command: "run math --steps 50 --lr 5e-4 --name quick", description: "a short run into runs/quick" },
      { command: "run ./my-env.ts --loss importance_sampling", description: "your own env module" },
      { command: "run --resume runs/quick", description: "continue after the last checkpoint, with the run's saved settings" },
      { command: "run math --backend http://127.0.0.1:8000", description: "train through a Tinker-protocol service" },
    ]),
  )

/**
 * How the CLI answers a command line it cannot parse: one line per problem on stderr,
 * naming the flag, the closest known flag, and `--help` (instead of the whole help page).
 * Help and version output are unchanged.
 */
export const cliPresenter = CliOutput.layerPresenter({
  present: (event) => {
    if (event._tag !== "InvalidInvocation") return CliOutput.defaultPresenter.present(event)
    return Effect.forEach(event.errors, (e) => Console.error(`error: ${invocationError(e)}; see --help`), { discard: true })
  },
})

const invocationError = (e: CliError.NonShowHelpErrors): string => {
  if (e._tag === "UnrecognizedOption") {
    return `unknown flag ${e.option}${e.suggestions.length > 0 ? ` (did you mean ${e.suggestions.join(" or ")}?)` : ""}`
  }
  return e.message.replace(/\s*\n\s*/g, " ")
}
