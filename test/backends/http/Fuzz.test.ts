import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fc from "fast-check"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import { Sampler } from "../../../src/services/Sampler.ts"
import { Trainer } from "../../../src/services/Trainer.ts"
import { rlSequence, toySequence } from "./Sequence.ts"
import { makeToy } from "./ToyBackend.ts"

interface Answer {
  readonly status: number
  readonly text: string
}

const send = (url: string, method: string, body: string | undefined, headers: Record<string, string> = {}) =>
  Effect.promise(async (): Promise<Answer> => {
    const res = await fetch(url, { method, body: body ?? null, headers: { "content-type": "application/json", ...headers } })
    return { status: res.status, text: await res.text() }
  })

const postJson = (base: string, path: string, body: unknown) => send(`${base}/api/v1/${path}`, "POST", JSON.stringify(body))

type Json = null | boolean | number | string | Array<Json> | { [k: string]: Json }

/** Valid bodies (only required fields), so that every mutation below makes them invalid. */
const templates = (sessionId: string, modelId: string): Record<string, { [k: string]: Json }> => ({
  session_heartbeat: { session_id: sessionId },
  create_model: { session_id: sessionId, model_seq_id: 3, base_model: "toy-bigram" },
  get_info: { model_id: modelId },
  forward_backward: {
    forward_backward_input: {
      data: [
        {
          model_input: { chunks: [{ type: "encoded_text", tokens: [1, 2, 3] }] },
          loss_fn_inputs: {
            target_tokens: { data: [2, 3, 4], dtype: "int64" },
            logprobs: { data: [-1, -1, -1], dtype: "float32" },
            advantages: { data: [1, 1, 1], dtype: "float32" },
          },
        },
      ],
      loss_fn: "importance_sampling",
    },
    model_id: modelId,
    seq_id: 1,
  },
  forward: {
    forward_input: {
      data: [
        {
          model_input: { chunks: [{ type: "encoded_text", tokens: [1, 2] }] },
          loss_fn_inputs: { target_tokens: { data: [2, 3], dtype: "int64" }, weights: { data: [1, 1], dtype: "float32" } },
        },
      ],
      loss_fn: "cross_entropy",
    },
    model_id: modelId,
    seq_id: 1,
  },
  optim_step: { adam_params: { learning_rate: 0.1 }, model_id: modelId, seq_id: 1 },
  save_weights: { model_id: modelId, seq_id: 1 },
  save_weights_for_sampler: { model_id: modelId, seq_id: 1 },
  asample: { prompt: { chunks: [{ type: "encoded_text", tokens: [1, 2] }] }, sampling_params: { max_tokens: 4 }, num_samples: 2, base_model: "toy-bigram" },
  retrieve_future: { request_id: "nope" },
  create_sampling_session: { session_id: sessionId, sampling_session_seq_id: 0 },
})

/** Every path to a field or array element of a JSON value. */
const paths = (v: Json, prefix: Array<string | number> = []): Array<Array<string | number>> => {
  if (Array.isArray(v)) return v.flatMap((x, i) => [[...prefix, i], ...paths(x, [...prefix, i])])
  if (v !== null && typeof v === "object") return Object.entries(v).flatMap(([k, x]) => [[...prefix, k], ...paths(x, [...prefix, k])])
  return []
}

const clone = (v: Json): Json => JSON.parse(JSON.stringify(v))

/** Values that are wrong for the field they replace (or, for numbers, out of range). */
const badValues = (old: Json, path: ReadonlyArray<string | number>): Array<Json> => {
  const key = path[path.length - 1]
  const numeric: Record<string, Array<Json>> = {
    seq_id: [-1, -1e9, 1.5, 2 ** 60],
    model_seq_id: [-7, 0.25],
    max_tokens: [0, -1, 1e12, 1e300],
    num_samples: [0, -3, 1e9],
    learning_rate: [-1, 1e400 as number, "fast"],
  }
  if (typeof key === "string" && numeric[key]) return numeric[key]!
  if (typeof old === "number") return ["7", true, null, [1], { n: 1 }, ...(Number.isInteger(old) ? [1.5, -1e6] : [])]
  if (typeof old === "string") return [42, true, null, [old], { s: old }, ...(key === "dtype" || key === "type" || key === "loss_fn" ? ["wrong"] : [])]
  if (Array.isArray(old)) return ["list", 3, null, { a: 1 }, ...(old.length > 0 ? [[]] : [])]
  if (old !== null && typeof old === "object") return ["object", 3, null, [], ...(key === "adam_params" ? [] : [{}])]
  return [null, "x"]
}

type Mutation = { readonly kind: "delete" | "replace"; readonly path: Array<string | number>; readonly value?: Json }

const mutate = (body: Json, m: Mutation): Json => {
  const out = clone(body)
  let node: any = out
  for (const p of m.path.slice(0, -1)) node = node[p]
  const last = m.path[m.path.length - 1]!
  if (m.kind === "delete") {
    if (Array.isArray(node)) node.splice(last as number, 1)
    else delete node[last]
  } else node[last] = m.value
  return out
}

const isMessage4xx = (a: Answer) => {
  if (a.status < 400 || a.status > 499) return false
  try {
    const body = JSON.parse(a.text) as { detail?: unknown }
    return typeof body.detail === "string" && body.detail.length > 0
  } catch {
    return false
  }
}

describe("server fuzzing", () => {
  it.live(
    "malformed, mistyped, incomplete and out-of-range requests get a 4xx with a message, and the server keeps serving",
    () =>
      Effect.gen(function* () {
        const toy = makeToy()
        const server = yield* Server.make({ vocabSize: toy.vocab, maxBodyBytes: 256 * 1024 }).pipe(
          Effect.provideService(Trainer, toy.trainer),
          Effect.provideService(Sampler, toy.sampler),
        )
        const base = server.url
        const session = JSON.parse((yield* postJson(base, "create_session", {})).text) as { session_id: string }
        const created = JSON.parse((yield* postJson(base, "create_model", { session_id: session.session_id, model_seq_id: 0, base_model: "toy-bigram" })).text)
        const model = JSON.parse((yield* postJson(base, "retrieve_future", { request_id: created.request_id })).text) as { model_id: string }
        const bodies = templates(session.session_id, model.model_id)
        const names = Object.keys(bodies)
        const failures: Array<string> = []
        const check = (what: string) => (a: Answer) => {
          if (!isMessage4xx(a)) failures.push(`${what} -> ${a.status} ${a.text.slice(0, 200)}`)
        }

        // 1. mutations of valid bodies: a required field deleted, or replaced by a wrong value
        const mutation = fc.constantFrom(...names).chain((name) => {
          const body = bodies[name]!
          const all = paths(body)
          return fc.constantFrom(...all).chain((path) => {
            let old: any = body
            for (const p of path) old = old[p]
            const replace = fc.constantFrom(...badValues(old, path)).map((value): Mutation => ({ kind: "replace", path, value }))
            const del = fc.constant<Mutation>({ kind: "delete", path })
            // optional fields, and prompt tokens (a shorter prompt is still a prompt), are only replaced
            const optional = /^(adam_params\.learning_rate|num_samples|prompt\.chunks\.0\.tokens\.\d+)$/.test(path.join("."))
            return fc.tuple(fc.constant(name), optional ? replace : fc.oneof(replace, del))
          })
        })
        const samples = fc.sample(mutation, { numRuns: 400, seed: 7 })
        for (const [name, m] of samples) {
          const body = mutate(bodies[name]!, m)
          check(`${name} ${m.kind} ${m.path.join(".")} ${JSON.stringify(m.value)}`)(yield* postJson(base, name, body))
        }

        // 2. random JSON and broken JSON
        const junk = fc.sample(
          fc.tuple(
            fc.constantFrom(...names.filter((n) => n !== "session_heartbeat")),
            fc.oneof(
              fc.jsonValue().map((v) => JSON.stringify(v)),
              fc.string(),
              fc.jsonValue().map((v) => JSON.stringify(v).slice(0, -1) + "{"),
            ),
          ),
          { numRuns: 200, seed: 11 },
        )
        for (const [name, text] of junk) {
          if (text.trim() === "" || text.trim() === "{}") continue
          check(`${name} <- ${text.slice(0, 80)}`)(yield* send(`${base}/api/v1/${name}`, "POST", text))
        }

        // 3. the edges: unknown loss and config keys, huge and negative sizes, unknown routes and methods
        const fb = bodies["forward_backward"]! as any
        const edge = [
          ["forward_backward", { ...fb, forward_backward_input: { ...fb.forward_backward_input, loss_fn: "reinforce++" } }],
          ["forward_backward", { ...fb, forward_backward_input: { ...fb.forward_backward_input, loss_fn_config: { clip_eps: 0.2 } } }],
          ["forward_backward", { ...fb, forward_backward_input: { ...fb.forward_backward_input, loss_fn: "ppo", loss_fn_config: { clip_low_threshold: 5 } } }],
          ["forward_backward", { ...fb, forward_backward_input: { ...fb.forward_backward_input, data: [] } }],
          ["forward_backward", { ...fb, seq_id: -1 }],
          [
            "forward_backward",
            {
              ...fb,
              forward_backward_input: {
                ...fb.forward_backward_input,
                data: [{ model_input: { chunks: [{ type: "encoded_text", tokens: Array.from({ length: 5000 }, () => 1) }] }, loss_fn_inputs: {} }],
              },
            },
          ],
          ["forward_backward", { ...fb, forward_backward_input: { ...fb.forward_backward_input, top_k_logprobs: 1e6 } }],
          ["asample", { ...bodies["asample"], num_samples: 1e9 }],
          ["asample", { ...bodies["asample"], sampling_params: { max_tokens: 1e12 } }],
          ["asample", { ...bodies["asample"], prompt: { chunks: [{ type: "encoded_text", tokens: [-5, 99999] }] } }],
          ["asample", { ...bodies["asample"], prompt: { chunks: [{ type: "image", data: "AAAA", format: "png" }] } }],
          ["create_model", { session_id: session.session_id, model_seq_id: 1, base_model: "toy-bigram", lora_config: { rank: -4 } }],
          ["create_model", { session_id: session.session_id, model_seq_id: 1, base_model: "toy-bigram", lora_config: { rank: 1e9 } }],
          ["create_model", { session_id: session.session_id, model_seq_id: 1, base_model: "llama-9000b" }],
          ["load_weights", { model_id: model.model_id, seq_id: 1, path: "/etc/passwd" }],
          ["load_weights", { model_id: model.model_id, seq_id: 1, path: "tinker://x/weights/../../etc" }],
          ["save_weights", { model_id: model.model_id, seq_id: 1, path: "../escape" }],
        ] as const
        for (const [name, body] of edge) check(`edge ${name} ${JSON.stringify(body).slice(0, 120)}`)(yield* postJson(base, name, body))
        check("huge body")(yield* send(`${base}/api/v1/forward_backward`, "POST", JSON.stringify({ pad: "x".repeat(300 * 1024) })))
        check("bad X-Min-Policy-Version")(
          yield* send(`${base}/api/v1/asample`, "POST", JSON.stringify(bodies["asample"]), { "x-min-policy-version": "soon" }),
        )
        check("negative X-Min-Policy-Version")(
          yield* send(`${base}/api/v1/asample`, "POST", JSON.stringify(bodies["asample"]), { "x-min-policy-version": "-2" }),
        )
        check("bad X-Gyre-Wait-Ms")(yield* send(`${base}/api/v1/optim_step`, "POST", JSON.stringify(bodies["optim_step"]), { "x-gyre-wait-ms": "-5" }))
        check("broken percent-encoding")(yield* send(`${base}/api/v1/samplers/%E0%A4%A`, "GET", undefined))
        check("unknown sampler")(yield* send(`${base}/api/v1/samplers/nope`, "GET", undefined))
        check("unknown route")(yield* postJson(base, "teleport", {}))
        check("GET on a POST route")(yield* send(`${base}/api/v1/forward_backward`, "GET", undefined))
        check("PUT")(yield* send(`${base}/api/v1/asample`, "PUT", "{}"))
        check("unknown future")(yield* postJson(base, "retrieve_future", { request_id: "never-issued" }))
        check("reused key, other body")(
          yield* Effect.flatMap(send(`${base}/api/v1/create_session`, "POST", "{}", { "x-idempotency-key": "k1" }), () =>
            send(`${base}/api/v1/create_session`, "POST", '{"tags":["b"]}', { "x-idempotency-key": "k1" }),
          ),
        )

        assert.deepStrictEqual(failures, [])
        // nothing ran on the backend (a refused call uses up its seq_id, but runs nothing)
        assert.strictEqual(toy.counters.optimSteps + toy.counters.forwardBackward + toy.counters.samples, 0)
        assert.isAtLeast(server.stats.requests, 600)

        // 4. still serving: a real run through the same server
        const health = yield* send(`${base}/api/v1/healthz`, "GET", undefined)
        assert.strictEqual(health.status, 200)
        const result = yield* rlSequence({ ...toySequence, steps: 1 }).pipe(Effect.provide(Client.layer({ baseUrl: base, retry: Retry.fast })))
        assert.strictEqual(result.versions.length, 1)
        assert.strictEqual(toy.counters.optimSteps, 1)
      }).pipe(Effect.scoped),
  )
})
