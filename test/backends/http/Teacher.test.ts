/**
 * A distillation teacher on a Tinker-protocol service (`--backend <url> --teacher <path>`):
 * the service scores the student's tokens on a sampling session of the sampler path the
 * teacher names (`compute_logprobs`), against `serve`'s wiring on loopback. The teacher's
 * log-probs are those of its own weights, not the student's; a run records the teacher as
 * served and folds its KL into the advantages; a path the server does not hold stops the
 * run before its first step, naming it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import * as Serve from "../../../src/backends/local/Serve.ts"
import * as Teacher from "../../../src/app/Teacher.ts"
import { train } from "../../../src/app/Training.ts"
import { adamParams, modelInputFromTokens } from "../../../src/contract/Contract.ts"
import { Reference } from "../../../src/services/Reference.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { rlDatum, tinyConfig, tinyLora } from "../local/helpers.ts"
import { Rng } from "../../../src/backends/local/Rng.ts"

const tmp = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-http-teacher-"))
const config = { ...tinyConfig, contextLength: 48 }
const probe = modelInputFromTokens([1, 40, 41, 42, 50, 51])

/** A served model trained away from the base and published: the teacher's sampler path. */
const trainTeacher = (url: string) =>
  Effect.gen(function* () {
    const trainer = yield* Trainer
    const sampler = yield* Sampler
    const rng = new Rng(7)
    for (let i = 0; i < 3; i++) {
      yield* trainer.forwardBackward(Array.from({ length: 4 }, () => rlDatum(rng, 3, 6)), "importance_sampling")
      yield* trainer.optimStep(adamParams({ learningRate: 5e-2 }))
    }
    const saved = yield* trainer.saveWeightsForSampler("teacher")
    return { path: saved.path!, own: yield* sampler.computeLogprobs(probe, { minPolicyVersion: saved.version }) }
  }).pipe(Effect.provide(Client.layer({ baseUrl: url, retry: Retry.fast })))

describe("--teacher on a Tinker-protocol service", () => {
  it.live("scores with the sampler path it names; a run records it as served, distills, and a path the server lacks stops the run first", () =>
    Effect.gen(function* () {
      const ctx = yield* Layer.build(Serve.layer({ config, lora: tinyLora, seed: 3, stateDir: tmp() }))
      const url = Context.get(ctx, Server.Running).url
      const teacher = yield* trainTeacher(url)
      assert.match(teacher.path, /^tinker:\/\/.+\/sampler_weights\/teacher$/)

      // the client's Reference, pointed at the path: the teacher's log-probs, not a fresh model's
      const scored = yield* Effect.gen(function* () {
        const reference = yield* Reference
        yield* reference.check
        const [lp] = yield* reference.logprobs([probe])
        const own = yield* (yield* Sampler).computeLogprobs(probe)
        return { lp: lp!, own }
      }).pipe(Effect.provide(Client.layer({ baseUrl: url, retry: Retry.fast, reference: { modelPath: teacher.path } })))
      scored.lp.forEach((x, i) => assert.isBelow(Math.abs(x - teacher.own[i]!), 1e-5))
      assert.isAbove(Math.max(...scored.lp.map((x, i) => Math.abs(x - scored.own[i]!))), 1e-3, "not the student's own")

      const out = tmp()
      const run = yield* train({ env: "calculator", backend: url, steps: 2, groups: 2, groupSize: 4, evalEvery: 0, saveEvery: 0, teacher: teacher.path, teacherCoef: 2, out, name: "student" })
      const recorded = JSON.parse(Fs.readFileSync(Path.join(run.outDir, "config.json"), "utf8")).teacher
      assert.deepStrictEqual(recorded, { given: teacher.path, model: teacher.path, served: true, coef: 2, centred: true })
      for (const row of run.metrics) {
        assert.isAbove(row["kl/policy_ref_tokens"]!, 0)
        assert.isAbove(Math.abs(row["kl/policy_ref_v1"]!), 1e-4)
      }

      // a model on this machine is still started here; any other name is the service's
      assert.isUndefined((yield* Teacher.resolve("calculator", 1, "--teacher", url)).served)
      assert.deepStrictEqual(yield* Teacher.resolve("local:random", 1, "--teacher", url), { given: "local:random", model: "local:random", served: true, coef: 1 })

      const missing = teacher.path.replace(/teacher$/, "no-such-sampler")
      const e = yield* Effect.flip(train({ env: "calculator", backend: url, steps: 1, groups: 2, groupSize: 2, evalEvery: 0, saveEvery: 0, teacher: missing, out, name: "bad" }))
      assert.include(e.message, "--teacher needs the teacher's log-probs")
      assert.include(e.message, `model_path ${JSON.stringify(missing)}`)
      assert.isFalse(Fs.existsSync(Path.join(out, "bad", "metrics.jsonl")) && Fs.readFileSync(Path.join(out, "bad", "metrics.jsonl"), "utf8").trim() !== "", "no step ran")
    }).pipe(Effect.scoped))
})
