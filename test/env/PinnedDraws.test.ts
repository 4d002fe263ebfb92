/**
 * Pins which problems a seed draws from a row env and a JSONL env (train and eval, seeds
 * 0 and 1) and the eval set of each, as the draws were before problems were fetched by
 * index: a change to how rows are indexed, split or permuted must leave every run's
 * problem sequence as it was.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { Env, Reward } from "gyre"

const Problem = Schema.Struct({ question: Schema.String, answer: Schema.Int })
type Problem = typeof Problem.Type
const exact = Reward.make<Problem>("exact", (r) => (r.completion.trim() === String(r.problem.answer) ? 1 : 0))
const items = Array.from({ length: 300 }, (_, i) => ({ question: `q${i}: ${i} * 7 + ${i % 13}`, answer: i * 7 + (i % 13), extra: i % 5 }))

const tmp = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-pinned-"))
afterAll(() => Fs.rmSync(tmp, { recursive: true, force: true }))
const jsonlPath = Path.join(tmp, "rows.jsonl")
Fs.writeFileSync(jsonlPath, items.map((r, i) => (i % 17 === 0 ? "\n" : "") + JSON.stringify(r)).join("\n") + "\n")

const envOf = (name: string, source: Env.Source<Problem>) =>
  Env.make({ name, problem: Problem, source, prompt: (p) => p.question, reward: exact, eval: { heldOut: 0.2, size: 30 } })

/** a short fingerprint of a sequence of problems, in order */
const fingerprint = (problems: ReadonlyArray<unknown>) => Env.hash32(problems.map((p) => JSON.stringify(p)).join("|"))

const draws = (env: Env.AnyEnv, seed: number, split: Env.Split) =>
  Effect.forEach(Array.from({ length: 50 }, (_, index) => index), (index) => Env.problemAt(env, { seed, index, split }))

// measured on the code before the index (each draw re-split and re-shuffled every row)
const PINNED = {
  "train/0": { first: [1911, 463, 610], fingerprint: 2179747271 },
  "train/1": { first: [1033, 1180, 1215], fingerprint: 4245745175 },
  "eval/0": { first: [824, 990, 420], fingerprint: 1317507123 },
  "eval/1": { first: [535, 1148, 1927], fingerprint: 3963888471 },
  evalSet0: 914436893,
  lapped: 2586692852,
}

describe("draws stay what they were", () => {
  for (const [name, make] of [["pinned-rows", () => Env.rows<Problem>(items)], ["pinned-jsonl", () => Env.jsonl<Problem>(jsonlPath)]] as const) {
    it.effect(`${name}: the first 50 train and eval problems of seeds 0 and 1, and the eval set`, () =>
      Effect.gen(function*() {
        // both envs share a name so that their splits and orders are comparable
        const env = envOf("pinned", make())
        const seen: Record<string, unknown> = {}
        for (const split of ["train", "eval"] as const) {
          for (const seed of [0, 1]) {
            const tasks = yield* draws(env, seed, split)
            tasks.forEach((t, index) => assert.strictEqual(t.key, `pinned/${split}/${seed}/${index}`))
            const problems = tasks.map((t) => t.problem)
            seen[`${split}/${seed}`] = { first: problems.slice(0, 3).map((p) => p.answer), fingerprint: fingerprint(problems) }
          }
        }
        seen.evalSet0 = fingerprint((yield* Env.evalSet(env, { seed: 0 })).map((t) => t.problem))
        // past the first epoch of the eval split (about 60 rows): the next epoch's order
        const lapped = yield* Effect.forEach([70, 130, 250, 1000], (index) => Env.problemAt(env, { seed: 3, index, split: "eval" }))
        seen.lapped = fingerprint(lapped.map((t) => t.problem))
        assert.deepStrictEqual(seen, PINNED)
      }))
  }
})
