/**
 * One embedded Python sandbox for the Python reward's test files: loading Pyodide takes
 * seconds, and the files of a vitest worker share their modules, so they share this pool
 * too. Its workers do not keep the process alive; each file still starts from a fresh
 * interpreter state, as every evaluation does.
 */
import { Effect, Scope } from "effect"
import { type PythonSandbox, PythonSandbox as Tag } from "../../rewards/python.ts"
import { makeEmbedded } from "../../rewards/python/Embedded.ts"

export const sandbox = await Effect.runPromise(Scope.provide(makeEmbedded({ concurrency: 1 }), Scope.makeUnsafe()))

/** Runs an effect with the shared sandbox. */
export const withSandbox = <A, E>(effect: Effect.Effect<A, E, PythonSandbox>): Promise<A> => Effect.runPromise(Effect.provideService(effect, Tag, sandbox))
