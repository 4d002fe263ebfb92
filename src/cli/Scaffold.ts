/**
 * The files `gyre init <name>` writes into a user's project: an env, and a property test
 * of its reward written as docs/testing-rewards.md shows. Both import only gyre's public
 * entry points, as a user's own files do.
 */
import * as Path from "node:path"
import { Effect, Schema } from "effect"
import * as PlatformFs from "../platform/FileSystem.ts"

/** Why `gyre init` wrote nothing: a bad name, or a file that is there already. */
export class ScaffoldError extends Schema.TaggedError<ScaffoldError>()("ScaffoldError", {
  reason: Schema.Literals(["InvalidName", "Exists", "WriteFailed"]),
  message: Schema.String,
}) {}

/** An env name that is also a file name and an identifier-like label: as `Env.make` accepts. */
const NAME = /^[A-Za-z][A-Za-z0-9_-]*$/

/** envs/<name>.ts: a single-turn env whose reward checks a number. */
export const envFile = (name: string): string => `/**
 * ${name}: a gyre environment. Run it with
 *
 *   npx gyre run ./envs/${name}.ts --steps 200
 *
 * and test its reward with npx vitest run test/${name}.test.ts. Change the problem, the
 * source, the prompt and the reward to your task (see gyre's docs/environments.md).
 */
import { Schema } from "effect"
import { Env, Reward } from "gyre"
import { maxLength, numericAnswer } from "gyre/rewards"

export const Problem = Schema.Struct({ a: Schema.Int, b: Schema.Int })

/** 1 when the completion's number is a + b */
export const correct = numericAnswer((p: typeof Problem.Type) => p.a + p.b)

export default Env.make({
  name: ${JSON.stringify(name)},
  problem: Problem,
  source: Env.seeded(({ random }) => ({ a: random.int(0, 9), b: random.int(0, 9) })),
  prompt: ({ a, b }) => \`What is \${a} + \${b}?\`,
  reward: Reward.weighted({
    correct: [correct, 1],
    brief: [maxLength(6), 0], // weight 0: logged beside the total, not optimized
  }),
  sampling: { maxTokens: 6, temperature: 1 },
  eval: { heldOut: 0.2, size: 20 },
})
`

/** test/<name>.test.ts: the reward's laws and hack probes, with vitest and fast-check. */
export const testFile = (name: string): string => `/**
 * The reward of envs/${name}.ts, property-tested: npx vitest run test/${name}.test.ts
 */
import { Effect } from "effect"
import { describe, it } from "vitest"
import fc from "fast-check"
import { arb, laws, probes, transforms } from "gyre/testing"
import { correct } from "../envs/${name}.ts"

const problems = fc.record({ a: fc.integer({ min: 0, max: 9 }), b: fc.integer({ min: 0, max: 9 }) })

describe(${JSON.stringify(`${name}: correct`)}, () => {
  it("is bounded and deterministic", () => laws.wellBehaved(correct, { min: 0, max: 1, problems }))
  it("scores the right answer 1", () => laws.goldScoresMax(correct, { problems, gold: (p) => arb.answerCompletion(p.a + p.b) }))
  it("ignores whitespace", () => laws.invariant(correct, { problems, transform: transforms.padWhitespace }))
  it("resists known exploits", () =>
    Effect.runPromise(probes.assertNoExploits(correct, {
      problems: [{ a: 7, b: 8 }, { a: 0, b: 8 }],
      gold: (p) => p.a + p.b,
      prompt: (p) => \`What is \${p.a} + \${p.b}?\`,
      allow: ["padding"], // it judges the answer, not the length: maxLength gates that
    })))
})
`

/** What `init` wrote, relative to the project. */
export interface Scaffolded {
  readonly env: string
  readonly test: string
}

/** Writes envs/<name>.ts and test/<name>.test.ts under `dir`; refuses a bad name or a file that exists. */
export const scaffold = Effect.fn("gyre/init")(function* (name: string, dir: string) {
  if (!NAME.test(name)) {
    return yield* new ScaffoldError({ reason: "InvalidName", message: `gyre init ${JSON.stringify(name)}: a name starts with a letter and has only letters, digits, '-' and '_' (e.g. gyre init sums)` })
  }
  const files: Scaffolded = { env: Path.join("envs", `${name}.ts`), test: Path.join("test", `${name}.test.ts`) }
  for (const file of [files.env, files.test]) {
    if (yield* PlatformFs.exists(Path.join(dir, file))) {
      return yield* new ScaffoldError({ reason: "Exists", message: `${file} exists already: gyre init writes nothing over a file; pick another name or move it away` })
    }
  }
  const fs = yield* PlatformFs.current
  const write = (file: string, text: string) =>
    fs.makeDirectory(Path.dirname(Path.join(dir, file)), { recursive: true }).pipe(
      Effect.andThen(fs.writeFileString(Path.join(dir, file), text)),
      Effect.mapError((e) => new ScaffoldError({ reason: "WriteFailed", message: `cannot write ${file}: ${PlatformFs.messageOf(e)}` })),
    )
  yield* write(files.env, envFile(name))
  yield* write(files.test, testFile(name))
  return files
})
