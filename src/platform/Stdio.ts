/**
 * Effect's `Stdio` service on the Node process: the command-line arguments (read when
 * asked, so a program may rewrite `process.argv` first), stdout, stderr and stdin.
 *
 * @since 0.1.0
 */
import type { Writable } from "node:stream"
import { Effect, Layer, PlatformError, Sink, Stdio, Stream } from "effect"

const failure = (method: string, cause: unknown) => PlatformError.systemError({ _tag: "Unknown", module: "Stdio", method, description: `could not use ${method}`, cause })

const write = (method: string, stream: Writable, chunk: string | Uint8Array) =>
  Effect.callback<void, PlatformError.PlatformError>((resume) => {
    stream.write(chunk, (error) => resume(error == null ? Effect.void : Effect.fail(failure(method, error))))
  })

const sinkTo = (method: string, stream: () => Writable, endOnDone: boolean): Sink.Sink<void, string | Uint8Array, never, PlatformError.PlatformError> => {
  const sink = Sink.forEach((chunk: string | Uint8Array) => write(method, stream(), chunk))
  return endOnDone ? Sink.ensuring(sink, Effect.sync(() => stream().end())) : sink
}

/** The service. @since 0.1.0 @category constructors */
export const make = (): Stdio.Stdio =>
  Stdio.make({
    args: Effect.sync(() => process.argv.slice(2)),
    stdinIsTerminal: Effect.sync(() => process.stdin.isTTY === true),
    stdoutIsTerminal: Effect.sync(() => process.stdout.isTTY === true),
    stderrIsTerminal: Effect.sync(() => process.stderr.isTTY === true),
    stdout: (options) => sinkTo("stdout", () => process.stdout, options?.endOnDone ?? false),
    stderr: (options) => sinkTo("stderr", () => process.stderr, options?.endOnDone ?? false),
    stdin: Stream.suspend(() =>
      Stream.fromAsyncIterable(process.stdin as AsyncIterable<Uint8Array>, (cause) => failure("stdin", cause)),
    ),
  })

/** `Stdio` on the Node process. @since 0.1.0 @category layers */
export const layer: Layer.Layer<Stdio.Stdio> = Layer.sync(Stdio.Stdio, make)
