/**
 * `gyre eval`: scores the base model or a run's checkpoint on an env's held-out set
 * (or its training problems, or both) without training. Prints the mean and a 95%
 * interval per reward component, pass@k and maj@k per env, and writes every rollout to
 * `eval.jsonl` (`Evaluation.evaluateModel`).
 */
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { evaluateModel } from "../app/Evaluation.ts"
import { availableEnvs } from "../app/LoadEnv.ts"
import { parseTemplateArgs } from "../tokenizers/TemplateArgs.ts"
import { coresFlag, failure, templateArgFlag, verboseFlag } from "./run.ts"

const opt = Flag.optional
/** The `eval` command. */
export const evalCommand = Command.make("eval", {
  env: Argument.String("env").pipe(
    Argument.withDescription(`an env (${availableEnvs().join(", ")}) or a path to your module with a default Env export (default: the env of --from)`),
    Argument.optional,
  ),
  from: Flag.String("from").pipe(Flag.withDescription("a run folder (its newest checkpoint) or runs/<name>/step-N (default: the base model)"), opt),
  split: Flag.Literals("split", ["heldout", "train", "all"]).pipe(Flag.withDescription("held-out problems (default), the first training problems, or both"), opt),
  size: Flag.Int("size").pipe(Flag.withDescription("problems per split (default: the run's or env's eval size)"), opt),
  samples: Flag.Int("samples").pipe(Flag.withDescription("completions per problem (default 1)"), opt),
  k: Flag.String("k").pipe(Flag.withDescription("the ks of pass@k and maj@k, e.g. 1,4,16, each at most --samples (default: 1 and --samples)"), opt),
  threshold: Flag.Finite("threshold").pipe(Flag.withDescription("a sample is correct (pass@k, maj@k) when its total reward is at least this (default 1)"), opt),
  temperature: Flag.Finite("temperature").pipe(Flag.withDescription("sampling temperature (default: the run's or env's eval temperature, else 1)"), opt),
  seed: Flag.Int("seed").pipe(Flag.withDescription("seed of problems and sampling (default: the run's, else 0)"), opt),
  out: Flag.String("out").pipe(Flag.withDescription("folder for eval.jsonl (default: the --from run folder, else runs/eval-<env>-<time>)"), opt),
  backend: Flag.String("backend").pipe(Flag.withDescription("\"embedded\" (default) or the URL of a Tinker-protocol service"), Flag.withDefault("embedded")),
  model: Flag.String("model").pipe(Flag.withDescription("embedded: folder of the base model, or the name of one shipped with gyre (base, base-256, calculator, functions; default: the env's, else base)"), opt),
  loraRank: Flag.Int("lora-rank").pipe(Flag.withDescription("LoRA rank of the checkpoint (default 8)"), opt),
  tokenizer: Flag.String("tokenizer").pipe(Flag.withDescription("http: folder with the remote model's tokenizer files"), opt),
  templateArg: templateArgFlag,
  cores: coresFlag,
  verbose: verboseFlag,
}, (p) =>
  evaluateModel({
    env: Option.getOrUndefined(p.env),
    from: Option.getOrUndefined(p.from),
    split: Option.getOrUndefined(p.split),
    size: Option.getOrUndefined(p.size),
    samples: Option.getOrUndefined(p.samples),
    k: Option.getOrUndefined(p.k),
    threshold: Option.getOrUndefined(p.threshold),
    temperature: Option.getOrUndefined(p.temperature),
    seed: Option.getOrUndefined(p.seed),
    out: Option.getOrUndefined(p.out),
    backend: p.backend,
    model: Option.getOrUndefined(p.model),
    loraRank: Option.getOrUndefined(p.loraRank),
    tokenizer: Option.getOrUndefined(p.tokenizer),
    templateArgs: Option.match(p.templateArg, { onNone: () => undefined, onSome: parseTemplateArgs }),
    cores: Option.getOrUndefined(p.cores),
  }, true).pipe(
    Effect.asVoid,
    Effect.catch((e) =>
      Console.error(p.verbose ? failure(e) : `error: ${e.message}`).pipe(Effect.andThen(Effect.sync(() => {
        process.exitCode = 1
      })))
    ),
  )).pipe(
  Command.withDescription("Score the base model or a run's checkpoint on an env's held-out set without training: mean and 95% interval per reward component, pass@k and maj@k per env, every rollout in eval.jsonl."),
  Command.withExamples([
    { command: "eval math", description: "the base model on math's held-out set" },
    { command: "eval --from runs/quick", description: "a run's newest checkpoint on its env's held-out set" },
    { command: "eval --from runs/quick/step-50 --split all --samples 4", description: "an older checkpoint, held-out and training problems, 4 samples each" },
    { command: "eval math --samples 8 --k 1,2,8", description: "pass@1, pass@2 and pass@8 (and maj@k) of the base model, 8 samples per problem" },
    { command: "eval math --size 200 --cores auto", description: "200 held-out problems, their episodes and rewards on every core" },
  ]),
)
