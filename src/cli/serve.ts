/**
 * `gyre serve`: the embedded trainer and sampler behind the Tinker wire protocol (the
 * command itself lives with the HTTP backend).
 */
import { defaultModelDir } from "./paths.ts"

export { serveCommand } from "../backends/http/Serve.ts"

/**
 * The command line of `serve` with `--model` set to the base model shipped with gyre when
 * neither `--model` nor `--random-init` is given, so that `gyre serve` finds its model
 * wherever it runs. `args` are the arguments after the command name.
 */
export const withDefaultModel = (args: ReadonlyArray<string>): Array<string> =>
  args.some((a) => a === "--model" || a.startsWith("--model=") || a === "--random-init" || a === "--help" || a === "-h")
    ? [...args]
    : [...args, "--model", defaultModelDir]
