/**
 * The stdio transport of an MCP client: the server is a child process in a process group
 * of its own, spoken to over its stdin and stdout (one JSON-RPC message a line).
 *
 * Closing ends stdin, then signals the whole group (SIGTERM, then SIGKILL), so a server
 * started through a wrapper (`npx`, `tsx`, a shell script) leaves no process behind. The
 * end of the server's stderr is kept for error messages. The process group also keeps a
 * Ctrl-C at the terminal from reaching the server before gyre closes it in order.
 *
 * @since 0.1.0
 */
import { type ChildProcess, spawn } from "node:child_process"
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js"
import { ReadBuffer, serializeMessage } from "@modelcontextprotocol/sdk/shared/stdio.js"
import { getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js"
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js"
import type { Stdio } from "./Server.ts"

const STDERR_KEPT = 4096

/** How the process ended. @since 0.1.0 @category models */
export interface Exited {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
}

const signalGroup = (pid: number, signal: NodeJS.Signals | 0): boolean => {
  try {
    process.kill(-pid, signal)
    return true
  } catch {
    return false
  }
}

/** Whether any process of the group led by `pid` is still there. @since 0.1.0 @category predicates */
export const groupAlive = (pid: number): boolean => signalGroup(pid, 0)

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref())

/** @since 0.1.0 @category models */
export class StdioTransport implements Transport {
  onclose?: () => void
  onerror?: (error: Error) => void
  onmessage?: <T extends JSONRPCMessage>(message: T) => void
  private child: ChildProcess | undefined
  private readonly buffer = new ReadBuffer()
  private stderrText = ""
  private exitInfo: Exited | undefined
  private readonly exited: Promise<Exited>
  private resolveExited!: (e: Exited) => void

  constructor(readonly spec: Stdio) {
    this.exited = new Promise((resolve) => (this.resolveExited = resolve))
  }

  /** the server's process id, once started */
  get pid(): number | undefined {
    return this.child?.pid
  }

  /** the end of what the server wrote to stderr */
  get stderr(): string {
    return this.stderrText
  }

  /** how the process ended, if it has */
  get exit(): Exited | undefined {
    return this.exitInfo
  }

  /** resolves when the process has ended and its output is read, or after `ms` */
  waitExit(ms: number): Promise<Exited | undefined> {
    return Promise.race([this.exited, sleep(ms).then(() => undefined)])
  }

  start(): Promise<void> {
    return new Promise((resolve, reject) => {
      const child = spawn(this.spec.command, [...this.spec.args], {
        env: { ...getDefaultEnvironment(), ...this.spec.env },
        stdio: ["pipe", "pipe", "pipe"],
        detached: true,
        ...(this.spec.cwd !== undefined ? { cwd: this.spec.cwd } : {}),
      })
      this.child = child
      child.once("error", (error) => {
        reject(error)
        this.onerror?.(error)
      })
      child.once("spawn", () => resolve())
      child.once("close", (code, signal) => {
        this.exitInfo = { code, signal }
        this.resolveExited(this.exitInfo)
        this.onclose?.()
      })
      child.stdin?.on("error", (error) => this.onerror?.(error))
      child.stdout?.on("data", (chunk: Buffer) => {
        this.buffer.append(chunk)
        for (;;) {
          let message: JSONRPCMessage | null
          try {
            message = this.buffer.readMessage()
          } catch (error) {
            this.onerror?.(error instanceof Error ? error : new Error(String(error)))
            continue
          }
          if (message === null) break
          this.onmessage?.(message)
        }
      })
      child.stderr?.on("data", (chunk: Buffer) => {
        this.stderrText = (this.stderrText + chunk.toString("utf8")).slice(-STDERR_KEPT)
      })
    })
  }

  send(message: JSONRPCMessage): Promise<void> {
    const stdin = this.child?.stdin
    if (stdin === undefined || stdin === null || !stdin.writable) return Promise.reject(new Error("the server's stdin is closed"))
    return new Promise((resolve, reject) => {
      stdin.write(serializeMessage(message), (error) => (error ? reject(error) : resolve()))
    })
  }

  /** Ends stdin, waits up to `grace` ms, then SIGTERM to the group, then SIGKILL: no process of the group is left. */
  async close(grace = 1000): Promise<void> {
    const child = this.child
    if (child === undefined || child.pid === undefined) return
    const pid = child.pid
    if (this.exitInfo === undefined) {
      child.stdin?.end()
      await this.waitExit(grace)
    }
    if (groupAlive(pid)) {
      signalGroup(pid, "SIGTERM")
      for (let i = 0; i < 20 && groupAlive(pid); i++) await sleep(50)
      if (groupAlive(pid)) signalGroup(pid, "SIGKILL")
      for (let i = 0; i < 40 && groupAlive(pid); i++) await sleep(25)
    }
    await this.waitExit(1000)
    this.buffer.clear()
  }
}
