/**
 * A simulated clock-cycle trainer, for measuring how a client submits work (`serve
 * --clock-cycle <ms>`). A pooled trainer such as Tinker's runs in cycles: at the start
 * of each cycle it runs the training operations every model has queued, in `seq_id`
 * order; an operation that arrives after a cycle has started waits for the next one. A
 * client that awaits each call before sending the next pays a cycle per call; one that
 * submits `forward_backward`, `optim_step` and `save_weights_for_sampler` back to back
 * gets all three in one cycle.
 *
 * Here, a cycle starts every `cycleMillis` (later when the previous cycle's work overran
 * it). At its start, each model's queued operations that arrived before it are taken in
 * `seq_id` order, from the model's next turn, up to the first one missing or not yet
 * arrived (a gap waits: the turn order of `SeqOrder.ts` is never broken); the cycle ends
 * when they have all run. The clock counts cycles and, per model, the cycles in which
 * it had work: `GET /api/v1/clock` reports them.
 *
 * @since 0.1.0
 */
import { Deferred, Effect, type Scope } from "effect"
import type { BackendError } from "../../../contract/Contract.ts"
import type { Turns } from "./SeqOrder.ts"

/** One model's counts. @since 0.1.0 @category models */
export interface ModelCycles {
  /** cycles in which the model had at least one operation */
  readonly busy_cycles: number
  /** operations run */
  readonly operations: number
}

/** What `GET /api/v1/clock` answers. @since 0.1.0 @category models */
export interface ClockReport {
  readonly cycle_ms: number
  /** cycles started since the server started */
  readonly cycles: number
  /** cycles in which any model had work */
  readonly busy_cycles: number
  /** cycles whose work took longer than a cycle (the next started late) */
  readonly overran: number
  readonly models: Record<string, ModelCycles>
}

/** @since 0.1.0 @category models */
export interface Clock {
  /** runs `work` (the operation of `model`'s `seq`) in the first cycle that starts after now and reaches its turn */
  readonly gate: <A>(model: Turns & { readonly id: string }, seq: number, work: Effect.Effect<A, BackendError>) => Effect.Effect<A, BackendError>
  readonly report: () => ClockReport
}

interface Queued {
  /** the number of cycles started when it arrived: it may run in any later one */
  readonly arrived: number
  readonly go: Deferred.Deferred<void>
  readonly done: Deferred.Deferred<void>
}

interface ModelQueue {
  readonly turns: Turns
  readonly queued: Map<number, Queued>
  busy: number
  operations: number
}

/** The operations of `q` a cycle numbered `cycle` runs: consecutive turns from the next one, each arrived before the cycle. */
const runnable = (q: ModelQueue, cycle: number): Array<Queued> => {
  const taken: Array<Queued> = []
  for (let seq = q.turns.nextSeq; ; seq++) {
    // a refused call's turn passes when reached (SeqOrder.forfeit)
    if (q.turns.skipped.has(seq)) continue
    const op = q.queued.get(seq)
    if (op === undefined || op.arrived >= cycle) return taken
    q.queued.delete(seq)
    taken.push(op)
  }
}

/**
 * Starts the clock in `scope` (it stops with it).
 * @since 0.1.0 @category constructors
 */
export const make = Effect.fnUntraced(function* (options: { readonly cycleMillis: number; readonly scope: Scope.Scope }) {
  const cycleMillis = Math.max(1, options.cycleMillis)
  const queues = new Map<string, ModelQueue>()
  const counts = { cycles: 0, busy: 0, overran: 0 }

  const now = Effect.clockWith((c) => c.currentTimeMillis).pipe(Effect.map(Number))
  const cycle = Effect.gen(function* () {
    const started = yield* now
    counts.cycles++
    const taken: Array<Queued> = []
    for (const q of queues.values()) {
      const ops = runnable(q, counts.cycles)
      if (ops.length === 0) continue
      q.busy++
      q.operations += ops.length
      taken.push(...ops)
    }
    if (taken.length > 0) counts.busy++
    for (const op of taken) yield* Deferred.succeed(op.go, undefined)
    for (const op of taken) yield* Deferred.await(op.done)
    const elapsed = (yield* now) - started
    if (elapsed > cycleMillis) counts.overran++
    yield* Effect.sleep(Math.max(0, cycleMillis - elapsed))
  })
  yield* Effect.forkIn(Effect.forever(cycle), options.scope)

  const gate = <A>(model: Turns & { readonly id: string }, seq: number, work: Effect.Effect<A, BackendError>) =>
    Effect.gen(function* () {
      let q = queues.get(model.id)
      if (q === undefined) {
        q = { turns: model, queued: new Map(), busy: 0, operations: 0 }
        queues.set(model.id, q)
      }
      const op: Queued = { arrived: counts.cycles, go: yield* Deferred.make<void>(), done: yield* Deferred.make<void>() }
      q.queued.set(seq, op)
      const queue = q
      // done is set however the operation ends, so the cycle that released it never waits forever
      return yield* Deferred.await(op.go).pipe(
        Effect.onInterrupt(() => Effect.sync(() => queue.queued.delete(seq))),
        Effect.andThen(work),
        Effect.ensuring(Deferred.succeed(op.done, undefined)),
      )
    })

  const report = (): ClockReport => ({
    cycle_ms: cycleMillis,
    cycles: counts.cycles,
    busy_cycles: counts.busy,
    overran: counts.overran,
    models: Object.fromEntries([...queues].map(([id, q]) => [id, { busy_cycles: q.busy, operations: q.operations }])),
  })
  return { gate, report } satisfies Clock
})
