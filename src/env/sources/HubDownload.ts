/**
 * One file from the Hub to the cache: streamed to a `.part` file beside its place (never
 * held in memory), renamed into place once complete, with a progress line at every tenth
 * of the file (or every 64 MB when the size is not known). The token travels in the
 * request's headers only; it is never logged.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import { Effect } from "effect"
import { SourceError } from "./RowTable.ts"

const MB = 1024 * 1024
const megabytes = (n: number) => `${(n / MB).toFixed(1)} MB`

/** @since 0.1.0 @category models */
export interface Download {
  readonly url: string
  readonly to: string
  readonly headers: Record<string, string>
  /** what the progress lines call the file */
  readonly what: string
  readonly origin: string
}

/**
 * Downloads `url` to `to`; the bytes written.
 * @since 0.1.0 @category constructors
 */
export const download: (d: Download) => Effect.Effect<number, SourceError> = Effect.fn("Env.huggingface.download")(
  function*(d: Download) {
    const fail = (message: string) => new SourceError({ origin: d.origin, reason: "Download", message })
    const response = yield* Effect.tryPromise({
      try: () => globalThis.fetch(d.url, { headers: d.headers, redirect: "follow" }),
      catch: (e) => fail(`${d.url}: ${(e as Error).message}; check the network, or set HF_HUB_OFFLINE=1 to use the cache or the env's fixture`),
    })
    if (!response.ok || response.body === null) {
      return yield* fail(`${d.url}: HTTP ${response.status}${response.status === 401 || response.status === 403 ? "; set HF_TOKEN to a token that may read this dataset" : "; try again later"}`)
    }
    const total = Number(response.headers.get("content-length") ?? NaN)
    const part = `${d.to}.${process.pid}.part`
    const fd = yield* Effect.try({ try: () => Fs.openSync(part, "w"), catch: (e) => fail(`${part}: ${(e as Error).message}; check that GYRE_CACHE is writable`) })
    const reader = response.body.getReader()
    let written = 0
    let reported = 0
    const step = Number.isFinite(total) && total > 0 ? total / 10 : 64 * MB
    yield* Effect.logInfo(`downloading ${d.what}${Number.isFinite(total) ? ` (${megabytes(total)})` : ""}`)
    const copy = Effect.gen(function*() {
      for (;;) {
        const chunk = yield* Effect.tryPromise({ try: () => reader.read(), catch: (e) => fail(`${d.url}: the download broke off after ${megabytes(written)} (${(e as Error).message}); run again to restart it`) })
        if (chunk.done) break
        Fs.writeSync(fd, chunk.value)
        written += chunk.value.byteLength
        if (written - reported >= step) {
          reported = written
          yield* Effect.logInfo(`${d.what}: ${megabytes(written)}${Number.isFinite(total) ? ` of ${megabytes(total)} (${Math.round((100 * written) / total)}%)` : ""}`)
        }
      }
      if (Number.isFinite(total) && written !== total) return yield* fail(`${d.url}: got ${written} bytes of ${total}; run again to restart the download`)
      yield* Effect.sync(() => Fs.renameSync(part, d.to))
      return written
    })
    return yield* copy.pipe(
      Effect.ensuring(Effect.sync(() => Fs.closeSync(fd))),
      Effect.tapError(() => Effect.sync(() => Fs.rmSync(part, { force: true }))),
      Effect.onInterrupt(() => Effect.sync(() => Fs.rmSync(part, { force: true }))),
    )
  },
)
