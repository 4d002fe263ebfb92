/**
 * Where a refused datum is travels as data: through micro-batching (a chunk's datum index
 * becomes the step's, for a bad datum in any chunk of any chunking) and into the runner's
 * error, which names the sample behind the datum. Attribution reads the issue, never its
 * text: a trainer whose message says another index than its issue is attributed by the
 * issue.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import * as fc from "fast-check"
import { Local } from "../../src/backends/local/index.ts"
import { BackendError, type Datum, float32, modelInputFromTokens } from "../../src/contract/Contract.ts"
import * as DatumT from "../../src/vocabulary/Datum.ts"
import { type DatumIssue, render } from "../../src/contract/DatumIssue.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { forwardBackwardChunked, inStep } from "../../src/loss/MicroBatch.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { Trainer } from "../../src/services/Trainer.ts"
import { makeToy } from "../backends/http/ToyBackend.ts"
import vowels, { quiet, TINY, toySettings } from "../envs/vowels.ts"

const V = 16

const goodDatum = fc
  .tuple(fc.array(fc.integer({ min: 0, max: V - 1 }), { minLength: 1, maxLength: 6 }), fc.integer({ min: 1, max: 6 }), fc.double({ min: 0.1, max: 2, noNaN: true }))
  .chain(([prompt, n, advantage]) =>
    fc.tuple(fc.array(fc.integer({ min: 0, max: V - 1 }), { minLength: n, maxLength: n }), fc.array(fc.double({ min: -5, max: -0.01, noNaN: true }), { minLength: n, maxLength: n }))
      .map(([completion, samplerLogprobs]) => DatumT.rl({ prompt, completion, samplerLogprobs, advantage })),
  )

/** Ways to spoil a good datum, each found by the one validator. */
const spoil: ReadonlyArray<(d: Datum) => Datum> = [
  (d) => ({ ...d, lossFnInputs: { ...d.lossFnInputs, logprobs: float32(d.lossFnInputs["logprobs"]!.data.map((v, i, a) => (i === a.length - 1 ? Number.NaN : v))) } }),
  (d) => ({ ...d, lossFnInputs: { ...d.lossFnInputs, advantages: float32(d.lossFnInputs["advantages"]!.data.map((v, i, a) => (i === a.length - 1 ? 1e300 : v))) } }),
  (d) => ({ ...d, lossFnInputs: { ...d.lossFnInputs, logprobs: float32(d.lossFnInputs["logprobs"]!.data.map((v, i, a) => (i === a.length - 1 ? 0.5 : v))) } }),
  (d) => ({ ...d, lossFnInputs: { ...d.lossFnInputs, advantages: float32([0]) } }),
  (d) => ({ ...d, modelInput: modelInputFromTokens([V + 3, ...d.modelInput.chunks.flatMap((c) => c.tokens).slice(1)]) }),
  (d) => ({ ...d, lossFnInputs: { advantages: d.lossFnInputs["advantages"]! } }),
]

/** The issue `forwardBackwardChunked` fails with, on the toy trainer (which runs the one validator per call). */
const refusal = (data: ReadonlyArray<Datum>, chunk: number): BackendError =>
  Effect.runSync(forwardBackwardChunked(data, "ppo", { chunk }).pipe(Effect.flip, Effect.provideService(Trainer, makeToy({ vocab: V }).trainer)))

const check = (data: ReadonlyArray<Datum>, bad: number, chunk: number) => {
  const e = refusal(data, chunk)
  const alone = DatumT.checkAll([data[bad]!], "ppo", { vocabSize: V })!
  assert.strictEqual(e.reason, "InvalidInput")
  // where it is and what was expected (a chunk's advantages are scaled, so the value may differ)
  const where = (i: DatumIssue) => ({ datum: i.datum, field: i.field, position: i.position, expected: i.expected })
  assert.deepStrictEqual(where(e.issue!), where({ ...alone, datum: bad }), `bad datum ${bad}, chunks of ${chunk}`)
  // the text is rendered from the issue: it names the step's index
  assert.strictEqual(e.message, render(e.issue!))
}

describe("an issue's location survives micro-batching", () => {
  it("a random batch with one bad datum, any chunk size: the issue names the bad datum's index in the step", () =>
    fc.assert(
      fc.property(
        fc.array(goodDatum, { minLength: 1, maxLength: 12 }).chain((data) =>
          fc.tuple(fc.constant(data), fc.nat({ max: data.length - 1 }), fc.nat({ max: spoil.length - 1 }), fc.integer({ min: 0, max: data.length + 1 }))
        ),
        ([data, bad, how, chunk]) => {
          const batch = data.map((d, i) => (i === bad ? spoil[how]!(d) : d))
          check(batch, bad, chunk)
        },
      ),
      { numRuns: 200 },
    ))

  it("a bad datum in every chunk of 7 datums in chunks of 2", () => {
    const data = fc.sample(goodDatum, { numRuns: 7, seed: 3 })
    for (let bad = 0; bad < data.length; bad++) check(data.map((d, i) => (i === bad ? spoil[1]!(d) : d)), bad, 2)
  })

  it("inStep moves the issue by the call's first datum, whatever the message says", () => {
    const issue: DatumIssue = { datum: 1, field: ["lossFnInputs", "advantages"], position: 2, value: 1e300, expected: { _tag: "Float32" } }
    const e = new BackendError({ reason: "InvalidInput", operation: "fb", message: "reworded: nothing here says data[0] or any index", issue })
    const moved = inStep(e, 3, 6, 9)
    assert.deepStrictEqual(moved.issue, { ...issue, datum: 4 })
    assert.strictEqual(moved.message, render({ ...issue, datum: 4 }))
    // one call for the whole step: unchanged
    assert.strictEqual(inStep(e, 0, 9, 9), e)
    // a refusal without an issue keeps its text and says which datums the call held
    const remote = inStep(new BackendError({ reason: "InvalidInput", operation: "fb", message: "HTTP 400: data[1] is bad" }), 3, 6, 9)
    assert.isUndefined(remote.issue)
    assert.strictEqual(remote.message, "HTTP 400: data[1] is bad (in the call of datums 3 to 5 of 9; indices count from the call's first)")
    const down = new BackendError({ reason: "Unavailable", operation: "fb", message: "gone" })
    assert.strictEqual(inStep(down, 3, 6, 9), down)
  })
})

/** The embedded trainer, refusing its `call`-th forward_backward with `issue` and a message naming another datum. */
const refusing = (dir: string, call: number, issue: DatumIssue) =>
  Layer.effect(
    Trainer,
    Effect.gen(function* () {
      const inner = yield* Trainer
      let calls = 0
      return Trainer.of({
        ...inner,
        forwardBackward: (data, lossFn, options) =>
          ++calls === call
            ? Effect.fail(new BackendError({ reason: "InvalidInput", operation: "fb", message: "reworded refusal that mentions data[0] only", issue }))
            : inner.forwardBackward(data, lossFn, options),
      })
    }),
  ).pipe(
    Layer.provideMerge(Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] } }))),
  )

const runRefused = (microBatch: number, call: number, issue: DatumIssue) =>
  Effect.gen(function* () {
    const dir = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-issue-")), "r")
    const settings = toySettings(dir, { steps: 1, groups: 4, groupSize: 8, microBatch })
    return yield* Runner.run(settings, vowels).pipe(Effect.provide(refusing(dir, call, issue)), quiet, Effect.flip)
  })

describe("the runner names the sample behind a refused datum from the issue", () => {
  const issue: DatumIssue = { datum: 1, field: ["lossFnInputs", "advantages"], position: 2, value: 1e300, expected: { _tag: "Float32" } }

  it.effect("a datum of the second call of 3: datum 4 of the step", () =>
    Effect.gen(function* () {
      const error = yield* runRefused(3, 2, issue)
      assert.strictEqual(error.reason, "Backend")
      assert.include(error.message, render({ ...issue, datum: 4 }))
      assert.match(error.message, /\(datum 4 is sample \d+ of problem \S+\)$/)
    }))

  it.effect("one call: the issue's datum, not the index its message mentions", () =>
    Effect.gen(function* () {
      const error = yield* runRefused(0, 1, issue)
      assert.include(error.message, "reworded refusal that mentions data[0] only")
      assert.match(error.message, /\(datum 1 is sample \d+ of problem \S+\)$/)
    }))
})

/**
 * A backend that answers with text only (as a server other than gyre's does): the embedded sampler hands
 * out a positive log-prob for every sampled token's first position, and the trainer's
 * refusal loses its issue.
 */
const textOnly = (dir: string) =>
  Layer.effectContext(
    Effect.gen(function* () {
      const trainer = yield* Trainer
      const sampler = yield* Sampler
      return Context.make(
        Trainer,
        Trainer.of({
          ...trainer,
          forwardBackward: (data, lossFn, options) =>
            trainer.forwardBackward(data, lossFn, options).pipe(Effect.mapError((e) => new BackendError({ reason: e.reason, operation: e.operation, message: `HTTP 400: ${e.message}` }))),
        }),
      ).pipe(
        Context.add(
          Sampler,
          Sampler.of({
            ...sampler,
            sample: (prompt, params, options) =>
              Effect.map(sampler.sample(prompt, params, options), (r) => ({ ...r, sequences: r.sequences.map((q) => ({ ...q, logprobs: q.logprobs.map((v, i) => (i === 0 ? 0.5 : v)) })) })),
          }),
        ),
      )
    }),
  ).pipe(
    Layer.provideMerge(Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "w1", "w2"] } }))),
  )

describe("a refusal without an issue", () => {
  it.effect("is located by the validator run on the step's datums, and names the sample", () =>
    Effect.gen(function* () {
      const dir = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-issue-")), "r")
      const settings = toySettings(dir, { steps: 1, groups: 4, groupSize: 8, microBatch: 3 })
      const error = yield* Runner.run(settings, vowels).pipe(Effect.provide(textOnly(dir)), quiet, Effect.flip)
      assert.strictEqual(error.reason, "Backend")
      assert.include(error.message, "HTTP 400: data[0].lossFnInputs.logprobs")
      assert.match(error.message, /\(checked here: data\[0\]\.lossFnInputs\.logprobs\[\d+\] = 0\.5; a log-probability must be <= 0; datum 0 is sample \d+ of problem \S+\)$/)
    }))
})
