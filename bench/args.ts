/**
 * What the client benches share: the command line's arguments and `--name value` options,
 * the process's CPU time, node's flags for `BENCH_CPU_PROF`, and the runner's spans that
 * begin each phase of a step.
 */

export const args: ReadonlyArray<string> = process.argv.slice(2)

/** The value after `--name`, if given. */
export const option = (name: string): string | undefined => {
  const i = args.indexOf(`--${name}`)
  return i >= 0 ? args[i + 1] : undefined
}

/** `--name` as a whole number of at least `least`, else `fallback`. */
export const count = (name: string, fallback: number, least = 0): number => {
  const v = Number(option(name))
  return Number.isInteger(v) && v >= least ? v : fallback
}

/** CPU ms of the process so far (user + system, every thread). */
export const cpuNow = (): number => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}

/** `BENCH_CPU_PROF=<folder>`: node's flags that write a CPU profile of each thread of a child process there. */
export const profileFlags: ReadonlyArray<string> = process.env["BENCH_CPU_PROF"] !== undefined ? ["--cpu-prof", `--cpu-prof-dir=${process.env["BENCH_CPU_PROF"]}`] : []

/** The phase each of the runner's spans begins (sync mode: one after the other within a step). */
export const PHASE_SPANS: Readonly<Record<string, string>> = {
  "Collect.collect": "rollouts",
  "Train.advantages": "datums",
  "Train.datums": "datums",
  "Train.submitOptimize": "submit",
  "Steps.completeStep": "await",
}
