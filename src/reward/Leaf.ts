/**
 * Running one leaf evaluation under its policies: permits (the leaf's own, then the
 * run's), timeout, abort signal, retries with backoff, and the mapping of typed failures
 * to outcomes.
 *
 * What a timeout (or an interruption) can stop depends on what the scorer returned:
 * - an Effect is interrupted;
 * - a Promise is abandoned: its `signal` is aborted, and the permits it holds stay
 *   taken until the Promise settles, so abandoned work still counts against every
 *   concurrency limit;
 * - a synchronous scorer cannot be stopped at all: it runs to completion, and its
 *   score is kept however long it took.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Exit, Schedule, Scope, Semaphore } from "effect"
import { InfraFault, isRewardFailure, RewardDefect, type RewardFailure } from "./Failures.ts"

// ===== Models =====

/**
 * What a scorer is given besides the rollout.
 * @since 0.1.0 @category models
 */
export interface ScoreContext {
  /**
   * Aborted when this evaluation is abandoned: it timed out or the run was
   * interrupted. Pass it to `fetch` (or check it) so abandoned work stops early.
   */
  readonly signal: AbortSignal
  /**
   * Records a text with this rollout's score (`Score.notes`, the `notes` of its row in
   * `rollouts.jsonl` and `eval.jsonl`, and the report): what a judge replied, what a
   * sandbox printed. Notes of every attempt are kept, in order.
   */
  readonly note: (text: string) => void
}

/**
 * Delays between retries: `base * factor^n` for the n-th retry (n from 0), at most
 * `max`, each scaled by a random factor in [0.8, 1.2] (jitter).
 * @since 0.1.0 @category models
 */
export interface Backoff {
  /** the first delay (default 200 millis) */
  readonly base?: Duration.Input
  /** growth per retry (default 2) */
  readonly factor?: number
  /** the largest delay before jitter (default 30 seconds) */
  readonly max?: Duration.Input
}

/** Options of a leaf. @since 0.1.0 @category models */
export interface LeafOptions {
  /** time limit per attempt; exceeding it is an `InfraFault` (see `Reward.make` for what it can stop) */
  readonly timeout?: Duration.Input
  /** retries after an `InfraFault` before the sample is masked */
  readonly retries?: number
  /** delays between retries (default: exponential from 200 millis, doubling, jittered) */
  readonly backoff?: Backoff
  /** at most this many evaluations of this leaf at once, abandoned ones included */
  readonly concurrency?: number
  /** cache results under this version; bump it when the scoring logic changes */
  readonly cacheVersion?: string
}

/**
 * Bounds the number of leaf evaluations in flight across a whole run (abandoned
 * Promise scorers included, until they settle). The runner provides one; without it,
 * leaves run with no global bound.
 * @since 0.1.0 @category services
 */
export const RewardPermits = Context.Reference<Semaphore.Semaphore | undefined>("gyre/RewardPermits", {
  defaultValue: () => undefined,
})

/**
 * @internal what a leaf gave one rollout: its score, why the sample is masked, the message
 * of its failure (an `InfraFault`, masked or not) and what its scorer noted
 */
export type LeafOutcome = {
  readonly value: number | undefined
  readonly masked: string | undefined
  readonly failed?: string | undefined
  readonly notes?: ReadonlyArray<string> | undefined
}

/** @internal what one leaf evaluation gave: a raw value to check, or an outcome of a typed failure; and what its scorer noted */
export type LeafResult =
  | { readonly _tag: "Value"; readonly value: unknown; readonly notes: ReadonlyArray<string> }
  | { readonly _tag: "Outcome"; readonly outcome: LeafOutcome }

// ===== Backoff =====

const DEFAULT_BASE = Duration.millis(200)
const DEFAULT_MAX = Duration.seconds(30)

/**
 * The retry schedule of a `Backoff`: exponential, capped, jittered.
 * @since 0.1.0 @category constructors
 */
export const backoffSchedule = (backoff: Backoff = {}): Schedule.Schedule<Duration.Duration> => {
  const factor = backoff.factor ?? 2
  if (!(Number.isFinite(factor) && factor >= 1)) throw new TypeError(`Reward.retry: backoff.factor must be a finite number >= 1, got ${factor}`)
  const base = Duration.fromInputUnsafe(backoff.base ?? DEFAULT_BASE)
  const max = Duration.fromInputUnsafe(backoff.max ?? DEFAULT_MAX)
  return Schedule.exponential(base, factor).pipe(
    Schedule.modifyDelay(({ duration }) => Effect.succeed(Duration.min(duration, max))),
    Schedule.jittered,
  )
}

// ===== Output checks =====

const clip = (s: string, n = 200) => (s.length > n ? `${s.slice(0, n)}...` : s)

/**
 * How a value a scorer returned is named in an error: `NaN`, `"12" (a string)`,
 * `{"score":1} (an object)`.
 * @internal
 */
export const describeValue = (u: unknown): string => {
  switch (typeof u) {
    case "number":
      return String(u)
    case "undefined":
      return "undefined"
    case "string":
      return `${clip(JSON.stringify(u))} (a string)`
    case "boolean":
      return `${u} (a boolean)`
    case "bigint":
      return `${u}n (a bigint)`
    case "symbol":
      return `${String(u)} (a symbol)`
    case "function":
      return "a function"
  }
  if (u === null) return "null"
  if (Effect.isEffect(u)) return "an Effect (nested in the result)"
  let text: string
  try {
    text = JSON.stringify(u) ?? String(u)
  } catch {
    text = String(u)
  }
  return `${clip(text)} (${Array.isArray(u) ? "an array" : "an object"})`
}

// ===== Running =====

const isPromiseLike = (u: unknown): u is PromiseLike<unknown> =>
  typeof u === "object" && u !== null && typeof (u as { then?: unknown }).then === "function"

const fromRejection = (e: unknown): Effect.Effect<never, RewardFailure> => (isRewardFailure(e) ? Effect.fail(e) : Effect.die(e))

/** Waits for a Promise; interrupting the wait leaves the Promise running. */
const awaitPromise = (p: PromiseLike<unknown>): Effect.Effect<unknown, RewardFailure> =>
  Effect.callback<unknown, RewardFailure>((resume) => {
    p.then((v) => resume(Effect.succeed(v)), (e) => resume(fromRejection(e)))
  })

const abandonedReason = () => new Error("the reward evaluation was abandoned (timeout or interruption)")

/** Completes when a Promise settles, whichever way. */
const settled = (p: PromiseLike<unknown>): Effect.Effect<void> =>
  Effect.callback<void>((resume) => {
    p.then(() => resume(Effect.void), () => resume(Effect.void))
  })

type Restore = <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>

/**
 * Takes one permit of each semaphore, in order, pushing onto `held` how to return it.
 * Runs uninterruptibly except while waiting (`restore`), so every permit taken is in
 * `held`, whatever interrupts the wait.
 */
const acquire = (permits: ReadonlyArray<Semaphore.Semaphore>, i: number, held: Array<Effect.Effect<unknown>>, restore: Restore): Effect.Effect<void> => {
  const s = permits[i]
  if (s === undefined) return Effect.void // past the last permit
  return Effect.flatMap(s.takeIfAvailable(1), (taken) => {
    if (taken) {
      held.push(s.release(1))
      return acquire(permits, i + 1, held, restore)
    }
    // wait in line; the scope records the permit the moment it is taken
    const scope = Scope.makeUnsafe()
    held.push(Scope.close(scope, Exit.void))
    return Effect.andThen(restore(Scope.provide(s.takeScoped(1), scope)), Effect.suspend(() => acquire(permits, i + 1, held, restore)))
  })
}

/**
 * One attempt: take the permits, call the scorer, and wait for its result under the
 * timeout (which counts from when the permits are held, not while waiting for them).
 *
 * On a timeout or an interruption the signal is aborted and the caller stops waiting.
 * An Effect is interrupted and its permits returned; a Promise's permits are handed to
 * a fiber that returns them when the Promise settles.
 */
const attempt = <R>(
  call: (context: ScoreContext) => unknown,
  permits: ReadonlyArray<Semaphore.Semaphore>,
  timeout: Duration.Input | undefined,
  note: (text: string) => void,
): Effect.Effect<unknown, RewardFailure, R> =>
  Effect.uninterruptibleMask((restore) => {
    let controller: AbortController | undefined
    let abandoned = false
    let handedOff = false
    const held: Array<Effect.Effect<unknown>> = []
    const context: ScoreContext = {
      get signal() {
        if (controller === undefined) {
          controller = new AbortController()
          if (abandoned) controller.abort(abandonedReason())
        }
        return controller.signal
      },
      note,
    }
    const releaseAll = Effect.suspend(() => Effect.forEach(held, (release) => release, { discard: true }))
    // Calls the scorer and, for a Promise, hands the permits to a fiber that returns
    // them when it settles: one uninterruptible step, so the permits always have an owner.
    const begin = Effect.uninterruptible(Effect.suspend((): Effect.Effect<Effect.Effect<unknown, RewardFailure, R>, RewardFailure> => {
      let out: unknown
      try {
        out = call(context)
      } catch (e) {
        return fromRejection(e)
      }
      if (Effect.isEffect(out)) return Effect.succeed(out as Effect.Effect<unknown, RewardFailure, R>)
      if (isPromiseLike(out)) {
        if (held.length === 0) return Effect.succeed(awaitPromise(out))
        handedOff = true
        return Effect.as(Effect.forkDetach(Effect.ensuring(settled(out), releaseAll)), awaitPromise(out))
      }
      return Effect.succeed(Effect.succeed(out))
    }))
    let scored: Effect.Effect<unknown, RewardFailure, R> = Effect.flatten(begin).pipe(
      Effect.onInterrupt(() =>
        Effect.sync(() => {
          abandoned = true
          controller?.abort(abandonedReason())
        })
      ),
    )
    if (timeout !== undefined) {
      scored = scored.pipe(
        Effect.timeoutOrElse({
          duration: timeout,
          orElse: () => Effect.fail(new InfraFault({ message: `timed out after ${Duration.format(Duration.fromInputUnsafe(timeout))}` })),
        }),
      )
    }
    return Effect.andThen(acquire(permits, 0, held, restore), restore(scored)).pipe(
      Effect.onExit(() => (handedOff ? Effect.void : releaseAll)),
    )
  })

const semaphores = new WeakMap<object, Semaphore.Semaphore>()

const leafSemaphore = (node: object, permits: number | undefined) => {
  if (permits === undefined) return undefined
  let s = semaphores.get(node)
  if (s === undefined) {
    s = Semaphore.makeUnsafe(permits)
    semaphores.set(node, s)
  }
  return s
}

const failureOutcome = (name: string, e: RewardFailure, notes: ReadonlyArray<string>): LeafResult => {
  const noted = notes.length > 0 ? { notes } : {}
  switch (e._tag) {
    case "NotApplicable":
      return { _tag: "Outcome", outcome: { value: undefined, masked: undefined, ...noted } }
    case "ModelFault":
      return { _tag: "Outcome", outcome: { value: e.penalty, masked: undefined, ...noted } }
    case "InfraFault":
      return { _tag: "Outcome", outcome: { value: undefined, masked: `${name}: ${e.message}`, failed: e.message, ...noted } }
  }
}

const isInfraFault = (e: RewardFailure) => e._tag === "InfraFault"

/**
 * Runs one leaf evaluation under its policies and maps typed failures to outcomes.
 * Anything thrown (or a rejection that is not a typed failure) is a `RewardDefect`
 * naming the leaf; a scorer that dies with a `RewardDefect` keeps its message.
 * @internal
 */
export const runLeaf = <R>(
  name: string,
  options: LeafOptions,
  node: object,
  call: (context: ScoreContext) => unknown,
): Effect.Effect<LeafResult, RewardDefect, R> =>
  Effect.flatMap(Effect.service(RewardPermits), (global) => {
    // The global permit is taken after the leaf's own one, so a leaf waiting for its
    // own permit never holds a global permit that other leaves could use.
    const own = leafSemaphore(node, options.concurrency)
    const permits = own === undefined ? (global === undefined ? [] : [global]) : global === undefined ? [own] : [own, global]
    const notes: Array<string> = []
    const note = (text: string) => {
      notes.push(String(text))
    }
    let once = attempt<R>(call, permits, options.timeout, note)
    if (options.retries !== undefined && options.retries > 0) {
      once = Effect.retry(once, { schedule: backoffSchedule(options.backoff), times: options.retries, while: isInfraFault })
    }
    return once.pipe(
      Effect.match({
        // a copy: an abandoned Promise may still note after this
        onSuccess: (value): LeafResult => ({ _tag: "Value", value, notes: [...notes] }),
        onFailure: (e) => failureOutcome(name, e, [...notes]),
      }),
      Effect.catchDefect((defect) =>
        Effect.fail(
          defect instanceof RewardDefect
            ? new RewardDefect({ reward: name, message: defect.message, ...(defect.cause !== undefined ? { cause: defect.cause } : {}) })
            : new RewardDefect({
              reward: name,
              // what to throw instead, since a plain throw stops the run
              message: `threw ${defect instanceof Error ? defect.message : String(defect)} (a reward that throws stops the run: ` +
                "throw Reward.InfraFault when its own infrastructure failed, to mask the sample, or Reward.ModelFault to score the policy's fault)",
              cause: defect,
            }),
        )
      ),
    )
  })
