/**
 * A FAKE Sandbox Fusion server, for tests: not bytedance/SandboxFusion, but an HTTP
 * server written from its public API reference (sandbox/server/sandbox_api.py:
 * `POST /run_code` with a `RunCodeRequest`, answering a `RunCodeResponse`), so the
 * Python reward's service backend can be tested without Docker.
 *
 *   request:  { code, language, run_timeout?, memory_limit_MB?, stdin?, compile_timeout?, files?, fetch_files?, args? }
 *   response: { status: "Success" | "Failed" | "SandboxError", message, compile_result: null,
 *               run_result: { status: "Finished" | "Error" | "TimeLimitExceeded", execution_time, return_code, stdout, stderr },
 *               executor_pod_name: null, files: {} }
 *
 * A request that does not match `RunCodeRequest` gets FastAPI's 422. Code runs for real,
 * in gyre's embedded Python sandbox (Pyodide), as a script with the request's stdin;
 * its failures map to what a Python process would show (a non-zero return code and a
 * traceback line on stderr, `TimeLimitExceeded` for a program past its budget).
 *
 * `mode` simulates outages (a refused connection needs no fake: a closed port): `"error5xx"` (503),
 * `"hang"` (never answers), `"sandboxError"` (status SandboxError); `failFirst` makes the
 * first n requests 503 and the rest normal.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { Effect } from "effect"
import type { PythonSandboxShape } from "../../rewards/python.ts"

export type FakeMode = "normal" | "error5xx" | "hang" | "sandboxError"

export interface SandboxFusionFake {
  readonly url: string
  /** every request body received, decoded */
  readonly requests: Array<Record<string, unknown>>
  mode: FakeMode
  failFirst: number
  readonly close: () => Promise<void>
}

const readBody = (req: IncomingMessage) =>
  new Promise<string>((resolve) => {
    let body = ""
    req.on("data", (c: Buffer) => (body += c.toString("utf8")))
    req.on("end", () => resolve(body))
  })

/** The fields of RunCodeRequest, as its pydantic model checks them. */
const invalid = (b: Record<string, unknown>): string | undefined => {
  if (typeof b["code"] !== "string") return "code: field required (str)"
  if (typeof b["language"] !== "string") return "language: field required"
  if (b["run_timeout"] !== undefined && typeof b["run_timeout"] !== "number") return "run_timeout: value is not a valid float"
  if (b["memory_limit_MB"] !== undefined && !Number.isInteger(b["memory_limit_MB"])) return "memory_limit_MB: value is not a valid integer"
  if (b["stdin"] !== undefined && b["stdin"] !== null && typeof b["stdin"] !== "string") return "stdin: str type expected"
  return undefined
}

const runResult = (status: string, returnCode: number | null, stdout: string, stderr: string) => ({
  status: status === "Error" ? "SandboxError" : status === "Finished" && returnCode === 0 ? "Success" : "Failed",
  message: "",
  compile_result: null,
  run_result: { status, execution_time: 0.01, return_code: returnCode, stdout, stderr },
  executor_pod_name: null,
  files: {},
})

/** Runs the code in the embedded sandbox as a script, as the server's python runner would. */
const execute = (python: PythonSandboxShape, body: Record<string, unknown>) =>
  python.run({ source: body["code"] as string, stdin: [typeof body["stdin"] === "string" ? body["stdin"] : ""], limits: { work: 2_000_000 } }).pipe(
    Effect.map((ev) => runResult("Finished", 0, ev.outputs[0] ?? "", "")),
    Effect.catchTag("PythonProgramError", (e) => {
      if (e.reason === "Timeout") return Effect.succeed(runResult("TimeLimitExceeded", null, e.output, ""))
      const status = /exited with status (\d+)/.exec(e.message)
      const code = status !== null ? Number(status[1]) : e.reason === "Crashed" ? 139 : 1
      const stderr = e.reason === "OutOfMemory" ? "MemoryError" : `Traceback (most recent call last):\n  ...\n${e.message.replace(/^case 1: (threw )?/, "")}`
      return Effect.succeed(runResult("Finished", code, e.output, stderr))
    }),
    Effect.catchTag("PythonSandboxError", (e) => Effect.succeed({ ...runResult("Error", null, "", e.message), message: e.message })),
  )

/** Starts the fake on a free port of 127.0.0.1, running code in `python`. */
export const startSandboxFusionFake = async (python: PythonSandboxShape): Promise<SandboxFusionFake> => {
  const fake: SandboxFusionFake = { url: "", requests: [], mode: "normal", failFirst: 0, close: async () => {} }
  const hanging = new Set<ServerResponse>()
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" })
      res.end(JSON.stringify(body))
    }
    if (req.method !== "POST" || req.url !== "/run_code") return send(404, { detail: "Not Found" })
    const body = JSON.parse(await readBody(req)) as Record<string, unknown>
    fake.requests.push(body)
    if (fake.mode === "hang") return void hanging.add(res)
    if (fake.mode === "error5xx" || fake.failFirst > 0) {
      fake.failFirst = Math.max(0, fake.failFirst - 1)
      return send(503, { detail: "Service Unavailable" })
    }
    const problem = invalid(body)
    if (problem !== undefined) return send(422, { detail: [{ msg: problem }] })
    if (fake.mode === "sandboxError") return send(200, { ...runResult("Error", null, "", "container failed"), message: "container failed" })
    send(200, await Effect.runPromise(execute(python, body)))
  }
  const server: Server = createServer((req, res) => void handle(req, res))
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as { port: number }).port
  return Object.assign(fake, {
    url: `http://127.0.0.1:${port}`,
    close: () => {
      for (const res of hanging) res.destroy()
      return new Promise<void>((resolve) => server.close(() => resolve()))
    },
  })
}
