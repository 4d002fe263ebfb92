/**
 * The command-line flags of the scripts in scripts/: `--name value` pairs, `--help`, and
 * one message naming the flag (then exit 2) for anything else.
 */

/** Prints `message` with a hint to `--help` and exits with 2. */
export const failWith = (script: string) => (message: string): never => {
  console.error(`${script}: ${message}\nRun with --help for the flags.`)
  process.exit(2)
}

/**
 * Reads `argv`: prints `usage` and exits on `--help`; refuses unknown flags and flags
 * without a value. `num` reads a numeric flag with a default and a check, `text` a string.
 */
export const parseFlags = (options: {
  readonly script: string
  readonly usage: string
  readonly numeric: ReadonlyArray<string>
  readonly text: ReadonlyArray<string>
  readonly argv: ReadonlyArray<string>
}) => {
  const fail = failWith(options.script)
  const known = new Set([...options.numeric, ...options.text])
  const values = new Map<string, string>()
  for (let i = 0; i < options.argv.length; i++) {
    const arg = options.argv[i]!
    if (arg === "--help" || arg === "-h") {
      console.log(options.usage)
      process.exit(0)
    }
    const name = arg.startsWith("--") ? arg.slice(2) : undefined
    if (name === undefined || !known.has(name)) fail(`unknown argument ${JSON.stringify(arg)}`)
    const value = options.argv[i + 1]
    if (value === undefined || value.startsWith("--")) fail(`--${name} needs a value`)
    values.set(name!, value!)
    i++
  }
  function num(name: string, def: number, check: (x: number) => boolean, what: string): number
  function num(name: string, def: undefined, check: (x: number) => boolean, what: string): number | undefined
  function num(name: string, def: number | undefined, check: (x: number) => boolean, what: string): number | undefined {
    const raw = values.get(name)
    if (raw === undefined) return def
    const x = Number(raw)
    if (!Number.isFinite(x) || !check(x)) fail(`--${name} ${raw}: must be ${what}`)
    return x
  }
  return { num, text: (name: string) => values.get(name), has: (name: string) => values.has(name), fail }
}
