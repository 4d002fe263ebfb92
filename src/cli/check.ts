/**
 * `gyre check <env>`: runs an env's problems through its reward's pre-flight checks
 * before training, prints one line per finding and a summary, and exits 1 when there
 * are findings.
 */
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { checkEnv, type CheckOptions, DEFAULT_SEEDED_SAMPLES, reportLines } from "../app/Check.ts"
import { availableEnvs, loadEnv } from "../app/LoadEnv.ts"

/** Checks an env's problems and prints what was found; the exit code is 1 on findings. */
export const checkAndPrint = (env: Parameters<typeof checkEnv>[0], options: CheckOptions) =>
  checkEnv(env, options).pipe(
    Effect.flatMap((report) =>
      Console.log(reportLines(report).join("\n")).pipe(Effect.andThen(Effect.sync(() => {
        if (report.findings.length > 0) process.exitCode = 1
      })))
    ),
  )

/** Loads the env (as `gyre run` does), checks its problems and prints what was found; the exit code is 1 on findings or an error. */
export const check = (options: { readonly env: string } & CheckOptions) =>
  loadEnv(options.env).pipe(
    Effect.flatMap((env) => checkAndPrint(env, options)),
    Effect.catch((e) =>
      Console.error(`error: ${e.message}`).pipe(Effect.andThen(Effect.sync(() => {
        process.exitCode = 1
      })))
    ),
  )

/** The `check` command. */
export const checkCommand = Command.make(
  "check",
  {
    env: Argument.String("env").pipe(
      Argument.withDescription(`an env in envs/ (${availableEnvs().join(", ")}) or a path to your module with a default Env export`),
    ),
    samples: Flag.Int("samples").pipe(
      Flag.withDescription(`problems checked per split: a row source's first N rows (default every row), a seeded env's N draws (default ${DEFAULT_SEEDED_SAMPLES})`),
      Flag.optional,
    ),
    split: Flag.Literals("split", ["train", "eval", "all"] as const).pipe(
      Flag.withDescription("the split checked (default all: train, then eval)"),
      Flag.withDefault("all" as const),
    ),
  },
  (p) => check({ env: p.env, split: p.split, ...Option.match(p.samples, { onNone: () => ({}), onSome: (samples) => ({ samples }) }) }),
).pipe(
  Command.withDescription(
    "Check an env's problems before training: each problem runs through the pre-flight checks its reward's leaves declare (mathAnswer: a gold it cannot read as math, which it would compare as text). Prints `<problem key>: <reward>: <message>` per finding and `checked N problems: K findings`; exits 1 when there are findings. Loads no model and samples nothing. A reward of your own declares a check with Reward.make(name, score, { check: (problem) => message or undefined }).",
  ),
  Command.withExamples([
    { command: "check ./my-math.ts", description: "every row of both splits of a row env" },
    { command: "check math --samples 500 --split train", description: "500 drawn problems of a seeded env's train split" },
  ]),
)
