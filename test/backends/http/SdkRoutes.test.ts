/**
 * The routes the official Tinker SDK calls besides training and sampling, checked with
 * a plain fetch client against a real server:
 *
 * - `client/config` (`types/client_config_response.py`: the protobuf flags, one chunk
 *   at a time, the chunk size) and `client/dynamic_config` (`resources/service.py`);
 * - `telemetry` (`resources/telemetry.py`, `types/telemetry_send_request.py`): accepted,
 *   and a batch without `events` refused by name;
 * - the REST client's routes (`lib/public_interfaces/rest_client.py`): `training_runs`
 *   with `limit`/`offset` and the cursor of `types/cursor.py`, one run, a run's
 *   checkpoints, every checkpoint, `weights_info` (`types/weights_info_response.py`),
 *   also after a restart on the same state folder;
 * - LoRA parts: `train_mlp: false` trains attention only (the adapter in the archive has
 *   no MLP projections) and `weights_info` says so; both parts false is refused by name.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Scope } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Server from "../../../src/backends/http/server/Server.ts"
import * as Tar from "../../../src/backends/http/wire/Tar.ts"
import type { LoraConfig } from "../../../src/backends/local/index.ts"
import * as Serve from "../../../src/backends/local/Serve.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { call, createModel, post, result, session, train, wireDatum } from "./JsonClient.ts"
import { makeToy } from "./ToyBackend.ts"

const root = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-sdk-routes-"))
const config = { vocabSize: 99, contextLength: 32, nLayers: 1, dModel: 16, nHeads: 2, mlpRatio: 2 }
const lora: LoraConfig = { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] }

/** A `serve` on `stateDir` in its own scope, so the test can stop it and start another on the same folder. */
const serve = (stateDir: string) =>
  Effect.gen(function* () {
    const scope = yield* Scope.make()
    const ctx = yield* Layer.buildWithScope(Serve.layer({ config, lora, seed: 3, stateDir }), scope)
    return { base: Context.get(ctx, Server.Running).url, stop: Scope.close(scope, Exit.void) }
  })

/** A server on the toy backend, alive for the enclosing scope. */
const toyServer = (options: Server.Options = {}) => {
  const toy = makeToy({ vocab: 16 })
  return Effect.map(Server.make(options).pipe(Effect.provideService(Trainer, toy.trainer), Effect.provideService(Sampler, toy.sampler)), (s) => s.url)
}

const datum = wireDatum([1, 40, 41, 42, 43], { weights: [1, 1, 1, 1] })

/** One training step and a save: `save_weights` (and `save_weights_for_sampler` when `sampler` is given). */
const trainAndSave = (base: string, model: string, name: string, sampler?: string) =>
  Effect.gen(function* () {
    const fb = yield* train(base, "forward_backward", { forward_backward_input: { data: [datum], loss_fn: "cross_entropy" }, model_id: model, seq_id: 1 })
    assert.strictEqual(fb.status, 200, JSON.stringify(fb.body))
    yield* train(base, "optim_step", { adam_params: { learning_rate: 0.05 }, model_id: model, seq_id: 2 })
    const saved = yield* train(base, "save_weights", { model_id: model, path: name, seq_id: 3 })
    assert.strictEqual(saved.body.path, `tinker://${model}/weights/${name}`)
    if (sampler !== undefined) yield* train(base, "save_weights_for_sampler", { model_id: model, path: sampler, seq_id: 4 })
    return saved.body.path as string
  })

/** The `target_modules` of a checkpoint's downloaded adapter (the archive route's 302, then the tar). */
const targetModules = (base: string, tinkerPath: string) =>
  Effect.gen(function* () {
    const [, model, checkpointId] = /^tinker:\/\/([^/]+)\/(.+)$/.exec(tinkerPath)!
    const archive = yield* call(base, "GET", `training_runs/${encodeURIComponent(model!)}/checkpoints/${checkpointId}/archive`)
    assert.strictEqual(archive.status, 302, JSON.stringify(archive.body))
    const bytes = new Uint8Array(yield* Effect.promise(() => fetch(archive.headers.get("location")!).then((r) => r.arrayBuffer())))
    const files = Tar.unpack(bytes)
    if (typeof files === "string") return assert.fail(files)
    const adapterConfig = files.find((f) => f.name === "adapter_config.json")!
    return JSON.parse(new TextDecoder().decode(adapterConfig.bytes)).target_modules as Array<string>
  })

describe("the SDK's service routes", () => {
  it.live("client/config says what the server does (protobuf forward_backward, one chunk at a time, its datum limit, zstd when asked)", () =>
    Effect.gen(function* () {
      const plain = yield* post(yield* toyServer(), "client/config", { sdk_version: "0.25.0" })
      assert.strictEqual(plain.status, 200)
      assert.deepInclude(plain.body, {
        proto_write_fwdbwd: true,
        fwd_via_fwdbwd: true,
        parallel_fwdbwd_chunks: false,
        proto_compress_fwdbwd: false,
        fwdbwd_max_chunk_len: 4096,
        pjwt_auth_enabled: false,
        use_pyqwest_transport: false,
      })
      const tuned = yield* post(yield* toyServer({ maxDatums: 7, compressForwardBackward: true }), "client/config", { sdk_version: "0.25.0" })
      assert.deepInclude(tuned.body, { proto_compress_fwdbwd: true, fwdbwd_max_chunk_len: 7, parallel_fwdbwd_chunks: false })
    }).pipe(Effect.scoped))

  it.live("client/dynamic_config answers a refresh interval; telemetry is accepted, and a batch without events is refused naming them", () =>
    Effect.gen(function* () {
      const base = yield* toyServer()
      const dynamic = yield* post(base, "client/dynamic_config", { sdk_version: "0.25.0" })
      assert.strictEqual(dynamic.status, 200)
      assert.isTrue(Number.isInteger(dynamic.body.refresh_interval_sec) && dynamic.body.refresh_interval_sec > 0, JSON.stringify(dynamic.body))
      // a batch as types/telemetry_send_request.py makes it
      const batch = {
        events: [
          { event: "SESSION_START", event_id: "e1", event_session_index: 0, severity: "INFO", timestamp: new Date().toISOString() },
          { event: "GENERIC_EVENT", event_id: "e2", event_session_index: 1, severity: "INFO", timestamp: new Date().toISOString(), event_name: "x" },
        ],
        platform: "linux",
        sdk_version: "0.25.0",
        session_id: "s-1",
        process_uuid: "p-1",
      }
      const accepted = yield* post(base, "telemetry", batch)
      assert.deepStrictEqual([accepted.status, accepted.body], [200, { status: "accepted" }])
      assert.deepStrictEqual((yield* post(base, "telemetry", { ...batch, events: [] })).body, { status: "accepted" })
      for (const bad of [{ platform: "linux", session_id: "s-1" }, { ...batch, events: "none" }]) {
        const refused = yield* post(base, "telemetry", bad)
        assert.strictEqual(refused.status, 400, JSON.stringify(refused.body))
        assert.match(refused.body.detail, /events/)
      }
      assert.strictEqual((yield* call(base, "GET", "telemetry")).status, 405)
      // a name that is a member of every object is not a route
      for (const name of ["constructor", "toString", "__proto__", "hasOwnProperty"]) {
        assert.strictEqual((yield* call(base, "GET", name)).status, 404, `GET ${name}`)
        assert.strictEqual((yield* post(base, name, {})).status, 404, `POST ${name}`)
      }
    }).pipe(Effect.scoped))
})

describe("the REST client's routes and LoRA parts", () => {
  it.live(
    "training runs and checkpoints list with paging, weights_info tells the trained parts (also after a restart), train_mlp false trains attention only",
    () =>
      Effect.gen(function* () {
        const stateDir = path.join(root, "rest")
        const first = yield* serve(stateDir)
        const base = first.base
        const s = yield* session(base)
        const a = (yield* createModel(base, s, "local:random", 0)).body.model_id as string
        const created = yield* post(base, "create_model", {
          session_id: s,
          model_seq_id: 1,
          base_model: "local:random",
          lora_config: { rank: 2, train_attn: true, train_mlp: false, train_unembed: false },
          type: "create_model",
        })
        assert.strictEqual(created.status, 200, JSON.stringify(created.body))
        const b = (yield* result(base, created.body.request_id)).body.model_id as string
        const aPath = yield* trainAndSave(base, a, "a-1", "a-s1")
        const bPath = yield* trainAndSave(base, b, "b-1")

        // every run, newest activity first, then page by page
        const all = yield* call(base, "GET", "training_runs")
        assert.strictEqual(all.status, 200, JSON.stringify(all.body))
        const ids = all.body.training_runs.map((r: { training_run_id: string }) => r.training_run_id) as Array<string>
        assert.sameMembers(ids, [a, b])
        assert.deepStrictEqual(all.body.cursor, { offset: 0, limit: 20, total_count: 2 })
        const page0 = yield* call(base, "GET", "training_runs?limit=1&offset=0")
        const page1 = yield* call(base, "GET", "training_runs?limit=1&offset=1")
        assert.deepStrictEqual(page0.body.cursor, { offset: 0, limit: 1, total_count: 2 })
        assert.deepStrictEqual(page1.body.cursor, { offset: 1, limit: 1, total_count: 2 })
        assert.deepStrictEqual([...page0.body.training_runs, ...page1.body.training_runs].map((r: { training_run_id: string }) => r.training_run_id), ids)
        assert.deepStrictEqual((yield* call(base, "GET", "training_runs?offset=2")).body.training_runs, [])
        for (const q of ["limit=0", "limit=x", "offset=-1"]) assert.strictEqual((yield* call(base, "GET", `training_runs?${q}`)).status, 400, q)

        // one run (types/training_run.py)
        const run = yield* call(base, "GET", `training_runs/${encodeURIComponent(a)}`)
        assert.strictEqual(run.status, 200, JSON.stringify(run.body))
        assert.deepInclude(run.body, { training_run_id: a, base_model: "local:random", is_lora: true, corrupted: false, lora_rank: lora.rank })
        assert.isFalse(Number.isNaN(Date.parse(run.body.last_request_time)))
        assert.deepInclude(run.body.last_checkpoint, { checkpoint_id: "weights/a-1", checkpoint_type: "training", tinker_path: aPath })
        assert.deepInclude(run.body.last_sampler_checkpoint, { checkpoint_id: "sampler_weights/a-s1", checkpoint_type: "sampler" })
        assert.strictEqual((yield* call(base, "GET", `training_runs/${encodeURIComponent(b)}`)).body.lora_rank, 2)
        const unknown = yield* call(base, "GET", "training_runs/nobody")
        assert.strictEqual(unknown.status, 404)
        assert.match(unknown.body.detail, /training run "nobody" is unknown/)

        // a run's checkpoints, oldest first; every checkpoint, newest first
        const listed = yield* call(base, "GET", `training_runs/${encodeURIComponent(a)}/checkpoints`)
        assert.deepStrictEqual(listed.body.checkpoints.map((c: { checkpoint_id: string }) => c.checkpoint_id), ["weights/a-1", "sampler_weights/a-s1"])
        assert.isAbove(listed.body.checkpoints[0].size_bytes, 0)
        const everything = yield* call(base, "GET", "checkpoints")
        assert.deepStrictEqual(everything.body.checkpoints.map((c: { tinker_path: string }) => c.tinker_path), [bPath, `tinker://${a}/sampler_weights/a-s1`, aPath])
        assert.deepStrictEqual(everything.body.cursor, { offset: 0, limit: 100, total_count: 3 })
        const tail = yield* call(base, "GET", "checkpoints?limit=2&offset=1")
        assert.deepStrictEqual(tail.body.checkpoints, everything.body.checkpoints.slice(1))

        // weights_info (what create_training_client_from_state asks), and the adapter each part setting made
        const info = (p: string) => post(base, "weights_info", { tinker_path: p })
        assert.deepStrictEqual((yield* info(bPath)).body, { base_model: "local:random", is_lora: true, lora_rank: 2, train_unembed: false, train_mlp: false, train_attn: true })
        assert.deepInclude((yield* info(aPath)).body, { lora_rank: lora.rank, train_mlp: true, train_attn: true })
        const missing = yield* info(`tinker://${a}/weights/nope`)
        assert.strictEqual(missing.status, 404)
        assert.match(missing.body.detail, /is not a checkpoint saved by this server/)
        assert.strictEqual((yield* post(base, "weights_info", {})).status, 400)
        assert.deepStrictEqual(yield* targetModules(base, bPath), ["q_proj", "k_proj", "v_proj", "o_proj"])
        assert.deepStrictEqual(yield* targetModules(base, aPath), ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"])
        yield* first.stop

        // a restarted server answers the same from its checkpoint index
        const second = yield* serve(stateDir)
        assert.deepStrictEqual((yield* post(second.base, "weights_info", { tinker_path: bPath })).body.train_mlp, false)
        assert.deepStrictEqual((yield* call(second.base, "GET", `training_runs/${encodeURIComponent(a)}/checkpoints`)).body, listed.body)
        assert.sameMembers((yield* call(second.base, "GET", "training_runs")).body.training_runs.map((r: { training_run_id: string }) => r.training_run_id), [a, b])
        yield* second.stop
      }).pipe(Effect.scoped),
  )

  it.live("create_model with train_attn and train_mlp both false is refused naming both", () =>
    Effect.gen(function* () {
      const server = yield* serve(path.join(root, "parts"))
      const s = yield* session(server.base)
      const refused = yield* post(server.base, "create_model", {
        session_id: s,
        model_seq_id: 0,
        base_model: "local:random",
        lora_config: { rank: 4, train_attn: false, train_mlp: false, train_unembed: true },
        type: "create_model",
      })
      assert.strictEqual(refused.status, 400, JSON.stringify(refused.body))
      assert.match(refused.body.detail, /lora_config\.train_attn and lora_config\.train_mlp are both false/)
      // the session stays usable: the same seq id creates a model that trains something
      const ok = yield* createModel(server.base, s, "local:random", 0, 4)
      assert.strictEqual(ok.status, 200, JSON.stringify(ok.body))
      yield* server.stop
    }).pipe(Effect.scoped))
})
