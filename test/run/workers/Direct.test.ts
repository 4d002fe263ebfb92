/**
 * On a Tinker-protocol service, episode workers sample it themselves (the sampler weights
 * the run published last, by their path) and the run is the one a single core gives: the
 * same rollouts, metrics and datums sent to the trainer. The main thread's sampler then
 * draws nothing, for the agent env too (its agents call their worker's own endpoint).
 * Against the instant service of the client bench, in this process.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, References } from "effect"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import * as RunLog from "../../../src/folder/RunLog.ts"
import * as Runner from "../../../src/Runner.ts"
import * as Pool from "../../../src/run/workers/Pool.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Tokenizer } from "../../../src/services/Tokenizer.ts"
import * as Tokenizers from "../../../src/tokenizers/index.ts"
import { envs, QWEN3_DIR, scriptFor } from "../../backends/http/ClientWorkloads.ts"
import { makeInstant } from "../../backends/http/InstantService.ts"

const MODULE = Path.resolve(import.meta.dirname, "../../backends/http/ClientWorkloads.ts")

/** Test double: the client's sampler, counting the samples it is asked for. */
const counting = (count: { samples: number }) =>
  Layer.effect(Sampler, Effect.map(Effect.service(Sampler), (inner) => Sampler.of({ ...inner, sample: (...args) => Effect.andThen(Effect.sync(() => count.samples++), inner.sample(...args)) })))

const runOn = (cores: number, workload: "single" | "tools" | "agent") =>
  Effect.gen(function* () {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), `gyre-direct-${cores}-`))
    const instant = makeInstant({ script: scriptFor(workload, yield* Tokenizer) })
    const server = yield* instant.provide(Server.make({}))
    const count = { samples: 0 }
    const client = Layer.provideMerge(counting(count), Client.layer({ baseUrl: server.url, retry: Retry.fast }))
    const workers = Pool.layer({ cores, env: { module: MODULE, exportName: `envs.${workload}` }, tokenizer: { kind: "files", dir: QWEN3_DIR }, direct: { baseUrl: String(server.url) } })
    const settings = Runner.defaults(envs[workload].name, { outDir: dir, steps: 3, groups: 4, groupSize: 4, evalEvery: 0, saveEvery: 0, logRolloutsEvery: 1, seed: 7, sampling: { maxTokens: 600, temperature: 1 } })
    const rows = yield* Runner.run(settings, envs[workload]).pipe(Effect.provide(Layer.provideMerge(workers, client)))
    return {
      samples: count.samples,
      datums: JSON.stringify(instant.recorded),
      rollouts: Fs.readFileSync(RunLog.paths(dir).rollouts, "utf8"),
      metrics: rows.map((r) => Object.fromEntries(Object.entries(r).filter(([k]) => !k.startsWith("time/") && !k.startsWith("throughput/")))),
    }
  }).pipe(Effect.scoped)

describe("episode workers on a Tinker-protocol service", () => {
  for (const workload of ["single", "tools", "agent"] as const) {
    it.live(`sample it themselves and give the run one core gives (${workload})`, () =>
      Effect.gen(function* () {
        const one = yield* runOn(1, workload)
        const two = yield* runOn(2, workload)
        assert.isAbove(one.samples, 0)
        assert.strictEqual(two.samples, 0, "the main thread's sampler drew nothing")
        assert.strictEqual(two.rollouts, one.rollouts)
        assert.deepStrictEqual(two.metrics, one.metrics)
        assert.strictEqual(two.datums, one.datums)
      }).pipe(Effect.provide(Tokenizers.layer(QWEN3_DIR)), Effect.provideService(References.MinimumLogLevel, "Warn")))
  }
})
