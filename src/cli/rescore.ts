/**
 * `gyre rescore runs/<name> [env or reward module]`: scores a run's stored rollouts again
 * with a changed reward, without sampling, and shows what changed: per sample the old and
 * new score, the advantages recomputed with the run's settings, and the samples whose
 * advantage changes sign. Writes `rescore-<time>.jsonl` and `rescore-<time>.json` in the
 * run folder.
 */
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import type * as Rescore from "../app/Rescore.ts"
import { rescoreRun } from "../app/rescore/Run.ts"
import { failure, verboseFlag } from "./run.ts"

const fmt = (x: number | null) => (x === null ? "-" : x.toFixed(3))

/** The summary as lines of text: totals, components, then the samples that changed most. */
export const table = (summary: Rescore.Summary): Array<string> => {
  const s = summary.signChanges
  return [
    `${summary.samples} samples, ${summary.groups} groups, ${summary.steps} logged steps | advantage ${summary.advantage}`,
    `totals changed: ${summary.changed} of ${summary.samples} | advantage sign: ${s.reversed} reversed, ${s.activated} activated (0 -> not 0), ${s.silenced} silenced (not 0 -> 0) | masked ${summary.masked.old} -> ${summary.masked.new}`,
    "",
    `${"component".padEnd(24)} ${"old".padStart(8)} ${"new".padStart(8)}  changed`,
    `${"reward/total".padEnd(24)} ${fmt(summary.reward.old).padStart(8)} ${fmt(summary.reward.new).padStart(8)}`,
    ...summary.components.map((c) => `${c.name.padEnd(24)} ${fmt(c.old).padStart(8)} ${fmt(c.new).padStart(8)}  ${c.changed}`),
    ...(summary.top.length === 0 ? ["", "no sample changed"] : [
      "",
      `${"step".padStart(5)} ${"group".padStart(5)} ${"sample".padStart(6)}  ${"reward old -> new".padEnd(18)} ${"advantage old -> new".padEnd(20)} ${"sign".padEnd(9)} completion`,
      ...summary.top.map((r) =>
        `${String(r.step).padStart(5)} ${String(r.group).padStart(5)} ${String(r.sample).padStart(6)}  ${`${fmt(r.reward.old)} -> ${fmt(r.reward.new)}`.padEnd(18)} ${`${fmt(r.advantage.old)} -> ${fmt(r.advantage.new)}`.padEnd(20)} ${r.sign.padEnd(9)} ${JSON.stringify(r.completion.length > 40 ? `${r.completion.slice(0, 37)}...` : r.completion)}`
      ),
    ]),
  ]
}

/** The `rescore` command. */
export const rescoreCommand = Command.make("rescore", {
  run: Argument.String("run-folder").pipe(Argument.withDescription("a run folder, e.g. runs/math-2026-11-29T12-00-00")),
  scorer: Argument.String("env-or-reward").pipe(
    Argument.withDescription("an env (name or path) whose reward scores, or a module whose default export is a Reward (default: the run's own env)"),
    Argument.optional,
  ),
  backend: Flag.String("backend").pipe(Flag.withDescription("for services that use the run's sampler (a judge asking the policy): \"embedded\" or a URL (default: the run's)"), Flag.optional),
  model: Flag.String("model").pipe(Flag.withDescription("embedded: the base model folder, or the name of one shipped with gyre (base, base-256, calculator, functions; default: the env's, else base)"), Flag.optional),
  tokenizer: Flag.String("tokenizer").pipe(Flag.withDescription("folder with the run's model's tokenizer files (default: gyre's character tokenizer)"), Flag.optional),
  verbose: verboseFlag,
}, (p) =>
  rescoreRun({
    run: p.run,
    scorer: Option.getOrUndefined(p.scorer),
    backend: Option.getOrUndefined(p.backend),
    model: Option.getOrUndefined(p.model),
    tokenizer: Option.getOrUndefined(p.tokenizer),
  }).pipe(
    Effect.flatMap((r) =>
      Console.log([
        `gyre rescore: ${r.dir} with ${r.scorer} (${r.kind})`,
        ...table(r.summary),
        ...(r.written !== undefined ? [`wrote ${r.written.rows} and ${r.written.summary}`] : []),
      ].join("\n"))
    ),
    Effect.catch((e) =>
      Console.error(p.verbose ? failure(e) : `error: ${e.message}`).pipe(Effect.andThen(Effect.sync(() => {
        process.exitCode = 1
      })))
    ),
  )).pipe(
  Command.withDescription("Score a run's stored rollouts again with a changed reward, without sampling: old and new scores, the advantages recomputed, the samples whose advantage changes sign."),
  Command.withExamples([
    { command: "rescore runs/quick ./my-math.ts", description: "with the reward of a changed env" },
    { command: "rescore runs/quick ./strict-reward.ts", description: "with a module whose default export is a Reward" },
    { command: "rescore runs/quick", description: "with the run's own env (a deterministic reward scores the same)" },
  ]),
)
