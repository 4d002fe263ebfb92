/**
 * Effect's `Terminal` service on `process.stdin` / `process.stdout` and `node:readline`
 * (`effect/cli` uses it for interactive prompts). Nothing reads stdin until a prompt
 * asks for input, so a command that never prompts leaves stdin alone and the process
 * can exit when its work is done.
 *
 * @since 0.1.0
 */
import * as Readline from "node:readline"
import { Cause, Effect, Layer, Option, PlatformError, Queue, Terminal } from "effect"

/** Escape, Ctrl-C and Ctrl-D end a prompt's input. */
const quits = (input: Terminal.UserInput) => input.key.name === "escape" || (input.key.ctrl && (input.key.name === "c" || input.key.name === "d"))

type Stdin = typeof process.stdin
type Stdout = typeof process.stdout

const sizeOf = (stdout: Stdout): Terminal.Size => ({ columns: stdout.columns ?? 0, rows: stdout.rows ?? 0 })

/** The keys pressed, in raw mode while the scope lasts; the queue ends on a quitting key or the end of stdin. */
const readInputFrom = (stdin: Stdin) =>
  Effect.gen(function* () {
    const queue = yield* Queue.make<Terminal.UserInput, Cause.Done>()
    const onKeypress = (input: string | undefined, key: { name?: string; ctrl?: boolean; meta?: boolean; shift?: boolean } | undefined) => {
      const userInput: Terminal.UserInput = {
        input: Option.fromUndefinedOr(input),
        key: { name: key?.name ?? "", ctrl: key?.ctrl === true, meta: key?.meta === true, shift: key?.shift === true },
      }
      Queue.offerUnsafe(queue, userInput)
      if (quits(userInput)) Queue.endUnsafe(queue)
    }
    const onEnd = () => Queue.endUnsafe(queue)
    yield* Effect.acquireRelease(
      Effect.sync(() => {
        Readline.emitKeypressEvents(stdin)
        if (stdin.isTTY) stdin.setRawMode(true)
        stdin.on("keypress", onKeypress)
        stdin.once("end", onEnd)
        stdin.resume()
      }),
      () =>
        Effect.sync(() => {
          stdin.off("keypress", onKeypress)
          stdin.off("end", onEnd)
          if (stdin.isTTY) stdin.setRawMode(false)
          stdin.pause()
          Queue.endUnsafe(queue)
        }),
    )
    return queue
  })

/** One line of stdin; a `QuitError` when stdin closes first. */
const readLineFrom = (stdin: Stdin) =>
  Effect.callback<string, Terminal.QuitError>((resume) => {
    const rl = Readline.createInterface({ input: stdin, terminal: false })
    let settled = false
    rl.once("line", (line) => {
      settled = true
      rl.close()
      resume(Effect.succeed(line))
    })
    rl.once("close", () => {
      if (!settled) resume(Effect.fail(new Terminal.QuitError({})))
    })
    return Effect.sync(() => {
      settled = true
      rl.close()
    })
  })

/** The terminal's size now and after each resize, while the scope lasts. */
const sizesOf = (stdout: Stdout) =>
  Effect.gen(function* () {
    const queue = yield* Queue.sliding<Terminal.Size, Cause.Done>(1)
    const onResize = () => Queue.offerUnsafe(queue, sizeOf(stdout))
    yield* Effect.acquireRelease(
      Effect.sync(() => {
        stdout.on("resize", onResize)
        onResize()
      }),
      () =>
        Effect.sync(() => {
          stdout.off("resize", onResize)
          Queue.endUnsafe(queue)
        }),
    )
    return queue
  })

/** Writes text to stdout, completing once it is written. */
const displayOn = (stdout: Stdout) => (text: string) =>
  Effect.callback<void, PlatformError.PlatformError>((resume) => {
    stdout.write(text, (error) =>
      resume(error == null ? Effect.void : Effect.fail(PlatformError.systemError({ _tag: "Unknown", module: "Terminal", method: "display", description: "could not write to stdout", cause: error }))),
    )
  })

/** The service. @since 0.1.0 @category constructors */
export const make = (): Terminal.Terminal => {
  const stdin = process.stdin
  const stdout = process.stdout
  return Terminal.make({
    columns: Effect.sync(() => sizeOf(stdout).columns),
    rows: Effect.sync(() => sizeOf(stdout).rows),
    size: sizesOf(stdout),
    readInput: readInputFrom(stdin),
    readLine: readLineFrom(stdin),
    display: displayOn(stdout),
  })
}

/** `Terminal` on the process's stdin and stdout. @since 0.1.0 @category layers */
export const layer: Layer.Layer<Terminal.Terminal> = Layer.sync(Terminal.Terminal, make)
