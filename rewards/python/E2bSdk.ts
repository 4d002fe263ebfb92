/**
 * The part of E2B's JavaScript SDK (the `e2b` package, an optional peer of gyre) the E2B
 * backend uses, loaded only when that backend is chosen: a project without E2B never
 * needs the package. The types here are written for what gyre calls, so gyre's own type
 * declarations do not name the package either.
 *
 * @since 0.1.0
 */

/** The SDK's options of `Sandbox.create` that gyre sets. @internal */
export interface CreateOptions {
  readonly apiKey: string
  readonly domain?: string
  readonly apiUrl?: string
  readonly sandboxUrl?: string
  /** the sandbox's life, after which E2B kills it */
  readonly timeoutMs: number
  /** each control-plane or file request's own limit */
  readonly requestTimeoutMs: number
  readonly metadata?: Record<string, string>
  /** false: the sandbox reaches nothing outside it */
  readonly allowInternetAccess?: boolean
  readonly signal?: AbortSignal
}

/** How a command ended. @internal */
export interface CommandResult {
  readonly exitCode: number
  readonly error?: string | undefined
  readonly stdout: string
  readonly stderr: string
}

/** A command started in the background. @internal */
export interface CommandHandle {
  /** the result, or a `CommandExitError` (whose fields are a `CommandResult`) when it exited non-zero */
  readonly wait: () => Promise<CommandResult>
  readonly kill: () => Promise<boolean>
}

/** A running sandbox. @internal */
export interface SdkSandbox {
  readonly sandboxId: string
  readonly files: {
    readonly write: (files: Array<{ path: string; data: string }>, opts?: { requestTimeoutMs?: number; signal?: AbortSignal }) => Promise<unknown>
  }
  readonly commands: {
    readonly run: (
      cmd: string,
      opts: {
        background: true
        cwd?: string
        envs?: Record<string, string>
        timeoutMs?: number
        requestTimeoutMs?: number
        onStdout?: (data: string) => void
        onStderr?: (data: string) => void
      },
    ) => Promise<CommandHandle>
  }
  readonly kill: (opts?: { requestTimeoutMs?: number }) => Promise<boolean>
}

/** The SDK module, as gyre uses it. @internal */
export interface E2bSdk {
  readonly Sandbox: { readonly create: (template: string, opts: CreateOptions) => Promise<SdkSandbox> }
  readonly CommandExitError: abstract new (...args: never) => Error & CommandResult
}

/** The peer range gyre declares for `e2b` (package.json's `peerDependencies`). @internal */
export const e2bPeerRange = "^2.51.0"

/** The message for a project without the package. @internal */
export const missingE2b = `PythonSandbox: backend { e2b } needs the "e2b" package, an optional peer of gyre: npm install "e2b@${e2bPeerRange}"`

/** Whether an import failed because the package is not installed (Node's ERR_MODULE_NOT_FOUND naming it). @internal */
export const isMissing = (e: unknown): boolean => {
  const code = (e as { code?: unknown } | null)?.code
  return (code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND") && /Cannot find (package|module) 'e2b'/.test(e instanceof Error ? e.message : String(e))
}

/** Loads the SDK. @internal */
export const importE2b = async (): Promise<E2bSdk> => (await import("e2b")) as unknown as E2bSdk
