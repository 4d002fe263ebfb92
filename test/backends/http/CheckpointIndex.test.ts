/**
 * A restarted server loses no checkpoint: `serve`'s wiring on a state folder saves
 * checkpoints, stops, and a new server on the same folder loads them (with and without
 * the optimizer state), hands them out through the archive route, lists them in its
 * index and samples from a sampler path of the earlier run (from the training checkpoint
 * of the same weights; one no training checkpoint backs gets 404 saying so); a line torn
 * by a crash mid-append is dropped without losing the rows after it; a backend's path
 * with a URI scheme (a test double's `mem://…`) is kept as the backend returned it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Scope } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as CheckpointIndex from "../../../src/backends/http/server/CheckpointIndex.ts"
import { stateOfArchive } from "../../../src/backends/http/client/ClientCheckpoints.ts"
import * as Tar from "../../../src/backends/http/wire/Tar.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import * as Serve from "../../../src/backends/local/Serve.ts"
import { tinyConfig, tinyLora } from "../local/helpers.ts"
import { call, createModel, post, result, session, train, wireDatum } from "./JsonClient.ts"

const root = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-index-"))

/** A `serve` on `stateDir` in its own scope, so the test can stop it as a crash would end it. */
const serve = (stateDir: string) =>
  Effect.gen(function* () {
    const scope = yield* Scope.make()
    const ctx = yield* Layer.buildWithScope(Serve.layer({ config: tinyConfig, lora: tinyLora, seed: 5, stateDir, sampleGather: 0 }), scope)
    return { base: Context.get(ctx, Server.Running).url, stop: Scope.close(scope, Exit.void) }
  })

const full = [1, 40, 41, 42, 43, 44]
const datum = wireDatum(full, { logprobs: [-4, -4, -4, -4, -4], advantages: [0, 1, 1, 1, 1] })

/** A fresh model on `base`: its id. */
const model = (base: string) => Effect.map(Effect.flatMap(session(base), (s) => createModel(base, s, "local:random")), (a) => a.body.model_id as string)

/** The learner log-probs of `datum` (a forward, no gradient). */
const logprobs = (base: string, id: string, seq: number) =>
  Effect.map(train(base, "forward", { forward_input: { data: [datum], loss_fn: "importance_sampling" }, model_id: id, seq_id: seq }), (a) => a.body.loss_fn_outputs[0].logprobs.data as Array<number>)

const sampleBody = { prompt: { chunks: [{ type: "encoded_text", tokens: [1, 40, 41] }] }, sampling_params: { max_tokens: 6, temperature: 1, seed: 7 }, num_samples: 3, type: "sample" }

/** Samples from a sampler path (seeded): the result's body. */
const sample = (base: string, modelPath: string) =>
  Effect.gen(function* () {
    const submitted = yield* post(base, "asample", { ...sampleBody, model_path: modelPath })
    assert.strictEqual(submitted.status, 200, JSON.stringify(submitted.body))
    return (yield* result(base, submitted.body.request_id)).body
  })

describe("the checkpoint index", () => {
  it.live("a restarted server loads, hands out and lists the checkpoints of its earlier run", () =>
    Effect.gen(function* () {
      const stateDir = path.join(root, "restart")
      const first = yield* serve(stateDir)
      const a = yield* model(first.base)
      let seq = 1
      for (const step of [1, 2]) {
        yield* train(first.base, "forward_backward", { forward_backward_input: { data: [datum], loss_fn: "importance_sampling" }, model_id: a, seq_id: seq++ })
        yield* train(first.base, "optim_step", { adam_params: { learning_rate: 0.05 }, model_id: a, seq_id: seq++ })
        const saved = yield* train(first.base, "save_weights", { model_id: a, path: `step-${step}`, seq_id: seq++ })
        assert.strictEqual(saved.body.path, `tinker://${a}/weights/step-${step}`)
      }
      const sampler = yield* train(first.base, "save_weights_for_sampler", { model_id: a, path: "s-2", seq_id: seq++ })
      assert.strictEqual(sampler.body.path, `tinker://${a}/sampler_weights/s-2`)
      const trained = yield* logprobs(first.base, a, seq++)
      const sampledBefore = yield* sample(first.base, sampler.body.path)
      // a sampler checkpoint whose weights no training checkpoint holds (one more step, no save_state)
      yield* train(first.base, "forward_backward", { forward_backward_input: { data: [datum], loss_fn: "importance_sampling" }, model_id: a, seq_id: seq++ })
      yield* train(first.base, "optim_step", { adam_params: { learning_rate: 0.05 }, model_id: a, seq_id: seq++ })
      const unbacked = yield* train(first.base, "save_weights_for_sampler", { model_id: a, path: "s-3", seq_id: seq++ })
      yield* first.stop

      const second = yield* serve(stateDir)
      const b = yield* model(second.base)
      assert.notStrictEqual(b, a)
      const fresh = yield* logprobs(second.base, b, 1)
      assert.notDeepEqual(fresh, trained)
      const loaded = yield* train(second.base, "load_weights", { model_id: b, path: `tinker://${a}/weights/step-2`, optimizer: true, seq_id: 2 })
      assert.isUndefined(loaded.body.error, JSON.stringify(loaded.body))
      assert.deepStrictEqual(yield* logprobs(second.base, b, 3), trained)
      // weights only, from the older checkpoint
      const older = yield* train(second.base, "load_weights", { model_id: b, path: `tinker://${a}/weights/step-1`, seq_id: 4 })
      assert.isUndefined(older.body.error, JSON.stringify(older.body))
      assert.notDeepEqual(yield* logprobs(second.base, b, 5), trained)

      // the archive route of the earlier run's checkpoint
      const archive = yield* call(second.base, "GET", `training_runs/${encodeURIComponent(a)}/checkpoints/weights/step-2/archive`)
      assert.strictEqual(archive.status, 302, JSON.stringify(archive.body))
      const tar = new Uint8Array(yield* Effect.promise(() => fetch(archive.headers.get("location")!).then((r) => r.arrayBuffer())))
      assert.isArray(Tar.unpack(tar), "the download is a tar")
      const file = stateOfArchive(tar)
      const index = yield* CheckpointIndex.open(stateDir, Effect.succeed(0))
      const entry = index.get(`tinker://${a}/weights/step-2`)!
      assert.deepStrictEqual(Buffer.from(file), fs.readFileSync(path.join(stateDir, entry.file!)))
      assert.deepStrictEqual(
        index.list(a).map((e) => [e.kind, e.name, e.policy_version, e.lora_rank, e.base_model]),
        [["weights", "step-1", 1, tinyLora.rank, "local:random"], ["weights", "step-2", 2, tinyLora.rank, "local:random"], ["sampler_weights", "s-2", 2, tinyLora.rank, "local:random"], ["sampler_weights", "s-3", 3, tinyLora.rank, "local:random"]],
      )
      assert.strictEqual(entry.size_bytes, file.byteLength)

      // the sampler path is served again, from the training checkpoint of the same weights
      const sampledAfter = yield* sample(second.base, sampler.body.path)
      assert.deepStrictEqual(sampledAfter.sequences, sampledBefore.sequences)
      assert.strictEqual(sampledAfter.policy_version, 2)
      const viaSession = yield* post(second.base, "create_sampling_session", { session_id: yield* session(second.base), sampling_session_seq_id: 0, model_path: sampler.body.path })
      assert.strictEqual(viaSession.status, 200, JSON.stringify(viaSession.body))
      const missing = yield* post(second.base, "asample", { ...sampleBody, model_path: unbacked.body.path })
      assert.strictEqual(missing.status, 404)
      assert.match(missing.body.detail, /earlier run of this server.*no training checkpoint of the same weights/)
      yield* second.stop
    }).pipe(Effect.scoped))

  it.effect("a backend's path with a URI scheme is kept as it is, with or without a state folder; a file path is kept relative to the state folder", () =>
    Effect.gen(function* () {
      const row = (name: string, file: string) => ({ tinker_path: `tinker://m/weights/${name}`, kind: "weights" as const, model_id: "m", name, base_model: "b", lora_rank: 4, file })
      for (const stateDir of [undefined, path.join(root, "uris")]) {
        const index = yield* CheckpointIndex.open(stateDir, Effect.succeed(0))
        const entry = yield* index.record(row("mem", "mem://state/ck-1"))
        assert.strictEqual(entry.file, "mem://state/ck-1")
        assert.isUndefined(entry.size_bytes)
        assert.strictEqual(index.files.get("tinker://m/weights/mem"), "mem://state/ck-1")
        const file = path.join(stateDir ?? root, "ck-2.ckpt")
        const saved = yield* index.record(row("file", file))
        assert.strictEqual(saved.file, stateDir === undefined ? file : "ck-2.ckpt")
        assert.strictEqual(index.files.get("tinker://m/weights/file"), file)
      }
      const reopened = yield* CheckpointIndex.open(path.join(root, "uris"), Effect.succeed(0))
      assert.strictEqual(reopened.files.get("tinker://m/weights/mem"), "mem://state/ck-1")
    }))

  it.effect("a line torn by a crash is dropped before the next append, and the rows around it stay", () =>
    Effect.gen(function* () {
      const stateDir = path.join(root, "torn")
      const first = yield* CheckpointIndex.open(stateDir, Effect.succeed(0))
      const row = (name: string) => ({ tinker_path: `tinker://m/weights/${name}`, kind: "weights" as const, model_id: "m", name, base_model: "b", lora_rank: 4 })
      yield* first.record(row("one"))
      fs.appendFileSync(path.join(stateDir, CheckpointIndex.FILE), '{"tinker_path":"tinker://m/wei')
      const second = yield* CheckpointIndex.open(stateDir, Effect.succeed(0))
      yield* second.record(row("two"))
      const third = yield* CheckpointIndex.open(stateDir, Effect.succeed(0))
      assert.deepStrictEqual(third.list().map((e) => e.name), ["one", "two"])
      assert.isUndefined(third.files.get("tinker://m/weights/one"))
      // a name saved again: the later row wins
      yield* third.record({ ...row("one"), lora_rank: 8 })
      const fourth = yield* CheckpointIndex.open(stateDir, Effect.succeed(0))
      assert.deepStrictEqual(fourth.list().map((e) => [e.name, e.lora_rank]), [["two", 4], ["one", 8]])
    }))
})
