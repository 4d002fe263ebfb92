/**
 * gyre's client trains against `serve`'s wiring in protobuf and in JSON, through a
 * proxy that disturbs 20 % of the requests with every kind of the official SDK's fault
 * model (`FaultProxy.ts`): no answer, 408, 429, 503, a proxy's bare 400, 402, 408 with a
 * queue state, 409 on a retried save, 410 on a poll, and 503 from the archive route.
 * Each disturbed run ends where its clean run does: the same losses, samples and
 * log-probs, every optimizer step run once, and the same weights, compared on the
 * server and in the checkpoint downloaded through the proxy.
 *
 * The SDK's handling of each status, which the client follows: `lib/api_future_impl.py`
 * (try_again and 408 with `queue_state`, 410 -> the request sent again, a 400 on
 * `retrieve_future` retried 3 times, 402 waited out), `lib/internal_client_holder.py`
 * (`_should_pause_on_billing`, a body-less 400 retried as a connection error),
 * `lib/retry_handler.py` and `_base_client.py` (408, 409, 429 and 5xx retried with the
 * same idempotency key), `resources/weights.py` (the archive route's 503 waited, its
 * 302's `Location` followed).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Checkpoints from "../../../src/backends/http/client/ClientCheckpoints.ts"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import * as PlatformHttpClient from "../../../src/platform/HttpClient.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer, type TrainerShape } from "../../../src/services/Trainer.ts"
import { BASIC_FAULTS, type Fault, faultProxy, SDK_FAULTS } from "./FaultProxy.ts"
import { rlSequence, toySequence } from "./Sequence.ts"
import { makeToy, type Toy } from "./ToyBackend.ts"

const sequence = { ...toySequence, steps: 4, groups: 6 }
// the SDK's kinds first, so the first draws owe the archive's 503 to the download at the end
const ALL_FAULTS: ReadonlyArray<Fault> = [...SDK_FAULTS, ...BASIC_FAULTS]
const root = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-wire-faults-"))

/** The toy's trainer, whose `saveState` also writes the weights to a file in `dir` (so the archive route hands it out). */
const withStateFiles = (toy: Toy, dir: string): TrainerShape => ({
  ...toy.trainer,
  saveState: (name) =>
    Effect.flatMap(toy.trainer.saveState(name), () =>
      Effect.sync(() => {
        const file = path.join(dir, `${name}.ckpt`)
        fs.writeFileSync(file, new Uint8Array(toy.weights().buffer))
        return { path: file }
      }),
    ),
})

const run = (wire: "protobuf" | "json", disturbed: boolean, seed: number) =>
  Effect.gen(function* () {
    const toy = makeToy()
    const stateDir = fs.mkdtempSync(path.join(root, `${wire}-`))
    const server = yield* Server.make({ stateDir }).pipe(Effect.provideService(Trainer, withStateFiles(toy, stateDir)), Effect.provideService(Sampler, toy.sampler))
    const proxy = disturbed ? yield* faultProxy({ upstream: server.url, rate: 0.2, seed, kinds: ALL_FAULTS }) : undefined
    const baseUrl = proxy?.url ?? server.url
    const retry = Retry.policy({ maxElapsed: "20 seconds" }, Retry.fast)
    const client = Client.layer({ baseUrl, retry, requestTimeout: "5 seconds", submitWait: "0 millis", wire })
    const { result, file } = yield* Effect.gen(function* () {
      const result = yield* rlSequence(sequence)
      const saved = yield* Effect.flatMap(Trainer, (t) => t.saveState("final"))
      const file = yield* Checkpoints.download(saved.path, { baseUrl, retry })
      return { result, file }
    }).pipe(Effect.provide(Layer.merge(client, PlatformHttpClient.layer)))
    return { result, file, toy, server, proxy }
  }).pipe(Effect.scoped)

describe("gyre's client against serve, in protobuf and in JSON, under the SDK's fault model", () => {
  for (const [wire, seed] of [["protobuf", 2], ["json", 12]] as const) {
    it.live(
      `${wire}: 20 % faults of every kind end with the clean run's weights`,
      () =>
        Effect.gen(function* () {
          const calm = yield* run(wire, false, 0)
          const rough = yield* run(wire, true, seed)
          const injected = rough.proxy!.injected
          for (const kind of ALL_FAULTS) assert.isAtLeast(injected[kind], 1, `no ${kind} was injected: ${JSON.stringify(injected)}`)
          // the wire asked for: forward_backward and forward as protobuf, or none
          if (wire === "protobuf") assert.isAtLeast(rough.proxy!.requests.protobuf, sequence.steps + 1)
          else assert.strictEqual(rough.proxy!.requests.protobuf, 0)
          // every operation ran once, whatever was retried or sent again
          assert.strictEqual(rough.toy.counters.optimSteps, sequence.steps)
          assert.strictEqual(rough.toy.counters.forwardBackward, sequence.steps)
          assert.strictEqual(rough.toy.counters.publishes, sequence.steps + 1)
          assert.strictEqual(rough.toy.counters.samples, calm.toy.counters.samples)
          assert.strictEqual(rough.server.stats.executed["SaveWeights"], 1)
          assert.isAtLeast(rough.server.stats.deduplicated, 1)
          // and the run is the clean one
          assert.deepStrictEqual(rough.result.losses, calm.result.losses)
          assert.deepStrictEqual(rough.result.samples, calm.result.samples)
          assert.deepStrictEqual(rough.result.finalLogprobs, calm.result.finalLogprobs)
          assert.deepStrictEqual(rough.result.forwardLogprobs, calm.result.forwardLogprobs)
          assert.deepStrictEqual([...rough.toy.weights()], [...calm.toy.weights()])
          assert.deepStrictEqual([...rough.file], [...calm.file])
          assert.deepStrictEqual([...rough.file], [...new Uint8Array(calm.toy.weights().buffer)])
        }),
    )
  }
})
