/**
 * A test client that sends a large body slowly, in chunks with pauses, and sends a health
 * request once half of it is out: it tells which answer came first, so a test can say that
 * a server kept answering while it read (and checked) a large body, without timing it.
 */
import * as Http from "node:http"

/** What came back: each request's status and body, and the order the two answers finished in. */
export interface Race {
  readonly big: { readonly status: number; readonly text: string }
  readonly health: { readonly status: number; readonly text: string }
  readonly order: ReadonlyArray<"big" | "health">
}

const send = (url: string, init: { readonly method: string; readonly headers?: Record<string, string> }, write: (req: Http.ClientRequest) => void) =>
  new Promise<{ status: number; text: string }>((resolve, reject) => {
    const req = Http.request(url, { method: init.method, headers: init.headers ?? {}, agent: false }, (res) => {
      let text = ""
      res.setEncoding("utf8")
      res.on("data", (d) => (text += d))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text }))
    })
    req.on("error", reject)
    write(req)
  })

/** POSTs `body` to `url` in `chunks` pieces `pauseMillis` apart; halfway through, GETs `healthUrl`. */
export const raceHealth = async (
  url: string,
  body: Uint8Array,
  healthUrl: string,
  options: { readonly headers?: Record<string, string>; readonly chunks?: number; readonly pauseMillis?: number } = {},
): Promise<Race> => {
  const chunks = options.chunks ?? 20
  const step = Math.ceil(body.length / chunks)
  const order: Array<"big" | "health"> = []
  let health: Promise<{ status: number; text: string }> | undefined
  const big = send(url, { method: "POST", headers: { "content-type": "application/json", "content-length": String(body.length), ...options.headers } }, (req) => {
    let i = 0
    const next = () => {
      if (i * step >= body.length) return req.end()
      req.write(body.subarray(i * step, (i + 1) * step))
      i += 1
      if (i === Math.floor(chunks / 2)) health = send(healthUrl, { method: "GET" }, (r) => r.end()).then((h) => (order.push("health"), h))
      setTimeout(next, options.pauseMillis ?? 20)
    }
    next()
  }).then((b) => (order.push("big"), b))
  const bigDone = await big
  const healthDone = await (health ?? Promise.reject(new Error("the health request was never sent")))
  return { big: bigDone, health: healthDone, order }
}
