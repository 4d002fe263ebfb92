/**
 * `gyre init <name>`: scaffolds an env (envs/<name>.ts) and its reward's property test
 * (test/<name>.test.ts) in the current project, and prints how to run both.
 */
import { Console, Effect } from "effect"
import { Argument, Command } from "effect/cli"
import { scaffold } from "./Scaffold.ts"

/** The `init` command. */
export const initCommand = Command.make(
  "init",
  { name: Argument.String("name").pipe(Argument.withDescription("the env's name: envs/<name>.ts and test/<name>.test.ts are written")) },
  ({ name }) =>
    scaffold(name, process.cwd()).pipe(
      Effect.flatMap((files) =>
        Console.log([
          `wrote ${files.env} and ${files.test}`,
          `train on it:      npx gyre run ./${files.env} --steps 200`,
          `test its reward:  npx vitest run ${files.test}`,
        ].join("\n"))
      ),
      Effect.catch((e) =>
        Console.error(`error: ${e.message}`).pipe(Effect.andThen(Effect.sync(() => {
          process.exitCode = 1
        })))
      ),
    ),
).pipe(
  Command.withDescription("Scaffold an env and its reward's property test in this project, and print the commands that run them"),
  Command.withExamples([{ command: "init sums", description: "writes envs/sums.ts and test/sums.test.ts" }]),
)
