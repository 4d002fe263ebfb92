/**
 * Serves an MCP server made by `makeServer` over stdio (the default) or, with
 * `--http <port>`, over streamable HTTP at `http://127.0.0.1:<port>/mcp` (stateless: each
 * request gets a server of its own). In HTTP mode the first line on stdout is the URL.
 * Over stdio the process ends when its stdin closes.
 */
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import type { Server } from "@modelcontextprotocol/sdk/server/index.js"
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js"
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"

const readBody = (req: Http.IncomingMessage): Promise<unknown> =>
  new Promise((resolve, reject) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      try {
        resolve(chunks.length === 0 ? undefined : JSON.parse(Buffer.concat(chunks).toString("utf8")))
      } catch (e) {
        reject(e)
      }
    })
    req.on("error", reject)
  })

const serveHttp = (makeServer: () => Server, port: number) => {
  const http = Http.createServer(async (req, res) => {
    if (!req.url?.startsWith("/mcp")) {
      res.writeHead(404).end()
      return
    }
    try {
      const server = makeServer()
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
      res.on("close", () => {
        void transport.close()
        void server.close()
      })
      await server.connect(transport)
      await transport.handleRequest(req, res, req.method === "POST" ? await readBody(req) : undefined)
    } catch (e) {
      if (!res.headersSent) res.writeHead(400, { "content-type": "application/json" }).end(JSON.stringify({ error: String(e) }))
    }
  })
  http.listen(port, "127.0.0.1", () => {
    process.stdout.write(`http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp\n`)
  })
  const stop = () => http.close(() => process.exit(0))
  process.on("SIGTERM", stop)
  process.on("SIGINT", stop)
}

/** Runs `makeServer` as this process's MCP server, per the command line. */
export const serve = async (makeServer: () => Server, argv: ReadonlyArray<string> = process.argv.slice(2)): Promise<void> => {
  const http = argv.indexOf("--http")
  if (http >= 0) return serveHttp(makeServer, Number(argv[http + 1] ?? 0))
  process.stdin.on("end", () => process.exit(0))
  await makeServer().connect(new StdioServerTransport())
}
