/**
 * What gyre's Loops data-plane server refuses before it can poison or stall the trainer: a
 * datum that overflows float32 (an advantage of 1e300) is a 422 at submission naming the
 * field, as the Tinker wire's check names it; a learning rate that would make the model's
 * forward pass non-finite fails its operation naming the learning rate, and the trainer
 * still trains; a body over the limit is a 413 naming the limit and `serve --max-body-mb`;
 * and `/health` is answered while a large valid body is sent slowly.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { raceHealth } from "../../platform/SlowBody.ts"
import { startLoopsDataPlane } from "./DataPlane.ts"

let server: Awaited<ReturnType<typeof startLoopsDataPlane>>
beforeAll(async () => {
  server = await startLoopsDataPlane({ pollWait: "300 millis", maxBodyBytes: 2 ** 20 })
})
afterAll(async () => {
  await server.close()
})

let keys = 0
const call = async (method: string, path: string, body?: unknown) => {
  const headers = { "content-type": "application/json", "idempotency-key": `k-limits-${++keys}` }
  const r = await fetch(`${server.url}${path}`, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) })
  return { status: r.status, body: (await r.json()) as Record<string, unknown> }
}

const outcome = async (id: unknown) => {
  for (;;) {
    const r = await call("GET", `/operations/${String(id)}`)
    if (r.status !== 408) return r.body
  }
}

/** An RL datum of `n` tokens with advantage `advantage` (targets shifted, as the wire has them). */
const rlDatum = (n: number, advantage: number) => ({
  model_input: { chunks: [{ type: "encoded_text", tokens: Array.from({ length: n }, (_, i) => 65 + (i % 20)) }] },
  loss_fn_inputs: {
    target_tokens: { data: Array.from({ length: n }, (_, i) => 66 + (i % 20)), dtype: "int64" },
    logprobs: { data: Array.from({ length: n }, () => -1.5), dtype: "float32" },
    advantages: { data: Array.from({ length: n }, (_, i) => (i === 2 ? advantage : 0.5)), dtype: "float32" },
  },
})

describe("gyre's Loops data-plane server refuses poison and keeps answering", () => {
  it("an advantage of 1e300 is refused at submission, naming the field", async () => {
    const r = await call("POST", "/forward_backward", { data: [rlDatum(4, 0.5), rlDatum(4, 1e300)], loss_fn: "importance_sampling" })
    assert.strictEqual(r.status, 422, JSON.stringify(r.body))
    assert.strictEqual(r.body["detail"], "body.data[1].loss_fn_inputs.advantages.data[2] = 1e+300 overflows float32 (|x| must be at most 3.4028e+38)")
  })

  it("a learning rate of 1e20 fails its optim_step naming it, the weights stay, and the next step trains", async () => {
    const fb = await call("POST", "/forward_backward", { data: [rlDatum(4, 0.5)], loss_fn: "importance_sampling" })
    assert.strictEqual((await outcome(fb.body["operation_id"]))["status"], "done")
    const huge = await outcome((await call("POST", "/optim_step", { adam_params: { learning_rate: 1e20 } })).body["operation_id"])
    assert.strictEqual(huge["status"], "error")
    assert.match(String(huge["error"]), /^ValueError: .*the learning rate 1e\+20 made the weights non-finite/)
    const step = await outcome((await call("POST", "/optim_step", { adam_params: { learning_rate: 1e-3 } })).body["operation_id"])
    assert.strictEqual(step["status"], "done", JSON.stringify(step))
    const forward = await outcome((await call("POST", "/forward", { data: [rlDatum(4, 0.5)], loss_fn: "importance_sampling" })).body["operation_id"])
    const logprobs = (forward["result"] as { loss_fn_outputs: Array<{ logprobs: { data: Array<number> } }> }).loss_fn_outputs[0]!.logprobs.data
    assert.isTrue(logprobs.every(Number.isFinite), JSON.stringify(logprobs))
  })

  it("a body over the limit is a 413 naming the limit and serve --max-body-mb", async () => {
    const r = await call("POST", "/forward", { data: [rlDatum(4, 0.5)], loss_fn: "importance_sampling", pad: "x".repeat(2 ** 20) })
    assert.strictEqual(r.status, 413)
    assert.match(String(r.body["detail"]), /^the request body has \d+ bytes, over this server's limit of 1 MiB: send less per request, or raise the limit with serve --max-body-mb$/)
  })

  it("while a large valid body is sent slowly, /health is answered first", async () => {
    const body = new TextEncoder().encode(JSON.stringify({ data: Array.from({ length: 40 }, () => rlDatum(24, 0.5)), loss_fn: "importance_sampling" }))
    const race = await raceHealth(`${server.url}/forward_backward`, body, `${server.url}/health`, { headers: { "idempotency-key": "k-limits-slow" } })
    assert.strictEqual(race.big.status, 202, race.big.text)
    assert.deepStrictEqual([race.health.status, race.order], [200, ["health", "big"]])
  })
})
