/**
 * Helpers for the MCP tests: the fixture server as a stdio spec or as an HTTP process,
 * and a check that a process is gone.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as Path from "node:path"
import { Server } from "gyre/mcp"

export const ROOT = Path.resolve(import.meta.dirname, "../..")
export const FIXTURE = Path.join(ROOT, "test/mcp/fixtures/server.ts")
export const INVENTORY = Path.join(ROOT, "envs/mcp/inventory-server.ts")

/** The fixture server over stdio, with extra environment variables. */
export const fixture = (env: Record<string, string> = {}) => Server.stdio({ command: process.execPath, args: ["--import", "tsx", FIXTURE], env, cwd: ROOT })

/** Whether a process with this id exists. */
export const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** Waits up to `ms` for the process to be gone; true when it is. */
export const gone = async (pid: number, ms = 5000): Promise<boolean> => {
  const deadline = Date.now() + ms
  while (alive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25))
  return !alive(pid)
}

/** Starts a server file with `--http <port>` in a process group of its own; resolves with its URL. */
export const startHttp = (file: string, port = 0): Promise<{ readonly child: ChildProcess; readonly url: string }> =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", file, "--http", String(port)], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"], detached: true })
    let out = ""
    let err = ""
    child.stdout!.on("data", (d) => {
      out += d
      const line = out.split("\n").find((l) => l.startsWith("http://"))
      if (line !== undefined) resolve({ child, url: line.trim() })
    })
    child.stderr!.on("data", (d) => (err += d))
    child.once("exit", (code) => reject(new Error(`the HTTP server exited with ${code}: ${err}`)))
  })

/** Kills a process group started by `startHttp` and waits for its leader to end. */
export const stopHttp = async (child: ChildProcess) => {
  if (child.exitCode === null && child.signalCode === null) {
    const done = new Promise((r) => child.once("exit", r))
    process.kill(-child.pid!, "SIGKILL")
    await done
  }
}
