/**
 * Training calls of a model run strictly in `seq_id` order (1, 2, ...): a call waits
 * (up to `turnTimeout`) for the calls with smaller ids; a reused `seq_id` gets 400.
 *
 * @since 0.1.0
 */
import { Deferred, Duration, Effect, Option } from "effect"
import { BackendError } from "../../Contract.ts"
import { bad } from "./Requests.ts"

/** The ordering state of one model. @since 0.1.0 @category models */
export interface Turns {
  nextSeq: number
  readonly pending: Set<number>
  readonly turns: Map<number, Deferred.Deferred<void>>
}

/** @since 0.1.0 @category constructors */
export const makeTurns = (): Turns => ({ nextSeq: 1, pending: new Set(), turns: new Map() })

/** Reserves `seq` for a request, or 400 when it was already used. @since 0.1.0 @category combinators */
export const claim = (model: Turns, seq: number, field: string) =>
  Effect.suspend(() => {
    if (seq < model.nextSeq || model.pending.has(seq)) {
      return Effect.fail(bad(`${field} ${seq} was already used by another request of this model (next free: ${Math.max(model.nextSeq, ...model.pending) + 1})`))
    }
    model.pending.add(seq)
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
          model.nextSeq = seq + 1
          const next = model.turns.get(seq + 1)
          return next === undefined ? Effect.void : Deferred.succeed(next, undefined)
        }),
      ),
    )
  })
