/**
 * A fake of the Hugging Face Hub's dataset routes on loopback, for tests: a test double
 * written from the Hub's public HTTP API documentation, serving only what gyre reads:
 *
 * - `GET /api/datasets/{repo}/parquet`: `{ config: { split: [url, ...] } }`
 * - `GET /api/datasets/{repo}/parquet/{config}/{split}`: `[url, ...]`, each url
 *   `/api/datasets/{repo}/parquet/{config}/{split}/{n}.parquet`, which redirects (302) to
 *   the file on the `refs/convert/parquet` branch
 * - `GET /api/datasets/{repo}/tree/{revision}/{path}`: `[{ type, oid, size, path }, ...]`
 * - `GET` (or `HEAD`) `/datasets/{repo}/resolve/{revision}/{path}`: the file's bytes, with
 *   its ETag (a hash of its content)
 *
 * A gated dataset answers 401 without `Authorization: Bearer {token}`; unknown routes 404.
 * It records every request's method, path and Authorization header.
 */
import { createHash } from "node:crypto"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"

/** Files of a repo by revision, then path (`{config}/{split}/{name}.parquet`). */
export interface FakeDataset {
  files: Record<string, Record<string, Buffer>>
  /** the token a gated dataset wants */
  readonly token?: string
}

export interface FakeHub {
  readonly endpoint: string
  readonly requests: Array<{ readonly method: string; readonly path: string; readonly authorization: string | undefined }>
  readonly close: () => Promise<void>
}

const CONVERTED = "refs/convert/parquet"

export const startFakeHub = async (datasets: Record<string, FakeDataset>): Promise<FakeHub> => {
  const requests: Array<{ method: string; path: string; authorization: string | undefined }> = []
  let endpoint = ""
  const json = (res: Http.ServerResponse, body: unknown, status = 200) => {
    res.writeHead(status, { "content-type": "application/json" })
    res.end(JSON.stringify(body))
  }
  const server = Http.createServer((req, res) => {
    // matched before decoding: a revision may hold an encoded "/" (refs%2Fconvert%2Fparquet)
    const path = new URL(req.url ?? "/", "http://hub").pathname
    requests.push({ method: req.method ?? "GET", path: decodeURIComponent(path), authorization: req.headers.authorization })
    const match = path.match(/^\/(api\/)?datasets\/([^/]+\/[^/]+)\/(.*)$/)
    const dataset = match ? datasets[match[2]!] : undefined
    if (!match || !dataset) return json(res, { error: "Repository not found" }, 404)
    if (dataset.token !== undefined && req.headers.authorization !== `Bearer ${dataset.token}`) return json(res, { error: "Access to this dataset is restricted" }, 401)
    const [, api, repo, rest] = match as unknown as [string, string | undefined, string, string]
    const converted = dataset.files[CONVERTED] ?? {}
    const parquetUrl = (config: string, split: string, n: number) => `${endpoint}/api/datasets/${repo}/parquet/${config}/${split}/${n}.parquet`
    const splitFiles = (config: string, split: string) => Object.keys(converted).filter((p) => p.startsWith(`${config}/${split}/`)).sort()
    if (api && rest === "parquet") {
      const listing: Record<string, Record<string, Array<string>>> = {}
      for (const p of Object.keys(converted)) {
        const [config, split] = p.split("/") as [string, string]
        ;((listing[config] ??= {})[split] ??= []).push(parquetUrl(config, split, splitFiles(config, split).indexOf(p)))
      }
      return json(res, listing)
    }
    const listed = api ? rest.match(/^parquet\/([^/]+)\/([^/]+)(?:\/(\d+)\.parquet)?$/) : null
    if (listed) {
      const [, config, split, n] = listed as unknown as [string, string, string, string | undefined]
      const files = splitFiles(config, split)
      if (files.length === 0) return json(res, { error: "Not found" }, 404)
      if (n === undefined) return json(res, files.map((_, i) => parquetUrl(config, split, i)))
      res.writeHead(302, { location: `${endpoint}/datasets/${repo}/resolve/${encodeURIComponent(CONVERTED)}/${files[Number(n)]}` })
      return res.end()
    }
    const tree = api ? rest.match(/^tree\/([^/]+)\/(.*)$/) : null
    if (tree) {
      const [revision, folder] = [decodeURIComponent(tree[1]!), decodeURIComponent(tree[2]!)]
      const files = Object.entries(dataset.files[revision] ?? {}).filter(([p]) => p.startsWith(`${folder}/`))
      if (files.length === 0) return json(res, { error: "Not found" }, 404)
      return json(res, files.map(([p, data]) => ({ type: "file", oid: "0", size: data.length, path: p })))
    }
    const resolve = !api ? rest.match(/^resolve\/([^/]+)\/(.*)$/) : null
    const data = resolve ? dataset.files[decodeURIComponent(resolve[1]!)]?.[decodeURIComponent(resolve[2]!)] : undefined
    if (data === undefined) return json(res, { error: "Entry not found" }, 404)
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": String(data.length), etag: `"${createHash("sha256").update(data).digest("hex")}"` })
    res.end(req.method === "HEAD" ? undefined : data)
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return { endpoint, requests, close: () => new Promise((resolve) => server.close(() => resolve())) }
}
