/**
 * Checkpoint downloads over HTTP: a model trained through `serve`'s wiring on loopback
 * (gyre's client: forward_backward, optim_step, save_weights, save_weights_for_sampler),
 * then `export` of the run from that server, compared with the server's own state file;
 * the archive route's 302 and the tar behind it (the PEFT adapter, `checkpoint_complete`
 * and the state file, as the SDK's `cli/commands/checkpoint.py` unpacks it); a sampler
 * checkpoint downloads through the training checkpoint of the same weights; and the
 * archive route's refusals (unknown checkpoint, a sampler checkpoint no training
 * checkpoint backs, a name that is a path, a file outside the state folder, a missing API
 * key, an unknown download URL), checked with a plain fetch client.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer, Redacted, Result } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Checkpoints from "../../../src/backends/http/client/ClientCheckpoints.ts"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import * as Tar from "../../../src/backends/http/wire/Tar.ts"
import * as Checkpoint from "../../../src/backends/local/Checkpoint.ts"
import * as Peft from "../../../src/backends/local/Peft.ts"
import { Rng } from "../../../src/backends/local/Rng.ts"
import * as Serve from "../../../src/backends/local/Serve.ts"
import { adamParams } from "../../../src/contract/Contract.ts"
import * as Export from "../../../src/app/Export.ts"
import * as PlatformHttpClient from "../../../src/platform/HttpClient.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { rlDatum, tinyConfig, tinyLora } from "../local/helpers.ts"
import { call } from "./JsonClient.ts"
import { makeToy } from "./ToyBackend.ts"

const root = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-archive-"))

/** every file under `dir` named `name` */
const find = (dir: string, name: string): Array<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? find(path.join(dir, e.name), name) : e.name === name ? [path.join(dir, e.name)] : []))

describe("checkpoint archive", () => {
  it.live(
    "a run trained over HTTP exports from the server: the adapter equals the server's state file, transposed",
    () =>
      Effect.gen(function* () {
        const stateDir = path.join(root, "serve-state")
        const server = Context.get(yield* Layer.build(Serve.layer({ config: tinyConfig, lora: tinyLora, seed: 5, stateDir })), Server.Running)
        const trainer = Context.get(yield* Layer.build(Client.layer({ baseUrl: server.url, retry: Retry.fast })), Trainer)
        const rng = new Rng(3)
        const rows: Array<string> = []
        for (const step of [1, 2]) {
          yield* trainer.forwardBackward(Array.from({ length: 4 }, () => rlDatum(rng, 3, 6)), "importance_sampling")
          yield* trainer.optimStep(adamParams({ learningRate: 1e-2 }))
          const saved = yield* trainer.saveState(`step-${step}`)
          assert.match(saved.path, /^tinker:\/\/.+\/weights\/step-\d$/)
          rows.push(JSON.stringify({ step, name: `step-${step}`, path: saved.path }))
        }
        // a sampler checkpoint of the weights step-2 holds, and one of weights no training checkpoint holds
        const backed = yield* trainer.saveWeightsForSampler("s-2")
        yield* trainer.forwardBackward(Array.from({ length: 4 }, () => rlDatum(rng, 3, 6)), "importance_sampling")
        yield* trainer.optimStep(adamParams({ learningRate: 1e-2 }))
        const unbacked = yield* trainer.saveWeightsForSampler("s-3")
        const dir = path.join(root, "http-run")
        fs.mkdirSync(dir, { recursive: true })
        fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify({ name: "http-run" }))
        fs.writeFileSync(path.join(dir, "checkpoints.jsonl"), rows.join("\n") + "\n")

        // the downloaded state is the server's file, for the training checkpoint and for the sampler checkpoint of the same weights
        const [file] = find(stateDir, "step-2.ckpt")
        assert.isDefined(file)
        const download = (p: string) => Checkpoints.download(p, { baseUrl: server.url, retry: Retry.fast }).pipe(Effect.provide(PlatformHttpClient.layer))
        assert.deepStrictEqual(Buffer.from(yield* download(JSON.parse(rows[1]!).path)), fs.readFileSync(file!))
        assert.match(backed.path, /^tinker:\/\/.+\/sampler_weights\/s-2$/)
        assert.deepStrictEqual(Buffer.from(yield* download(backed.path)), fs.readFileSync(file!))
        const notBacked = yield* Effect.flip(download(unbacked.path))
        assert.match(notBacked.message, /HTTP 404: .*sampler weights are kept as files only where a training checkpoint holds the same weights/)

        const out = path.join(root, "http-out")
        const result = yield* Export.exportRun(dir, { out, backend: server.url })
        assert.strictEqual(result.step, 2)
        assert.strictEqual(result.checkpoint, JSON.parse(rows[1]!).path)
        const state = yield* Effect.promise(() => Checkpoint.read(file!))
        // the safetensors file, read at the offsets of its header
        const raw = fs.readFileSync(path.join(out, "adapter_model.safetensors"))
        const headerLength = Number(raw.readBigUInt64LE(0))
        const header = JSON.parse(raw.subarray(8, 8 + headerLength).toString("utf8")) as Record<string, { shape: [number, number]; data_offsets: [number, number] }>
        let compared = 0
        for (let layer = 0; layer < tinyConfig.nLayers; layer++) {
          for (const t of tinyLora.targets) {
            for (const m of ["A", "B"] as const) {
              const [rows_, cols] = state.shapes[`param/l${layer}.${t}.${m}`] as [number, number]
              const saved = state.tensors[`param/l${layer}.${t}.${m}`]!
              const entry = header[`base_model.model.${Export.modulePath(layer, t)}.lora_${m}.weight`]!
              assert.deepStrictEqual(entry.shape, [cols, rows_])
              const at = 8 + headerLength + entry.data_offsets[0]
              for (let i = 0; i < rows_; i++) for (let j = 0; j < cols; j++) assert.strictEqual(raw.readFloatLE(at + 4 * (j * rows_ + i)), saved[i * cols + j])
              compared++
            }
          }
        }
        assert.strictEqual(compared, 2 * tinyConfig.nLayers * tinyLora.targets.length)
        assert.isTrue(state.tensors["param/l0.q.B"]!.some((v) => v !== 0), "B must have trained")

        // refusals, with a plain fetch client
        const model = /^tinker:\/\/([^/]+)\//.exec(JSON.parse(rows[1]!).path)![1]!
        const archive = (checkpointId: string) => call(server.url, "GET", `training_runs/${encodeURIComponent(model)}/checkpoints/${checkpointId}/archive`)
        const unknown = yield* archive("weights/step-9")
        assert.strictEqual(unknown.status, 404)
        assert.match(unknown.body.detail, /no checkpoint tinker:\/\/.+\/weights\/step-9 on this server/)
        const sampler = yield* archive("sampler_weights/s1")
        assert.strictEqual(sampler.status, 404)
        assert.match(sampler.body.detail, /no checkpoint tinker:\/\/.+\/sampler_weights\/s1 on this server/)
        const dots = yield* archive("weights/..%2F..%2Fetc%2Fpasswd")
        assert.strictEqual(dots.status, 400)
        assert.match(dots.body.detail, /not weights\/<name>|not a valid name/)
        // a 302 to the download URL, with when it expires as an HTTP date (what resources/weights.py reads), and the same as JSON
        const good = yield* archive("weights%2Fstep-1")
        assert.strictEqual(good.status, 302, JSON.stringify(good.body))
        assert.strictEqual(good.headers.get("location"), good.body.url)
        const expires = good.headers.get("expires")!
        assert.match(expires, /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/)
        assert.strictEqual(Date.parse(expires), Math.floor(Date.parse(good.body.expires) / 1000) * 1000)
        assert.isTrue(Date.parse(good.body.expires) > Date.now())
        assert.strictEqual(new URL(good.body.url).origin, server.url)
        // the download is the tar the SDK's `tinker checkpoint download` unpacks (cli/commands/checkpoint.py): the PEFT adapter, checkpoint_complete and the state file
        const latest = yield* archive("weights/step-2")
        assert.strictEqual(latest.status, 302, JSON.stringify(latest.body))
        const tarRes = yield* Effect.promise(() => fetch(latest.headers.get("location")!))
        assert.strictEqual(tarRes.headers.get("content-type"), "application/x-tar")
        const files = Tar.unpack(new Uint8Array(yield* Effect.promise(() => tarRes.arrayBuffer())))
        if (typeof files === "string") return assert.fail(files)
        assert.deepStrictEqual(files.map((f) => f.name).sort(), ["adapter_config.json", "adapter_model.safetensors", "checkpoint_complete", Peft.STATE_IN_ARCHIVE])
        const inTar = (name: string) => Buffer.from(files.find((f) => f.name === name)!.bytes)
        assert.deepStrictEqual(inTar(Peft.STATE_IN_ARCHIVE), fs.readFileSync(file!))
        assert.strictEqual(inTar("checkpoint_complete").length, 0)
        // the same adapter as the export's, named after the model the server serves
        const { base_model_name_or_path: served, ...config } = JSON.parse(inTar("adapter_config.json").toString("utf8"))
        const { base_model_name_or_path: _, ...exported } = JSON.parse(fs.readFileSync(path.join(out, "adapter_config.json"), "utf8"))
        assert.strictEqual(served, "local:random")
        assert.deepStrictEqual(config, exported)
        const tensors = (bytes: Buffer) => {
          const n = Number(bytes.readBigUInt64LE(0))
          const { __metadata__: _, ...entries } = JSON.parse(bytes.subarray(8, 8 + n).toString("utf8"))
          return { entries, data: bytes.subarray(8 + n) }
        }
        assert.deepStrictEqual(tensors(inTar("adapter_model.safetensors")), tensors(raw))
        const fake = yield* Effect.promise(() => fetch(good.body.url.replace(/[0-9a-f]{8}$/, "00000000")))
        assert.strictEqual(fake.status, 404)
        const missing = yield* Export.exportRun(dir, { out: path.join(root, "x"), step: 2, backend: `${server.url}/nowhere` }).pipe(Effect.flip)
        assert.strictEqual(missing.reason, "Remote")
        assert.match(missing.message, /step 2 .* could not be downloaded from .*nowhere \(--backend\): HTTP 404/)
      }).pipe(Effect.scoped),
  )

  it.live("a checkpoint file outside the state folder is refused (a path, or a link out of it); the archive route needs the API key, the download URL not", () =>
    Effect.gen(function* () {
      const stateDir = path.join(root, "toy-state")
      const outside = path.join(root, "outside")
      fs.mkdirSync(stateDir, { recursive: true })
      fs.mkdirSync(outside, { recursive: true })
      const toy = makeToy({ vocab: 16 })
      // test double: a trainer whose saveState writes where its name says (inside, outside, or a link from inside to outside)
      const trainer = {
        ...toy.trainer,
        saveState: (name: string) =>
          Effect.sync(() => {
            const target = path.join(name.startsWith("out") ? outside : stateDir, `${name}.ckpt`)
            fs.writeFileSync(target, "state")
            if (!name.startsWith("link")) return { path: target }
            const link = path.join(stateDir, `${name}-link.ckpt`)
            fs.rmSync(link, { force: true })
            fs.renameSync(target, path.join(outside, `${name}.ckpt`))
            fs.symlinkSync(path.join(outside, `${name}.ckpt`), link)
            return { path: link }
          }),
      }
      const key = "archive-test-key"
      const server = yield* Server.make({ stateDir, apiKey: Redacted.make(key) }).pipe(Effect.provideService(Trainer, trainer), Effect.provideService(Sampler, toy.sampler))
      const auth = { "x-api-key": key }
      const post = (p: string, body: unknown) => call(server.url, "POST", p, body, auth)
      const s = (yield* post("create_session", { tags: [], type: "create_session" })).body.session_id as string
      const created = yield* post("create_model", { session_id: s, model_seq_id: 0, base_model: "toy-bigram", type: "create_model" })
      const model = created.body.model_id as string
      for (const [seq, name] of [[1, "in"], [2, "out"], [3, "link"]] as const) {
        const r = yield* post("save_weights", { model_id: model, path: name, seq_id: seq, type: "save_weights" })
        assert.strictEqual(r.status, 200, JSON.stringify(r.body))
        yield* call(server.url, "POST", "retrieve_future", { request_id: r.body.request_id }, auth)
      }
      const archive = (name: string, headers: Record<string, string>) =>
        call(server.url, "GET", `training_runs/${encodeURIComponent(model)}/checkpoints/weights/${name}/archive`, undefined, headers)
      const noKey = yield* archive("in", {})
      assert.strictEqual(noKey.status, 401)
      for (const name of ["out", "link"]) {
        const refused = yield* archive(name, auth)
        assert.strictEqual(refused.status, 403, name)
        assert.match(refused.body.detail, /outside the server's state folder/)
      }
      const ok = yield* archive("in", auth)
      assert.strictEqual(ok.status, 302, JSON.stringify(ok.body))
      // the download URL is its own credential; with no archivePack the tar holds the state file alone, under its base name
      const file = yield* Effect.promise(async () => {
        const res = await fetch(ok.headers.get("location")!)
        return { status: res.status, bytes: new Uint8Array(await res.arrayBuffer()), type: res.headers.get("content-type") }
      })
      assert.deepStrictEqual([file.status, file.type], [200, "application/x-tar"])
      assert.deepStrictEqual(Tar.unpack(file.bytes), [{ name: "in.ckpt", bytes: new TextEncoder().encode("state") }])
      assert.deepStrictEqual(Checkpoints.stateOfArchive(file.bytes), new TextEncoder().encode("state"))
      // the client reports the server's refusal
      const e = yield* Checkpoints.download(`tinker://${model}/weights/out`, { baseUrl: server.url, apiKey: Redacted.make(key), retry: Retry.fast }).pipe(
        Effect.provide(PlatformHttpClient.layer),
        Effect.flip,
      )
      assert.match(e.message, /HTTP 403: .*outside the server's state folder/)
      assert.isTrue(Result.isFailure(Checkpoints.parseTinkerPath("tinker://m/weights/a/b")))
    }).pipe(Effect.scoped))
})
