/**
 * Adapter export: a run's checkpoint written in PEFT layout and read back with an
 * independent safetensors reader (`parseSafetensorsMetadata` of @huggingface/hub, which
 * parses the header and checks the offsets; values are read at those offsets), checked
 * against the saved state; and the failures a user meets (no checkpoint, no such step, a
 * checkpoint on a server that is not named). A run trained over HTTP is exported from its
 * server in test/backends/http/Archive.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import { parseSafetensorsMetadata } from "@huggingface/hub"
import { ConfigProvider, Effect } from "effect"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Retry from "../src/backends/http/client/Retry.ts"
import * as Checkpoint from "../src/backends/local/Checkpoint.ts"
import { Local } from "../src/backends/local/index.ts"
import { Rng } from "../src/backends/local/Rng.ts"
import { adamParams } from "../src/contract/Contract.ts"
import * as Export from "../src/app/Export.ts"
import { Trainer } from "../src/services/Trainer.ts"
import { rlDatum, tinyConfig, tinyLora } from "./backends/local/helpers.ts"

const root = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-export-"))

/** A run folder with checkpoints at steps 1 and 2, as the runner writes them. */
const makeRun = (name: string) =>
  Effect.gen(function* () {
    const dir = path.join(root, name)
    fs.mkdirSync(dir, { recursive: true })
    fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify({ name, env: "math" }))
    const trainer = yield* Trainer
    const rng = new Rng(3)
    const rows: Array<string> = []
    for (const step of [1, 2]) {
      yield* trainer.forwardBackward(Array.from({ length: 4 }, () => rlDatum(rng, 3, 6)), "importance_sampling")
      yield* trainer.optimStep(adamParams({ learningRate: 1e-2 }))
      const saved = yield* trainer.saveState(`step-${step}`)
      rows.push(JSON.stringify({ step, name: `step-${step}`, path: saved.path, time: new Date().toISOString() }))
    }
    fs.writeFileSync(path.join(dir, "checkpoints.jsonl"), rows.join("\n") + "\n")
    return dir
  }).pipe(Effect.provide(Local.layer({ config: tinyConfig, lora: tinyLora, seed: 9, stateDir: path.join(root, name, "state") })), Effect.scoped)

/** test double: a fetch that serves one local file for any URL, with byte ranges, so the hub's parser reads it */
const localFetch = (bytes: Uint8Array<ArrayBuffer>): typeof fetch =>
  (async (input: RequestInfo | URL, init?: RequestInit) => {
    const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined))
    const common = { "accept-ranges": "bytes", etag: "\"local\"" }
    const m = /bytes=(\d+)-(\d*)/.exec(headers.get("range") ?? "")
    if (m === null) return new Response(bytes, { status: 200, headers: { ...common, "content-length": String(bytes.length) } })
    const a = Number(m[1])
    const b = m[2] ? Math.min(bytes.length, Number(m[2]) + 1) : bytes.length
    return new Response(bytes.slice(a, b), { status: 206, headers: { ...common, "content-length": String(b - a), "content-range": `bytes ${a}-${b - 1}/${bytes.length}` } })
  }) as typeof fetch

/** Every tensor of a safetensors file: header from the hub's parser, values at its offsets. */
const readSafetensors = (file: string) =>
  Effect.promise(async () => {
    const bytes = new Uint8Array(fs.readFileSync(file))
    const parsed = await parseSafetensorsMetadata({ repo: "local/adapter", path: "adapter_model.safetensors", fetch: localFetch(bytes), hubUrl: "http://local.invalid" })
    assert.isFalse(parsed.sharded)
    const header = (parsed as { header: Record<string, unknown> }).header
    const start = 8 + Number(new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true))
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    const tensors: Record<string, { shape: Array<number>; values: Array<number> }> = {}
    for (const [name, info] of Object.entries(header)) {
      if (name === "__metadata__") continue
      const { dtype, shape, data_offsets: [a, b] } = info as { dtype: string; shape: Array<number>; data_offsets: [number, number] }
      assert.strictEqual(dtype, "F32")
      const values: Array<number> = []
      for (let p = start + a; p < start + b; p += 4) values.push(view.getFloat32(p, true))
      tensors[name] = { shape, values }
    }
    return { tensors, metadata: header["__metadata__"] as Record<string, string> }
  })

describe("Export", () => {
  it.live("writes the adapter in PEFT layout, as saved (transposed), for the last or a chosen step", () =>
    Effect.gen(function* () {
      const dir = yield* makeRun("run-a")
      for (const step of [undefined, 1] as const) {
        const out = path.join(root, `out-a-${step ?? "last"}`)
        const result = yield* Export.exportRun(dir, { out, step })
        assert.strictEqual(result.step, step ?? 2)
        const { metadata, tensors } = yield* readSafetensors(path.join(out, "adapter_model.safetensors"))
        assert.strictEqual(metadata["format"], "pt")
        const state = yield* Effect.promise(() => Checkpoint.read(path.join(dir, "state", `step-${step ?? 2}.ckpt`)))
        const names: Array<string> = []
        for (let layer = 0; layer < tinyConfig.nLayers; layer++) {
          for (const t of tinyLora.targets) {
            for (const m of ["A", "B"] as const) {
              const name = `base_model.model.${Export.modulePath(layer, t)}.lora_${m}.weight`
              names.push(name)
              const [rows, cols] = state.shapes[`param/l${layer}.${t}.${m}`] as [number, number]
              const saved = state.tensors[`param/l${layer}.${t}.${m}`]!
              const got = tensors[name]!
              // gyre A [in, r] / B [r, out]; PEFT lora_A [r, in] / lora_B [out, r]
              assert.deepStrictEqual(got.shape, [cols, rows], name)
              if (m === "A") assert.strictEqual(cols, tinyLora.rank)
              else assert.strictEqual(rows, tinyLora.rank)
              for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) assert.strictEqual(got.values[j * rows + i], saved[i * cols + j])
            }
          }
        }
        assert.sameMembers(Object.keys(tensors), names)
        assert.isTrue(Object.entries(tensors).some(([n, t]) => n.includes("lora_B") && t.values.some((v) => v !== 0)), "B must have trained")
        assert.strictEqual(tensors["base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"]!.shape[0], tinyConfig.dModel)
        const config = JSON.parse(fs.readFileSync(path.join(out, "adapter_config.json"), "utf8"))
        assert.include(config, { peft_type: "LORA", task_type: "CAUSAL_LM", r: tinyLora.rank, lora_alpha: tinyLora.alpha, base_model_name_or_path: "gyre/models/base" })
        assert.deepStrictEqual(config.target_modules, ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"])
      }
      // the two steps' adapters differ, so --step picked its own
      const last = yield* readSafetensors(path.join(root, "out-a-last", "adapter_model.safetensors"))
      const first = yield* readSafetensors(path.join(root, "out-a-1", "adapter_model.safetensors"))
      const n = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"
      assert.notDeepEqual(last.tensors[n]!.values, first.tensors[n]!.values)
    }))

  it.live("--base-model names the base model", () =>
    Effect.gen(function* () {
      const dir = yield* makeRun("run-b")
      const out = path.join(root, "out-b")
      yield* Export.exportRun(dir, { out, baseModel: "org/some-model" })
      assert.strictEqual(JSON.parse(fs.readFileSync(path.join(out, "adapter_config.json"), "utf8")).base_model_name_or_path, "org/some-model")
    }))

  it.effect("a run with no checkpoint says so", () =>
    Effect.gen(function* () {
      const dir = path.join(root, "empty")
      fs.mkdirSync(dir, { recursive: true })
      fs.writeFileSync(path.join(dir, "config.json"), "{}")
      const e = yield* Effect.flip(Export.exportRun(dir, { out: path.join(root, "out-empty") }))
      assert.strictEqual(e.reason, "NoCheckpoint")
      assert.match(e.message, /has no checkpoint \(no checkpoints\.jsonl\)/)
      assert.isFalse(fs.existsSync(path.join(root, "out-empty")))
    }))

  it.live("a step with no checkpoint lists the saved steps; a server's checkpoint with no server named asks for --backend", () =>
    Effect.gen(function* () {
      const dir = path.join(root, "remote")
      fs.mkdirSync(dir, { recursive: true })
      fs.writeFileSync(path.join(dir, "checkpoints.jsonl"), JSON.stringify({ step: 5, name: "step-5", path: "tinker://m1/weights/step-5" }) + "\n")
      const missing = yield* Effect.flip(Export.exportRun(dir, { out: path.join(root, "x"), step: 3 }))
      assert.match(missing.message, /no checkpoint of step 3; --step must be one of 5/)
      const noEnv = ConfigProvider.layer(ConfigProvider.fromUnknown({}))
      const remote = yield* Effect.flip(Export.exportRun(dir, { out: path.join(root, "x") })).pipe(Effect.provide(noEnv))
      assert.strictEqual(remote.reason, "Remote")
      assert.match(remote.message, /tinker:\/\/m1\/weights\/step-5.*give its URL, e\.g\. --backend http/)
      const bad = yield* Effect.flip(Export.exportRun(dir, { out: path.join(root, "x"), backend: "127.0.0.1:8080" }))
      assert.match(bad.message, /--backend must be an http\(s\):\/\/ URL/)
      // the server config.json names (a key a run may record) is used when --backend is not given
      fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify({ backend: "ftp://nowhere" }))
      const recorded = yield* Effect.flip(Export.exportRun(dir, { out: path.join(root, "x") })).pipe(Effect.provide(noEnv))
      assert.match(recorded.message, /give its URL/)
      fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify({ backend: "http://127.0.0.1:9" }))
      const unreachable = yield* Effect.flip(Export.exportRun(dir, { out: path.join(root, "x"), retry: Retry.fast })).pipe(Effect.provide(noEnv))
      assert.strictEqual(unreachable.reason, "Remote")
      assert.match(unreachable.message, /could not be downloaded from http:\/\/127\.0\.0\.1:9 \(config\.json\)/)
    }))

  it("the command exits 1 with the message", () => {
    const dir = path.join(root, "cli-empty")
    fs.mkdirSync(dir, { recursive: true })
    const r = spawnSync(process.execPath, ["--import", "tsx", path.resolve("export.ts"), dir, "--out", path.join(root, "cli-out")], { encoding: "utf8" })
    assert.strictEqual(r.status, 1, r.stderr)
    assert.match(r.stderr, /error: .*has no checkpoint/)
  })
})
