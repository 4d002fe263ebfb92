/**
 * HTTP clients that run in a worker thread (test doubles of agents in their own process),
 * so that the server under test, on the test's thread, is reached as real clients reach
 * it: a burst of connections that all start at once, and a client that keeps its event
 * loop busy between two requests on one kept-alive connection.
 */
import { Worker } from "node:worker_threads"

/** What a burst got: how many answers of each status, and how many transport errors by code. */
export interface BurstOutcome {
  readonly statuses: Record<string, number>
  readonly errors: Record<string, number>
}

/** What the busy client got: each request's status or error, and whether the second reused the first's connection. */
export interface BusyGapOutcome {
  readonly first: string
  readonly second: string
  readonly reusedSocket: boolean
}

// plain node (CommonJS) run by the worker: `request` answers a status or an error code
const CLIENT = `
const http = require("node:http")
const { workerData, parentPort } = require("node:worker_threads")
const request = (url, { method = "GET", headers = {}, body, agent = false } = {}) =>
  new Promise((resolve) => {
    const req = http.request(url, { method, headers, agent }, (res) => {
      res.resume()
      res.on("end", () => resolve({ status: String(res.statusCode), reused: req.reusedSocket }))
    })
    req.on("error", (e) => resolve({ error: e.code ?? e.message, reused: req.reusedSocket }))
    req.end(body)
  })
const tasks = {
  async burst({ url, n, method, headers, bodies }) {
    const statuses = {}, errors = {}
    const all = Array.from({ length: n }, (_, i) => request(url, { method, headers: headers?.[i] ?? {}, body: bodies?.[i] }))
    for (const r of await Promise.all(all)) {
      if (r.error !== undefined) errors[r.error] = (errors[r.error] ?? 0) + 1
      else statuses[r.status] = (statuses[r.status] ?? 0) + 1
    }
    return { statuses, errors }
  },
  async busyGap({ url, gapMillis }) {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    const first = await request(url, { agent })
    // the event loop is busy: a close from the server is not seen before the next request is sent
    const until = Date.now() + gapMillis
    while (Date.now() < until) {}
    const second = await request(url, { agent })
    agent.destroy()
    return { first: first.status ?? first.error, second: second.status ?? second.error, reusedSocket: second.reused }
  },
}
tasks[workerData.task](workerData.args).then((r) => parentPort.postMessage(r))
`

const inWorker = <A>(task: string, args: unknown) =>
  new Promise<A>((resolve, reject) => {
    const worker = new Worker(CLIENT, { eval: true, workerData: { task, args } })
    worker.once("message", (m: A) => {
      resolve(m)
      void worker.terminate()
    })
    worker.once("error", reject)
  })

/** `n` requests to `url`, each on its own connection, all started at once. */
export const burst = (url: string, n: number, options: { readonly method?: string; readonly headers?: ReadonlyArray<Record<string, string>>; readonly bodies?: ReadonlyArray<string> } = {}) =>
  inWorker<BurstOutcome>("burst", { url, n, ...options })

/** Two requests on one kept-alive connection, the event loop busy for `gapMillis` between them. */
export const busyGap = (url: string, gapMillis: number) => inWorker<BusyGapOutcome>("busyGap", { url, gapMillis })
