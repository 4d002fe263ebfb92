/**
 * Retry rules of the HTTP client, as named policies and schedules.
 *
 * | answer | submission (POST that starts work) | `retrieve_future` poll |
 * |---|---|---|
 * | 200 `try_again` | - | poll again after `repollDelay` |
 * | 408, 5xx | back off | poll again after `repollDelay` |
 * | 409 | back off | fail |
 * | 429, no answer (connection error, timeout) | back off | back off |
 * | 410 | fail | resubmit the original request (same idempotency key) |
 * | 400 whose body is not a JSON object (a proxy's page, or empty) | back off, at most `maxBadRequests` times in a row | same |
 * | 400 with the server's JSON error | fail at once | back off, at most `maxBadRequests` times in a row |
 * | 402 (billing pause) | wait `billingRetryDelay`, for at most `maxBillingPause` | same |
 * | other 4xx | fail at once with the server's message | same |
 *
 * As the official SDK: `_base_client.py` (`_should_retry`) and `lib/retry_handler.py`
 * retry 408, 409, 429 and 5xx; `lib/api_future_impl.py` polls again at once on
 * `try_again`, 408 (whose body carries `queue_state`) and 5xx, raises on 410 so the
 * request is sent again, and retries a 400 on `retrieve_future` up to 3 times
 * (`_MAX_BAD_REQUEST_RETRIES`: "bare HTTP 400, which an upstream proxy may inject
 * spuriously"); `lib/internal_client_holder.py` retries a 400 without a body on any call
 * as a connection error (a request refused by Cloudflare), and waits out a 402 in 5 s
 * sleeps for up to the client config's `billing_exception_max_pause_duration_sec` (1 hour)
 * before it fails. gyre's server answers every refusal of its own with a JSON object, so a
 * 400 with any other body came from something on the way and never reached it.
 *
 * Backing off waits `Retry-After` (or `Retry-After-Ms`) when the server sends one,
 * clipped to `maxRetryAfter`, and otherwise `min(base * 2^k, cap)` shortened by up to
 * `jitter` (a random fraction). `k` counts consecutive back-offs; any real answer from
 * the server resets it. A call gives up once it has failed for `maxElapsed` without
 * progress (a `try_again` counts as progress, and so does a 402, whose pause is bounded
 * by `maxBillingPause` from the call's first 402; a sample pinned to a policy version is
 * bounded by the client's ready timeout instead).
 *
 * Failures no retry can fix stop at once: a request that cannot be sent (an API key
 * or header value with a line break or control character) is `Fatal`. A refused
 * connection or a host name that does not resolve before the server has ever answered
 * (`Unreachable`: nothing listens there, or the URL is wrong) is retried only for
 * `maxUnreachable` (15 s: a server still starting); once the server has answered, the
 * same failure is a `Transport` one (a server restarting) and gets `maxElapsed`.
 *
 * Each step of the schedules outputs the delay and the time the call gives up, so the
 * client can log every retry with what is retried and until when.
 *
 * @since 0.1.0
 */
import { Cause, Data, Duration, Effect, Random, Schedule } from "effect"
import type { DatumIssue } from "../../../contract/DatumIssue.ts"

/** What went wrong with one HTTP exchange, and so how to retry it. @since 0.1.0 @category models */
export type FailureKind =
  /** 200 `try_again` or `complete_metadata`: the future is not done */
  | "TryAgain"
  /** 408 */
  | "RequestTimeout"
  /** 5xx */
  | "ServerError"
  /** 429 */
  | "RateLimited"
  /** 409 */
  | "Conflict"
  /** no answer: the connection dropped or was reset, or the request timed out */
  | "Transport"
  /** nothing answered yet: connection refused, or the host name does not resolve */
  | "Unreachable"
  /** 410: the future expired or broke; resubmit */
  | "Expired"
  /** 400 whose body is not a JSON object: refused on the way (a proxy, a load balancer), not by the server */
  | "BareBadRequest"
  /** 402: the account's billing paused the job */
  | "BillingPaused"
  /** any other 4xx */
  | "Fatal"
  /** an answer that does not decode */
  | "Decode"

/**
 * One failed HTTP exchange. Internal to the client; it leaves the module as a
 * `BackendError`.
 * @since 0.1.0 @category errors
 */
export class HttpFailure extends Data.TaggedError("HttpFailure")<{
  readonly kind: FailureKind
  readonly message: string
  readonly status?: number | undefined
  /** the server's `Retry-After`, in milliseconds */
  readonly retryAfterMillis?: number | undefined
  /** the `queue_state` of a `try_again` or 408 body (`active`, `paused_capacity`, `paused_rate_limit`) */
  readonly queueState?: string | undefined
  /** the `queue_state_reason` that came with it */
  readonly queueStateReason?: string | undefined
  /** a refused datum's issue, when the server's error body names one */
  readonly issue?: DatumIssue | undefined
}> {}

/** @since 0.1.0 @category models */
export interface Policy {
  /** the first back-off delay */
  readonly base: Duration.Input
  /** the largest back-off delay (before jitter) */
  readonly cap: Duration.Input
  /** each back-off delay is shortened by a random fraction in [0, jitter) */
  readonly jitter: number
  /** give up after failing this long without progress */
  readonly maxElapsed: Duration.Input
  /** give up on a server that has never answered (refused, unresolvable) after this long */
  readonly maxUnreachable: Duration.Input
  /** wait before polling again after `try_again`, 408 or 5xx */
  readonly repollDelay: Duration.Input
  /** `Retry-After` values above this are clipped to it */
  readonly maxRetryAfter: Duration.Input
  /** how many times a request is resubmitted after 410 */
  readonly maxResubmits: number
  /** how many 400s in a row a call retries when they did not come from the server (and, on a poll, when they did) */
  readonly maxBadRequests: number
  /** the wait between tries while the server answers 402 (billing pause) */
  readonly billingRetryDelay: Duration.Input
  /** a call that has met only 402s for this long since its first one fails */
  readonly maxBillingPause: Duration.Input
}

/**
 * The Tinker SDK's defaults: exponential from 0.5 s doubling to 30 s with 25 % jitter,
 * for at most 5 minutes (15 s on a server that never answered); polls again at once;
 * `Retry-After` up to 60 s; 3 stray 400s in a row; a billing pause waited out in 5 s
 * steps for up to an hour.
 * @since 0.1.0 @category constants
 */
export const standard: Policy = {
  base: "500 millis",
  cap: "30 seconds",
  jitter: 0.25,
  maxElapsed: "5 minutes",
  maxUnreachable: "15 seconds",
  repollDelay: Duration.zero,
  maxRetryAfter: "60 seconds",
  maxResubmits: 3,
  maxBadRequests: 3,
  billingRetryDelay: "5 seconds",
  maxBillingPause: "1 hour",
}

/**
 * Short delays for tests and loopback servers: 5 ms doubling to 40 ms, `Retry-After`
 * clipped to 50 ms, giving up after 20 s (200 ms on a server that never answered); a
 * billing pause retried every 5 ms for up to 20 s.
 * @since 0.1.0 @category constants
 */
export const fast: Policy = {
  base: "5 millis",
  cap: "40 millis",
  jitter: 0.25,
  maxElapsed: "20 seconds",
  maxUnreachable: "200 millis",
  repollDelay: Duration.zero,
  maxRetryAfter: "50 millis",
  maxResubmits: 3,
  maxBadRequests: 3,
  billingRetryDelay: "5 millis",
  maxBillingPause: "20 seconds",
}

/** Which kinds a submission retries. @since 0.1.0 @category predicates */
export const isRetryableSubmission = (kind: FailureKind): boolean =>
  kind === "Transport" || kind === "Unreachable" || kind === "RateLimited" || kind === "ServerError" || kind === "RequestTimeout" ||
  kind === "Conflict" || kind === "BareBadRequest" || kind === "BillingPaused"

/** Which kinds a poll retries (410 is handled above the poll, by resubmitting). @since 0.1.0 @category predicates */
export const isRetryablePoll = (kind: FailureKind): boolean =>
  kind === "TryAgain" || kind === "Unreachable" || kind === "RequestTimeout" || kind === "ServerError" || kind === "RateLimited" ||
  kind === "Transport" || kind === "BareBadRequest" || kind === "BillingPaused"

/** A 400 the schedule retries a few times: one from something on the way, or any 400 answering a poll. */
const isBadRequest = (failure: HttpFailure, mode: "submission" | "poll"): boolean =>
  failure.kind === "BareBadRequest" || (mode === "poll" && failure.kind === "Fatal" && failure.status === 400)

/** Kinds answered by polling again without backing off. @since 0.1.0 @category predicates */
const isRepoll = (kind: FailureKind): boolean => kind === "TryAgain" || kind === "RequestTimeout" || kind === "ServerError"

/**
 * The HTTP status of an answer -> the failure kind (2xx is not a failure). A 400 and a
 * 402 are `Fatal` here, as for any HTTP service; the Tinker client's transport
 * (`Transport.failureOf`) makes a 400 whose body is not JSON `BareBadRequest` and a 402
 * `BillingPaused`, as the official SDK treats them.
 * @since 0.1.0 @category combinators
 */
export const kindOfStatus = (status: number): FailureKind | undefined => {
  if (status < 300) return undefined
  switch (status) {
    case 408:
      return "RequestTimeout"
    case 409:
      return "Conflict"
    case 410:
      return "Expired"
    case 429:
      return "RateLimited"
    default:
      return status >= 500 ? "ServerError" : "Fatal"
  }
}

/**
 * Reads `Retry-After-Ms` or `Retry-After` (seconds, or an HTTP date relative to
 * `now`) as milliseconds; undefined when absent, malformed or negative.
 * @since 0.1.0 @category combinators
 */
export const parseRetryAfter = (
  headers: Readonly<Record<string, string | undefined>>,
  now: number,
): number | undefined => {
  const ms = headers["retry-after-ms"]
  if (ms !== undefined && /^\s*\d+(\.\d+)?\s*$/.test(ms)) return Number(ms)
  const ra = headers["retry-after"]
  if (ra === undefined) return undefined
  if (/^\s*\d+(\.\d+)?\s*$/.test(ra)) return Number(ra) * 1000
  const date = Date.parse(ra)
  if (Number.isNaN(date)) return undefined
  return Math.max(0, date - now)
}

/** The back-off delay before jitter for the k-th consecutive back-off (k from 0). @since 0.1.0 @category combinators */
export const backoffMillis = (policy: Policy, k: number): number =>
  Math.min(Duration.toMillis(policy.base) * 2 ** Math.min(k, 52), Duration.toMillis(policy.cap))

/** One retry: how long it waits, and when the call gives up (clock millis) if failures go on. @since 0.1.0 @category models */
export interface Step {
  readonly delay: Duration.Duration
  readonly giveUpAt: number
}

const millisOf = (d: Duration.Input) => Duration.toMillis(Duration.fromInputUnsafe(d))

const makeSchedule = (policy: Policy, mode: "submission" | "poll") =>
  Schedule.fromStepWithMetadata(
    Effect.sync(() => {
      let backoffs = 0
      let failingSince: number | undefined = undefined
      /** the first 402 of this call: a billing pause is bounded on its own clock, never reset within the call */
      let billingSince: number | undefined = undefined
      let badRequests = 0
      const retryable = mode === "submission" ? isRetryableSubmission : isRetryablePoll
      return (meta: Schedule.InputMetadata<HttpFailure>) =>
        Effect.gen(function* () {
          const failure = meta.input
          const badRequest = isBadRequest(failure, mode)
          badRequests = badRequest ? badRequests + 1 : 0
          if (!retryable(failure.kind) && !badRequest) return yield* Cause.done({ delay: Duration.zero, giveUpAt: meta.now })
          if (badRequest && badRequests > policy.maxBadRequests) return yield* Cause.done({ delay: Duration.zero, giveUpAt: meta.now })
          if (failure.kind === "BillingPaused") {
            // an answer from the server: failures of other kinds start their count again after it
            failingSince = undefined
            backoffs = 0
            billingSince ??= meta.now
            const giveUpAt = billingSince + millisOf(policy.maxBillingPause)
            if (giveUpAt - meta.now <= 0) return yield* Cause.done({ delay: Duration.zero, giveUpAt })
            const d = Duration.millis(Math.max(0, Math.min(millisOf(policy.billingRetryDelay), giveUpAt - meta.now)))
            return [{ delay: d, giveUpAt }, d] as [Step, Duration.Duration]
          }
          if (failure.kind === "TryAgain") failingSince = undefined
          else failingSince ??= meta.now
          const since = failingSince ?? meta.now
          const giveUpAt = since + millisOf(failure.kind === "Unreachable" ? policy.maxUnreachable : policy.maxElapsed)
          const budget = giveUpAt - meta.now
          if (budget <= 0) return yield* Cause.done({ delay: Duration.zero, giveUpAt })
          let delay: number
          if (failure.retryAfterMillis !== undefined) {
            delay = Math.min(failure.retryAfterMillis, millisOf(policy.maxRetryAfter))
            backoffs = 0
          } else if (mode === "poll" && isRepoll(failure.kind)) {
            delay = millisOf(policy.repollDelay)
            backoffs = 0
          } else {
            const u = yield* Random.next
            delay = backoffMillis(policy, backoffs) * (1 - policy.jitter * u)
            backoffs++
          }
          const d = Duration.millis(Math.max(0, Math.min(delay, budget)))
          return [{ delay: d, giveUpAt }, d] as [Step, Duration.Duration]
        })
    }),
  )

/**
 * Retries of a submission POST: back off on no answer, 408, 409, 429, 5xx and a 400
 * that did not come from the server (a few in a row); wait out a 402; anything else
 * stops at once. Outputs the delay it waits.
 * @since 0.1.0 @category schedules
 */
export const submission = (policy: Policy = standard): Schedule.Schedule<Step, HttpFailure> =>
  makeSchedule(policy, "submission")

/**
 * Retries of a `retrieve_future` poll: poll again on `try_again`, 408 and 5xx;
 * back off on no answer, 429 and 400 (a few in a row); wait out a 402; anything else
 * (410 included) stops at once.
 * @since 0.1.0 @category schedules
 */
export const polling = (policy: Policy = standard): Schedule.Schedule<Step, HttpFailure> =>
  makeSchedule(policy, "poll")

/** The standard submission schedule. @since 0.1.0 @category schedules */
export const standardSubmission = submission(standard)
/** The standard polling schedule. @since 0.1.0 @category schedules */
export const standardPolling = polling(standard)

/** Fills a partial policy from `base`. @since 0.1.0 @category constructors */
export const policy = (overrides: Partial<Policy> = {}, base: Policy = standard): Policy => ({ ...base, ...overrides })
