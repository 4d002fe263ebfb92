/**
 * Training calls of a model run strictly in `seq_id` order (1, 2, ...): a call waits
 * (up to `turnTimeout`) for the calls with smaller ids; a reused `seq_id` gets 400.
 *
 * A call the server refuses for good (a 4xx the client does not retry: a Datum that
 * fails validation, a bad checkpoint name) still consumes its `seq_id` (`forfeit`): its
 * turn passes as if it had run. The official SDK numbers its calls `request_id + 1`
 * whatever became of the previous one, so the next call never waits for a number that
 * will not come. A refusal the client retries (408, 409, 410, 429, 5xx) consumes
 * nothing: the retry brings the same `seq_id`.
 *
 * @since 0.1.0
 */
import { Deferred, Duration, Effect, Option } from "effect"
import { BackendError } from "../../../contract/Contract.ts"
import { bad } from "./Requests.ts"

/** The ordering state of one model. @since 0.1.0 @category models */
export interface Turns {
  nextSeq: number
  readonly pending: Set<number>
  readonly turns: Map<number, Deferred.Deferred<void>>
  /** seq ids of refused calls, above `nextSeq`: their turns pass when reached */
  readonly skipped: Set<number>
}

/** @since 0.1.0 @category constructors */
export const makeTurns = (): Turns => ({ nextSeq: 1, pending: new Set(), turns: new Map(), skipped: new Set() })

const used = (model: Turns, seq: number) => seq < model.nextSeq || model.pending.has(seq) || model.skipped.has(seq)

/** The smallest seq id no request has used yet (past every one in flight). */
const nextFree = (model: Turns) => Math.max(model.nextSeq - 1, ...model.pending, ...model.skipped) + 1

/** Reserves `seq` for a request, or 400 when it was already used. @since 0.1.0 @category combinators */
export const claim = (model: Turns, seq: number, field: string) =>
  Effect.suspend(() => {
    if (used(model, seq)) {
      return Effect.fail(bad(`${field} ${seq} was already used by another request of this model (next free: ${nextFree(model)})`))
    }
    model.pending.add(seq)
    return Effect.void
  })

/** `seq` is done: the next turn that is not a refused call's may run. */
const advance = (model: Turns, seq: number) =>
  Effect.suspend(() => {
    model.nextSeq = seq + 1
    while (model.skipped.delete(model.nextSeq)) model.nextSeq++
    const next = model.turns.get(model.nextSeq)
    return next === undefined ? Effect.void : Deferred.succeed(next, undefined)
  })

/**
 * Consumes the `seq_id` of a call that was refused for good, unless it is already
 * used: its turn passes at once, or when the calls before it are done.
 * @since 0.1.0 @category combinators
 */
export const forfeit = (model: Turns, seq: number) =>
  Effect.suspend(() => {
    if (used(model, seq)) return Effect.void
    if (seq === model.nextSeq) return Effect.asVoid(advance(model, seq))
    model.skipped.add(seq)
    return Effect.void
  })

/** Runs `work` once every smaller seq id of the model has run. @since 0.1.0 @category combinators */
export const inTurn = <A>(model: Turns, seq: number, work: Effect.Effect<A, BackendError>, turnTimeout: Duration.Input) =>
  Effect.gen(function* () {
    if (model.nextSeq !== seq) {
      let turn = model.turns.get(seq)
      if (turn === undefined) {
        turn = yield* Deferred.make<void>()
        model.turns.set(seq, turn)
      }
      const waited = yield* Deferred.await(turn).pipe(Effect.timeoutOption(turnTimeout))
      if (Option.isNone(waited)) {
        return yield* new BackendError({
          reason: "Timeout",
          operation: "seq_id",
          message: `seq_id ${seq} waited ${Duration.format(Duration.fromInputUnsafe(turnTimeout))} for seq_id ${model.nextSeq}, which never arrived`,
        })
      }
    }
    return yield* work.pipe(
      Effect.ensuring(
        Effect.suspend(() => {
          model.pending.delete(seq)
          model.turns.delete(seq)
          return Effect.asVoid(advance(model, seq))
        }),
      ),
    )
  })
