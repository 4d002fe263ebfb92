/**
 * The read-only REST routes of Tinker's `RestClient` (the official SDK's
 * `lib/public_interfaces/rest_client.py`), answered from the server's checkpoint index
 * (`CheckpointIndex.ts`, which outlives restarts) and its live models:
 *
 * - `GET training_runs?limit&offset`: every model this server trained or is training,
 *   newest activity first, with its last training and sampler checkpoint;
 * - `GET training_runs/{id}`: one of them;
 * - `GET training_runs/{id}/checkpoints`: a model's checkpoints, oldest first;
 * - `GET checkpoints?limit&offset`: every checkpoint, newest first;
 * - `POST weights_info` `{tinker_path}`: base model, LoRA rank and trained parts of a
 *   checkpoint (what `create_training_client_from_state` asks before it creates a model).
 *
 * A training run is a model id (`training_run_id` = `model_id`). Checkpoint ids are
 * `weights/<name>` or `sampler_weights/<name>`, as in the `tinker://` path.
 *
 * @since 0.1.0
 */
import { Effect, Option, Schema } from "effect"
import type { CheckpointIndex, Entry } from "./CheckpointIndex.ts"
import { bad, decodeOr400, notFound, type Reject } from "./Requests.ts"
import type { Handler } from "./TrainingRoutes.ts"

/** A live model as these routes show it. @since 0.1.0 @category models */
export interface LiveModel {
  readonly id: string
  readonly loraRank: number
}

/** @since 0.1.0 @category models */
export interface Context {
  readonly checkpoints: CheckpointIndex
  readonly modelName: string
  /** the models alive now */
  readonly liveModels: () => ReadonlyArray<LiveModel>
  /** epoch millis */
  readonly now: Effect.Effect<number>
}

const Paging = Schema.Struct({
  limit: Schema.optional(Schema.NumberFromString.check(Schema.isInt(), Schema.isBetween({ minimum: 1, maximum: 10_000 }))),
  offset: Schema.optional(Schema.NumberFromString.check(Schema.isInt(), Schema.isGreaterThanOrEqualTo(0))),
})
const WeightsInfoRequest = Schema.Struct({ tinker_path: Schema.String })

const checkpointOf = (e: Entry) => ({
  checkpoint_id: `${e.kind}/${e.name}`,
  checkpoint_type: e.kind === "weights" ? "training" : "sampler",
  time: e.created_at,
  tinker_path: e.tinker_path,
  ...(e.size_bytes !== undefined ? { size_bytes: e.size_bytes } : {}),
  public: false,
})

const page = <A>(items: ReadonlyArray<A>, query: typeof Paging.Type, defaultLimit: number) => {
  const offset = query.offset ?? 0
  const limit = query.limit ?? defaultLimit
  return { items: items.slice(offset, offset + limit), cursor: { offset, limit, total_count: items.length } }
}

/** Every model this server trained or is training, newest activity first, as `TrainingRun`s. */
const trainingRuns = (ctx: Context) =>
  Effect.gen(function* () {
    const nowIso = new Date(yield* ctx.now).toISOString()
    const byId = new Map<string, { id: string; rank: number; last: string; checkpoints: Array<Entry> }>()
    for (const e of ctx.checkpoints.list()) {
      const run = byId.get(e.model_id) ?? { id: e.model_id, rank: e.lora_rank, last: e.created_at, checkpoints: [] }
      run.checkpoints.push(e)
      if (e.created_at > run.last) run.last = e.created_at
      byId.set(e.model_id, run)
    }
    for (const m of ctx.liveModels()) {
      const run = byId.get(m.id) ?? { id: m.id, rank: m.loraRank, last: nowIso, checkpoints: [] }
      run.last = nowIso
      byId.set(m.id, run)
    }
    return [...byId.values()]
      .sort((a, b) => (a.last < b.last ? 1 : a.last > b.last ? -1 : 0))
      .map((r) => {
        const last = (kind: Entry["kind"]) => r.checkpoints.filter((e) => e.kind === kind).at(-1)
        const training = last("weights")
        const sampler = last("sampler_weights")
        return {
          training_run_id: r.id,
          base_model: ctx.modelName,
          model_owner: "gyre",
          is_lora: true,
          corrupted: false,
          lora_rank: r.rank,
          last_request_time: r.last,
          last_checkpoint: training === undefined ? null : checkpointOf(training),
          last_sampler_checkpoint: sampler === undefined ? null : checkpointOf(sampler),
          user_metadata: null,
        }
      })
  })

const getRun = (ctx: Context, id: string) =>
  Effect.flatMap(trainingRuns(ctx), (all) => {
    const run = all.find((r) => r.training_run_id === id)
    return run === undefined ? Effect.fail(notFound(`training run ${JSON.stringify(id.slice(0, 100))} is unknown to this server`)) : Effect.succeed(run)
  })

/** The GET routes that list, a page at a time (`limit`, `offset`). */
const listRoutes = (ctx: Context): ReadonlyArray<readonly [RegExp, (query: unknown) => Effect.Effect<unknown, Reject>]> => [
  [
    /^training_runs$/,
    (query) =>
      Effect.gen(function* () {
        const q = yield* decodeOr400(Paging, "query")(query)
        const p = page(yield* trainingRuns(ctx), q, 20)
        return { training_runs: p.items, cursor: p.cursor }
      }),
  ],
  [
    /^checkpoints$/,
    (query) =>
      Effect.gen(function* () {
        const q = yield* decodeOr400(Paging, "query")(query)
        const p = page([...ctx.checkpoints.list()].reverse().map(checkpointOf), q, 100)
        return { checkpoints: p.items, cursor: p.cursor }
      }),
  ],
]

/** The GET routes of one training run, whose id (percent-encoded) the pattern captures. */
const runRoutes = (ctx: Context): ReadonlyArray<readonly [RegExp, (id: string) => Effect.Effect<unknown, Reject>]> => [
  [/^training_runs\/([^/]+)$/, (id) => getRun(ctx, id)],
  [/^training_runs\/([^/]+)\/checkpoints$/, (id) => Effect.map(getRun(ctx, id), () => ({ checkpoints: ctx.checkpoints.list(id).map(checkpointOf) }))],
]

/** A route's answer, where a path that is not valid percent-encoding is a 400. */
const answer = (run: () => Effect.Effect<unknown, Reject>) =>
  Option.some(Effect.suspend(run).pipe(Effect.catchDefect(() => Effect.fail(bad("the path is not valid percent-encoding")))))

const weightsInfo =
  (ctx: Context): Handler =>
  (body) =>
    Effect.gen(function* () {
      const req = yield* decodeOr400(WeightsInfoRequest)(body)
      const e = ctx.checkpoints.get(req.tinker_path)
      if (e === undefined) return yield* notFound(`tinker_path ${JSON.stringify(req.tinker_path.slice(0, 200))} is not a checkpoint saved by this server`)
      return {
        base_model: e.base_model,
        is_lora: true,
        lora_rank: e.lora_rank,
        // adapters here never train the unembedding
        train_unembed: false,
        train_mlp: e.train_mlp ?? true,
        train_attn: e.train_attn ?? true,
      }
    })

/** The routes: `get(name, query)` answers the GET routes (none when it is not one of them), `post` the POST ones. @since 0.1.0 @category constructors */
export const make = (ctx: Context) => {
  const lists = listRoutes(ctx)
  const ofRun = runRoutes(ctx)

  /** A GET route of this module, or none. */
  const get = (name: string, query: Readonly<Record<string, string>>): Option.Option<Effect.Effect<unknown, Reject>> => {
    for (const [re, run] of lists) if (re.test(name)) return answer(() => run(query))
    for (const [re, run] of ofRun) {
      const id = re.exec(name)?.[1]
      if (id !== undefined) return answer(() => run(decodeURIComponent(id)))
    }
    return Option.none()
  }

  const post: Record<string, Handler> = { weights_info: weightsInfo(ctx) }
  return { get, post }
}
