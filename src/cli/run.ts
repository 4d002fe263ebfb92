/**
 * `npx tsx run <env> [flags]`: RL (or SFT) on an env, on the embedded backend or a
 * remote Tinker-protocol service.
 */
import { Console, Effect, Option } from "effect"
import { Argument, CliError, CliOutput, Command, Flag } from "effect/cli"
import * as Advantage from "../vocabulary/Advantage.ts"
import { LossFn } from "../contract/Contract.ts"
import { availableEnvs } from "../app/LoadEnv.ts"
import { type RunOptions, train } from "../app/Training.ts"
import { parseTemplateArgs } from "../tokenizers/TemplateArgs.ts"
import { parseCores } from "../run/workers/Cores.ts"

/** `--template-arg key=value` (repeatable): an extra variable of the model's chat template, its value read as JSON, else as text. */
export const templateArgFlag = Flag.KeyValuePair("template-arg").pipe(
  Flag.withDescription(
    "an extra variable of the model's chat template as key=value, repeatable, the value read as JSON else as text (e.g. --template-arg enable_thinking=false); overrides the env's chat.templateArgs; recorded in config.json",
  ),
  Flag.optional,
)

/** `--cores N|auto`: the episode worker threads of `run` and `eval`. */
export const coresFlag = Flag.String("cores").pipe(
  Flag.mapTryCatch(
    (text) => {
      const cores = parseCores(text)
      if (cores === undefined) throw new Error("a whole number of cores (1 or more) or auto")
      return cores
    },
    (e) => (e instanceof Error ? e.message : String(e)),
  ),
  Flag.withDescription(
    "cores that play episodes (envs, tools, rewards, tokenizing): 1 plays them on the main thread (default), N on N worker threads, auto on every core; the same results for a seed on any number (agent envs too: each worker serves its agents an endpoint of its own; game and services envs stay on the main thread). Pays off where an episode spends milliseconds of CPU (agents, heavy rewards or tools); cheap single-turn and tool episodes cost less than handing them between threads, so keep 1 for those",
  ),
  Flag.optional,
)

/** `--verbose`: print a failure with its stack and cause, not only its one-line message. */
export const verboseFlag = Flag.Boolean("verbose").pipe(Flag.withDescription("on failure, print the error's stack and cause too"), Flag.withDefault(false))

/** A failure in full, for `--verbose`. */
export const failure = (e: unknown): string =>
  `error: ${e instanceof Error ? `${e.stack ?? e.message}${e.cause !== undefined ? `\ncause: ${String(e.cause instanceof Error ? e.cause.stack : e.cause)}` : ""}` : JSON.stringify(e)}`

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
  sft: Flag.Boolean("sft").pipe(
    Flag.withDescription("supervised fine-tuning on the env's reference answers (cross_entropy); to start RL from an SFT run, use --init-from"),
    Flag.optional,
  ),
  async: Flag.Boolean("async").pipe(Flag.withDescription("sample step k+1 while step k trains"), Flag.withDefault(false)),
  workers: Flag.Boolean("workers").pipe(
    Flag.withDescription("embedded: sampler and trainer in worker threads, training split over 2 threads (1.25-1.3x faster on 2 cores; always on with --async)"),
    Flag.withDefault(false),
  ),
  cores: coresFlag,
  maxStepsOffPolicy: int(
    "max-steps-off-policy",
    "async: sample rollouts up to k steps ahead, so step s trains on rollouts of policy version s - k (default 1; more keeps a slow sampler's work ahead of the trainer, at k versions of staleness)",
  ),
  maxMasked: num("max-masked", "a step that masks more than this fraction of its samples (a reward's or a tool server's infrastructure failing) waits before the next (1 s, doubling, at most 8 s); such steps stop the run once they last 3 steps in a row and 30 s, and fail a run that ends with more than half of its steps so (default 0.5; 1 = never)"),
  streamMinibatches: int(
    "stream-minibatches",
    "sync: train a step's groups in N minibatches while the rest are sampled, each minibatch's forward_backward submitted as soon as its groups are scored (group-local advantages only; off by default)",
  ),
  optimEvery: Flag.Literals("optim-every", ["step", "minibatch"]).pipe(
    Flag.withDescription("with --stream-minibatches: one optimizer step per step (the minibatches' mean loss; default) or one per minibatch"),
    Flag.optional,
  ),
  maxLag: int("max-lag", "async: most policy versions a group may lag before it is requeued or dropped (default: --max-steps-off-policy, else 1)"),
  stale: Flag.Literals("stale", ["requeue", "drop"]).pipe(Flag.withDescription("async: what to do with groups older than --max-lag"), Flag.optional),
  name: Flag.String("name").pipe(Flag.withDescription("run name; the run folder is <out>/<name> (default <env>-<time>)"), Flag.optional),
  out: Flag.String("out").pipe(Flag.withDescription("folder for run folders (default runs)"), Flag.withDefault("runs")),
  resume: Flag.String("resume").pipe(
    Flag.withDescription("continue runs/<name> after its last checkpoint, with its saved settings"),
    Flag.optional,
  ),
  backend: Flag.String("backend").pipe(
    Flag.withDescription("\"embedded\" (the in-process model, default), \"loops\" (a run provisioned on Baseten Loops, see --loops-url) or the URL of a Tinker-protocol service; --resume continues on the run's own (config.json) and refuses another"),
    Flag.optional,
  ),
  model: Flag.String("model").pipe(Flag.withDescription("embedded: a folder of a base model or the name of one shipped with gyre (base, base-256, calculator, functions; default: the env's own, else base); http, loops: base model name"), Flag.optional),
  loraRank: int("lora-rank", "LoRA rank (default 8)"),
  tokenizer: Flag.String("tokenizer").pipe(
    Flag.withDescription("http: folder with tokenizer.json and tokenizer_config.json of the remote model"),
    Flag.optional,
  ),
  loopsUrl: Flag.String("loops-url").pipe(
    Flag.withDescription("--backend loops: the Loops control plane (default LOOPS_API_URL, else https://api.baseten.co); the key is BASETEN_API_KEY"),
    Flag.optional,
  ),
  keepRun: Flag.Boolean("keep-run").pipe(
    Flag.withDescription("--backend loops: leave the run up at the end, for --resume (it bills until deactivated; gyre prints the command that stops it)"),
    Flag.withDefault(false),
  ),
  loopsNewRun: Flag.Boolean("loops-new-run").pipe(
    Flag.withDescription("--backend loops with --resume: when the folder's Loops run is gone, continue from the last checkpoint on a new run"),
    Flag.withDefault(false),
  ),
  loopsReadyTimeout: int("loops-ready-timeout", "--backend loops: seconds a new run may take to be ready (default 1800; cold starts take minutes)"),
  logRolloutsEvery: int("log-rollouts-every", "write every sample of the first, every Nth and the last step to rollouts.jsonl (default 10; 0 = never)"),
  hackWatchEvery: int(
    "hack-watch-every",
    "every Nth step, rescore a sample of its completions under meaning-preserving edits and exploit probes (hack/<component>/* metrics, a warning when a rate rises with the reward; default 10; 0 = never)",
  ),
  lrSchedule: Flag.Literals("lr-schedule", ["constant", "linear", "cosine"]).pipe(
    Flag.withDescription("learning-rate schedule after warmup: constant, or linear / cosine decay from --lr to --min-lr over the run's steps (default constant)"),
    Flag.optional,
  ),
  warmupSteps: int("warmup-steps", "steps of linear warmup up to --lr (default 0)"),
  minLr: num("min-lr", "the learning rate a linear or cosine schedule decays to (default 0)"),
  lossAggregation: Flag.Literals("loss-aggregation", ["token_mean", "sequence_mean", "constant"]).pipe(
    Flag.withDescription(
      "how per-token losses add up: token_mean (each trained token weighs the same; default), sequence_mean (each trained sample weighs the same; GRPO), constant (sum / --loss-constant; Dr. GRPO)",
    ),
    Flag.optional,
  ),
  lossDenominator: Flag.Literals("loss-denominator", ["trained", "batch"]).pipe(
    Flag.withDescription(
      "what token_mean and sequence_mean divide by: trained (the tokens or samples that train: a sample whose advantage is 0 counts in none; default) or batch (every unmasked sample of the step and its tokens, as the papers' 1/G; the recipes)",
    ),
    Flag.optional,
  ),
  lossConstant: num("loss-constant", "divisor for --loss-aggregation constant (default groups x group-size x max-tokens)"),
  dynamicSampling: int(
    "dynamic-sampling",
    "DAPO dynamic sampling: drop groups whose rewards are all equal and refill the batch with new problems, in at most N extra sampling rounds per step (0 = drop only; off by default)",
  ),
  initFrom: Flag.String("init-from").pipe(
    Flag.withDescription(
      "start a new run from another run's trainer weights (its LoRA adapter), with a fresh optimizer: runs/<name> (its newest checkpoint that loads), runs/<name>/step-N, or a state file runs/<name>/state/step-N.ckpt",
    ),
    Flag.optional,
  ),
  recipe: Flag.Literals("recipe", ["grpo", "dr-grpo", "dapo", "gspo", "cispo"]).pipe(
    Flag.withDescription(
      "a published method's settings, each averaged over the whole batch as its paper does: grpo (ppo clip 0.2, sequence_mean, (r - mean) / (sample std + 1e-4), k3 KL 0.04 in the loss), dr-grpo (mean_only advantages, constant aggregation), dapo (clip 0.8/1.28, token_mean, dynamic sampling, overlong shaping), gspo (sequence ratios), cispo; flags given with it override its settings, printed at the start",
    ),
    Flag.optional,
  ),
  tensorboard: Flag.Boolean("tensorboard").pipe(
    Flag.withDescription("also write the run as TensorBoard events in <run folder>/tensorboard: every metric as a scalar, each step's reward histogram and a few samples as text; watch with tensorboard --logdir runs"),
    Flag.optional,
  ),
  otlp: Flag.String("otlp").pipe(
    Flag.withDescription("export the run's phase spans, logs and metrics over OTLP/HTTP (JSON) to this collector, e.g. http://127.0.0.1:4318 (/v1/traces, /v1/metrics and /v1/logs below it)"),
    Flag.optional,
  ),
  dpo: Flag.Boolean("dpo").pipe(
    Flag.withDescription("DPO instead of RL: each step's problems become the env's preference pairs (Env.make({ preference })), trained against the policy the run starts from (the base model, or the weights of --init-from, frozen); held-out evaluations add test/dpo/accuracy, the fraction of pairs whose implicit reward margin is above 0"),
    Flag.optional,
  ),
  dpoBeta: num("dpo-beta", "DPO's beta, the inverse temperature of the implicit reward (default 0.1)"),
  teacher: Flag.String("teacher").pipe(
    Flag.withDescription(
      "on-policy distillation: a teacher that scores every token the policy samples, its per-token reverse KL folded into the advantages as --kl-coef's is (centred on the step's mean; --teacher-uncentred as tinker-cookbook's distillation recipe): a model shipped with gyre (calculator), a model folder, or a run (runs/<name>, runs/<name>/step-N); its tokenizer must be the student's. On a remote --backend the service scores: a sampler path (tinker://...) or a base model it serves; on loops also loops:<run id>, a run left up with --keep-run",
    ),
    Flag.optional,
  ),
  teacherCoef: num("teacher-coef", "the weight of the teacher's KL in the advantages (default 1); the env's reward still adds its own advantage"),
  teacherUncentred: Flag.Boolean("teacher-uncentred").pipe(
    Flag.withDescription("fold the teacher's per-token KL in as -coef * (student - teacher log-prob), not centred on the step's mean, as tinker-cookbook's on-policy distillation recipe does (default: centred, as --kl-coef's penalty; it learned faster in gyre's measurements, docs/distillation-and-preferences.md)"),
    Flag.withDefault(false),
  ),
  overlongBuffer: num("overlong-buffer", "DAPO overlong shaping: over the last fraction f of --max-tokens a sample's reward is lowered linearly, to -1 at --max-tokens (e.g. 0.2; off by default)"),
  klCoef: num(
    "kl-coef",
    "KL penalty against the base model (adapter off), folded into each sampled token's advantage as tinker-cookbook's kl_penalty_coef; 0 = off (default). Logs kl/policy_ref_v1 and _k3; 0.05-0.5 suits group_std advantages",
  ),
  klLossCoef: num(
    "kl-loss-coef",
    "KL to the base model as a term of the loss, DeepSeekMath's GRPO: beta·(pi_ref/pi - log(pi_ref/pi) - 1) at every sampled token, aggregated as the loss is (trains through a custom loss: one more forward per step); 0 = off (default; --recipe grpo sets 0.04)",
  ),
  templateArg: templateArgFlag,
  verbose: verboseFlag,
}

type Parsed = {
  readonly [K in keyof typeof flags]: (typeof flags)[K] extends Flag.Flag<infer A> ? A : (typeof flags)[K] extends Argument.Argument<infer B> ? B : never
}

const get = <A>(o: Option.Option<A>) => Option.getOrUndefined(o)

/** The parsed flags as the options of `train`. */
export const optionsOf = (p: Parsed): RunOptions => ({
  env: get(p.env),
  steps: get(p.steps),
  groups: get(p.groups),
  groupSize: get(p.groupSize),
  loss: get(p.loss),
  lossConfig: get(p.lossConfig),
  advantage: get(p.advantage),
  lr: get(p.lr),
  weightDecay: get(p.weightDecay),
  gradClip: get(p.gradClip),
  maxTokens: get(p.maxTokens),
  temperature: get(p.temperature),
  topP: get(p.topP),
  topK: get(p.topK),
  seed: get(p.seed),
  difficulty: get(p.difficulty),
  microBatch: get(p.microBatch),
  rewardConcurrency: get(p.rewardConcurrency),
  sampleConcurrency: get(p.sampleConcurrency),
  lrSchedule: get(p.lrSchedule),
  warmupSteps: get(p.warmupSteps),
  minLr: get(p.minLr),
  lossAggregation: get(p.lossAggregation),
  lossDenominator: get(p.lossDenominator),
  lossConstant: get(p.lossConstant),
  dynamicSampling: get(p.dynamicSampling),
  klCoef: get(p.klCoef),
  klLossCoef: get(p.klLossCoef),
  recipe: get(p.recipe),
  tensorboard: get(p.tensorboard),
  otlp: get(p.otlp),
  dpo: get(p.dpo),
  dpoBeta: get(p.dpoBeta),
  teacher: get(p.teacher),
  teacherCoef: get(p.teacherCoef),
  teacherUncentred: p.teacherUncentred,
  overlongBuffer: get(p.overlongBuffer),
  initFrom: get(p.initFrom),
  evalEvery: get(p.evalEvery),
  evalSize: get(p.evalSize),
  evalTemperature: get(p.evalTemperature),
  saveEvery: get(p.saveEvery),
  sft: get(p.sft),
  async: p.async,
  workers: p.workers,
  cores: get(p.cores),
  maxLag: get(p.maxLag),
  maxStepsOffPolicy: get(p.maxStepsOffPolicy),
  streamMinibatches: get(p.streamMinibatches),
  maxMasked: get(p.maxMasked),
  optimEvery: get(p.optimEvery),
  stale: get(p.stale),
  name: get(p.name),
  out: p.out,
  resume: get(p.resume),
  backend: get(p.backend),
  model: get(p.model),
  loraRank: get(p.loraRank),
  tokenizer: get(p.tokenizer),
  templateArgs: Option.match(p.templateArg, { onNone: () => undefined, onSome: parseTemplateArgs }),
  loops: { url: get(p.loopsUrl), keepRun: p.keepRun, newRun: p.loopsNewRun, readyTimeoutSeconds: get(p.loopsReadyTimeout) },
  logRolloutsEvery: get(p.logRolloutsEvery),
  hackWatchEvery: get(p.hackWatchEvery),
  print: true,
})

/** The `run` command. */
export const runCommand = Command.make("run", flags, (p) =>
  train(optionsOf(p)).pipe(
    Effect.asVoid,
    // A failed run prints one clear line (what went wrong and what to do) and exits 1.
    Effect.catch((e) =>
      Console.error(p.verbose ? failure(e) : `error: ${e.message}`).pipe(Effect.andThen(Effect.sync(() => {
        process.exitCode = 1
      })))
    ),
  )).pipe(
    Command.withDescription("Reinforcement learning on an environment: sample groups, score with the env's reward, train, publish, repeat."),
    Command.withExamples([
      { command: "run math", description: "RL on the math env with the embedded model (about 3.5 minutes on 2 cores)" },
      { command: "run calculator", description: "multi-turn RL with a calculator tool: held-out accuracy 0.27 -> 0.96 in about a minute" },
      { command: "run words --sft --steps 200 --lr 3e-3 --name words-sft", description: "SFT on an env's reference answers ..." },
      { command: "run words --init-from runs/words-sft --steps 200", description: "... then RL from that checkpoint's weights" },
      { command: "run math --steps 50 --lr 5e-4 --name quick", description: "a short run into runs/quick" },
      { command: "run ./my-env.ts --loss importance_sampling", description: "your own env module" },
      { command: "run --resume runs/quick", description: "continue after the last checkpoint, with the run's saved settings" },
      { command: "run math --backend http://127.0.0.1:8000", description: "train through a Tinker-protocol service" },
      {
        command: "run math --backend http://127.0.0.1:8000 --async --max-steps-off-policy 2 --loss importance_sampling --loss-config tis_cap=2",
        description: "sample two steps ahead of the trainer, importance weights truncated at 2",
      },
      { command: "run math --backend loops --model Qwen/Qwen3-8B --lora-rank 16 --tokenizer ./qwen3", description: "train on a Loops run (BASETEN_API_KEY), deactivated at the end" },
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
