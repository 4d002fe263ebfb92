/**
 * The folders `McpToolset.perEpisode` makes with `tempDir: true`: one per episode, removed
 * when the episode ends. A process killed with SIGKILL runs no finalizer and leaves its
 * folders behind, so each folder's name holds the id of the process that made it
 * (`gyre-episode-<pid>-<random>`), and the first folder of a run removes, first, those
 * whose process is gone (`process.kill(pid, 0)` finds none). A folder of a live
 * process (another run), or of another user's (`EPERM`), is left alone.
 *
 * @since 0.1.0
 */
import * as Os from "node:os"
import * as NodePath from "node:path"
import { Effect, FileSystem } from "effect"

/** @since 0.1.0 @category constants */
export const PREFIX = "gyre-episode-"

/** The id of the process that made a folder of this name, if it is one of them. @since 0.1.0 @category destructors */
export const ownerOf = (name: string): number | undefined => {
  const m = /^gyre-episode-(\d+)-/.exec(name)
  return m === null ? undefined : Number(m[1])
}

/** Whether a process with this id exists (one of another user's counts: it cannot be signalled, but it is there). @since 0.1.0 @category destructors */
export const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM"
  }
}

/**
 * Removes the folders of `root` (the system's temp folder by default) left by processes
 * that are gone; returns their names. A folder that cannot be read or removed is left.
 * @since 0.1.0 @category running
 */
export const sweep = Effect.fn("EpisodeFolders.sweep")(function* (root: string = Os.tmpdir(), alive: (pid: number) => boolean = isAlive) {
  const fs = yield* FileSystem.FileSystem
  const names = yield* fs.readDirectory(root).pipe(Effect.orElseSucceed((): ReadonlyArray<string> => []))
  const stale = names.filter((name) => {
    const pid = ownerOf(name)
    return pid !== undefined && pid !== process.pid && !alive(pid)
  })
  const removed = yield* Effect.filter(stale, (name) =>
    fs.remove(NodePath.join(root, name), { recursive: true, force: true }).pipe(Effect.as(true), Effect.orElseSucceed(() => false)))
  if (removed.length > 0) yield* Effect.logInfo(`removed ${removed.length} per-episode folder(s) in ${root} left by gyre processes that are gone`)
  return removed
})

/**
 * Makes folders of episodes' own in `root`, each removed when its scope closes; the first
 * one sweeps the stale folders first (`McpToolset.perEpisode` makes one maker per env, so
 * a run sweeps once, at its start).
 * @since 0.1.0 @category constructors
 */
export const maker = (root: string = Os.tmpdir()) => {
  let swept = false
  return Effect.gen(function* () {
    if (!swept) {
      swept = true
      yield* sweep(root)
    }
    return yield* (yield* FileSystem.FileSystem).makeTempDirectoryScoped({ prefix: `${PREFIX}${process.pid}-`, directory: root })
  })
}
