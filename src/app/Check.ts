/**
 * `gyre check <env>`: an env's problems run through its reward's pre-flight checks
 * before training (a gold `mathAnswer` cannot read as math, ...). Every row of a split
 * for a row source (or the first N with `samples`), N drawn problems for a seeded one;
 * no model is loaded and nothing is sampled.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { AnyEnv } from "../env/Definition.ts"
import { type Mixture, members } from "../env/Mixture.ts"
import { rowIndex } from "../env/RowIndex.ts"
import { heldOutFraction, problemAt, type Split } from "../env/Tasks.ts"
import { checkProblem } from "../reward/Check.ts"

/** Which problems `checkEnv` checks. */
export interface CheckOptions {
  /** the split(s) to draw from (default "all": train, then eval) */
  readonly split?: Split | "all"
  /** problems per split: a row source's first N rows (default every row); a seeded env's N draws (default 200) */
  readonly samples?: number
}

/** One finding: the problem's key, the reward leaf that found it, and what it found. */
export interface CheckFinding {
  readonly key: string
  readonly reward: string
  readonly message: string
}

/** What `checkEnv` found. */
export interface CheckReport {
  /** the problems checked */
  readonly checked: number
  readonly findings: ReadonlyArray<CheckFinding>
}

/** Problems a seeded env draws per split when `samples` is not given. */
export const DEFAULT_SEEDED_SAMPLES = 200

/** The splits of one env that `split` names: "all" leaves out the eval split when nothing is held out (it is drawn from the same problems). */
const splitsOf = (env: AnyEnv, split: Split | "all"): ReadonlyArray<Split> =>
  split !== "all" ? [split] : heldOutFraction(env) === 0 ? ["train"] : ["train", "eval"]

/** The problems of one env's split, each with its key: rows as `<env>/<split>/row <n>`, drawn problems by their task key. */
const problemsOf = (env: AnyEnv, split: Split, samples: number | undefined) =>
  Effect.gen(function* () {
    if (env.source._tag === "Seeded") {
      const n = samples ?? DEFAULT_SEEDED_SAMPLES
      return yield* Effect.forEach(Array.from({ length: n }, (_, index) => index), (index) => problemAt(env, { seed: 0, index, split }))
    }
    const rows = yield* rowIndex(env)
    const pool = [...rows.split(split)]
    const chosen = samples === undefined ? pool : pool.slice(0, samples)
    return yield* Effect.forEach(chosen, (row) => Effect.map(rows.row(row), (problem) => ({ key: `${env.name}/${split}/row ${row}`, problem: problem as unknown })))
  })

/**
 * Runs every problem of the chosen split(s) of an env (each member of a mixture) through
 * its reward's pre-flight checks (`Reward.checkProblem`), and returns the problems
 * checked and every finding, in order.
 */
export const checkEnv = Effect.fn("Check.checkEnv")(function* (source: AnyEnv | Mixture, options: CheckOptions = {}) {
  const samples = options.samples
  if (samples !== undefined && !(Number.isInteger(samples) && samples > 0)) {
    return yield* Effect.fail(new TypeError(`--samples must be a positive integer, got ${samples}`))
  }
  let checked = 0
  const findings: Array<CheckFinding> = []
  for (const [env] of members(source)) {
    for (const split of splitsOf(env, options.split ?? "all")) {
      const problems = yield* problemsOf(env, split, samples)
      for (const { key, problem } of problems) {
        checked++
        for (const f of yield* checkProblem(env.reward, problem)) findings.push({ key, ...f })
      }
    }
  }
  return { checked, findings } satisfies CheckReport
})

/** The report as lines: one per finding (`<problem key>: <reward>: <message>`), then the summary. */
export const reportLines = (report: CheckReport): Array<string> => [
  ...report.findings.map((f) => `${f.key}: ${f.reward}: ${f.message}`),
  `checked ${report.checked} problems: ${report.findings.length} ${report.findings.length === 1 ? "finding" : "findings"}`,
]
