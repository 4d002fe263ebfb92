/**
 * `--otlp` with `--cores 2` on a Tinker-protocol service: the episode workers sample the
 * service themselves and send the spans of that sampling (`Http.sample`) to the collector
 * on their own, each under the main thread's `Collect.collect` span of its step and with
 * its step and phase, sent before the run ends. Against the client bench's instant service in this process and the
 * OTLP receiver test double.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, References } from "effect"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import * as OtlpExport from "../../../src/observe/OtlpExport.ts"
import * as Runner from "../../../src/Runner.ts"
import * as Pool from "../../../src/run/workers/Pool.ts"
import { Tokenizer } from "../../../src/services/Tokenizer.ts"
import * as Tokenizers from "../../../src/tokenizers/index.ts"
import { envs, QWEN3_DIR, scriptFor } from "../../backends/http/ClientWorkloads.ts"
import { makeInstant } from "../../backends/http/InstantService.ts"
import { receiver, type ReceivedSpan, spansOf } from "../../observe/OtlpReceiver.ts"

const MODULE = Path.resolve(import.meta.dirname, "../../backends/http/ClientWorkloads.ts")

describe("--otlp with episode workers", () => {
  it.live("the workers' own spans reach the collector, under the step's Collect.collect span", () =>
    Effect.gen(function* () {
      const { url, got } = yield* receiver()
      yield* Effect.gen(function* () {
        const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-otlp-cores-"))
        const instant = makeInstant({ script: scriptFor("single", yield* Tokenizer) })
        const server = yield* instant.provide(Server.make({}))
        const client = Client.layer({ baseUrl: server.url, retry: Retry.fast })
        const workers = Pool.layer({ cores: 2, env: { module: MODULE, exportName: "envs.single" }, tokenizer: { kind: "files", dir: QWEN3_DIR }, direct: { baseUrl: String(server.url) }, otlp: url })
        const settings = Runner.defaults(envs.single.name, { outDir: dir, steps: 2, groups: 4, groupSize: 4, evalEvery: 0, saveEvery: 0, seed: 7, sampling: { maxTokens: 600, temperature: 1 } })
        yield* Runner.run(settings, envs.single).pipe(Effect.provide(Layer.provideMerge(workers, client)))
      }).pipe(Effect.scoped, Effect.provide(OtlpExport.layer(url)))
      const spans = spansOf(got)
      const byId = new Map(spans.map((s) => [s.spanId, s]))
      const samples = spans.filter((s) => s.name === "Http.sample")
      // the main thread's sampler drew nothing (the workers sampled), so these are the workers'
      assert.strictEqual(samples.length, 2 * 4, spans.map((s) => s.name).join(", "))
      const collects = new Set(spans.filter((s) => s.name === "Collect.collect").map((s) => s.spanId))
      assert.strictEqual(collects.size, 2)
      const ancestorIn = (span: ReceivedSpan): boolean => {
        for (let p = span.parentSpanId; p !== undefined; p = byId.get(p)?.parentSpanId) if (collects.has(p)) return true
        return false
      }
      for (const s of samples) {
        assert.isTrue(ancestorIn(s), `Http.sample ${s.spanId} is not under a Collect.collect span`)
        // the run's attributes of the span above it: the step it samples for, and its phase
        assert.include([1, 2], Number(s.attributes["gyre.step"]), JSON.stringify(s.attributes))
        assert.strictEqual(s.attributes["gyre.phase"], "sample")
      }
    }).pipe(Effect.provide(Tokenizers.layer(QWEN3_DIR)), Effect.provideService(References.MinimumLogLevel, "Warn"), Effect.scoped))
})
