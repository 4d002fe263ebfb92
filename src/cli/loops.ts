/**
 * `gyre loops`: the Loops runs of the API key's owner, and their checkpoints.
 *
 * ```bash
 * gyre loops runs                  # live runs (each bills until deactivated); --all adds INACTIVE ones, --session S only S's
 * gyre loops deactivate <run_id>   # tears down the run and its paired sampler; checkpoints remain
 * gyre loops checkpoints <run_id>  # the run's checkpoints, with their bt:// URIs
 * ```
 *
 * Every subcommand reads `BASETEN_API_KEY`, and the control plane from `--loops-url`,
 * else `LOOPS_API_URL`, else Baseten's API.
 */
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import type * as Api from "../backends/loops/Api.ts"
import { ControlPlane } from "../backends/loops/ControlPlane.ts"
import type { LoopsError } from "../backends/loops/Errors.ts"

const urlFlag = Flag.String("loops-url").pipe(
  Flag.withDescription("the Loops control plane (default LOOPS_API_URL, else https://api.baseten.co); the key is BASETEN_API_KEY"),
  Flag.optional,
)

/** Rows as columns padded to their widest cell. */
const table = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)))
  // a cell past the header's columns is not padded
  const line = (cells: ReadonlyArray<string>) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join("  ")
  return [line(header), ...rows.map(line)].join("\n")
}

const bytes = (n: number) => (n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : n >= 2 ** 20 ? `${(n / 2 ** 20).toFixed(1)} MiB` : n >= 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${n} B`)

/** Runs a subcommand on the control plane; a failure prints one line and exits 1. */
const withControlPlane = <A>(url: Option.Option<string>, f: (cp: typeof ControlPlane.Service) => Effect.Effect<A, LoopsError>) =>
  Effect.gen(function* () {
    const cp = yield* ControlPlane
    return yield* f(cp)
  }).pipe(
    Effect.provide(ControlPlane.layer({ url: Option.getOrUndefined(url) })),
    Effect.asVoid,
    Effect.catchTag("LoopsError", (e) =>
      Console.error(`error: ${e.message}`).pipe(Effect.andThen(Effect.sync(() => {
        process.exitCode = 1
      })))),
  )

const runRow = (r: Api.Run) => [r.id, r.name ?? "", r.base_model ?? "-", r.status?.name ?? "-", r.sampler?.status?.name ?? "-", r.created_at ?? "-"]

const runsCommand = Command.make(
  "runs",
  {
    url: urlFlag,
    all: Flag.Boolean("all").pipe(Flag.withDescription("list INACTIVE runs too"), Flag.withDefault(false)),
    org: Flag.Boolean("org").pipe(Flag.withDescription("every run of the organization, not only the key owner's"), Flag.withDefault(false)),
    baseModel: Flag.String("base-model").pipe(Flag.withDescription("only runs of this base model"), Flag.optional),
    session: Flag.String("session").pipe(Flag.withDescription("only runs of this session (a run whose create answer gyre could not read is found this way)"), Flag.optional),
  },
  ({ all, baseModel, org, session, url }) =>
    withControlPlane(url, (cp) =>
      Effect.gen(function* () {
        const listed = yield* cp.listRuns({ ...(org ? { scope: "org" as const } : {}), ...(Option.isSome(baseModel) ? { base_model: baseModel.value } : {}) })
        const runs = Option.isSome(session) ? listed.filter((r) => r.session_id === session.value) : listed
        // any status but INACTIVE may bill (a run still coming up does)
        const active = runs.filter((r) => r.status?.name !== "INACTIVE")
        const shown = all ? runs : active
        if (shown.length > 0) yield* Console.log(table(["RUN ID", "NAME", "BASE MODEL", "STATUS", "SAMPLER", "CREATED"], shown.map(runRow)))
        yield* Console.log(
          active.length === 0
            ? `no live Loops runs at ${cp.url}${all ? "" : " (--all lists inactive ones)"}`
            : `${active.length} live run${active.length === 1 ? "" : "s"} (any status but INACTIVE): each bills until deactivated (gyre loops deactivate <run_id>)`,
        )
      })),
).pipe(Command.withDescription("List Loops runs: ACTIVE ones bill until deactivated (--all lists INACTIVE ones too)"))

const deactivateCommand = Command.make(
  "deactivate",
  { url: urlFlag, runId: Argument.String("run_id").pipe(Argument.withDescription("the run to deactivate (gyre loops runs lists them)")) },
  ({ runId, url }) =>
    withControlPlane(url, (cp) =>
      Effect.gen(function* () {
        const r = yield* cp.deactivateRun(runId)
        yield* Console.log(`deactivated run ${r.id}${r.base_model === undefined ? "" : ` (${r.base_model})`} and its paired sampler; its checkpoints remain: gyre loops checkpoints ${r.id}`)
      })),
).pipe(Command.withDescription("Deactivate a Loops run and its paired sampler (checkpoints remain)"))

const checkpointsCommand = Command.make(
  "checkpoints",
  { url: urlFlag, runId: Argument.String("run_id").pipe(Argument.withDescription("the run whose checkpoints to list")) },
  ({ runId, url }) =>
    withControlPlane(url, (cp) =>
      Effect.gen(function* () {
        const list = yield* cp.listCheckpoints({ run_id: runId })
        if (list.length === 0) return yield* Console.log(`run ${runId} has no checkpoints`)
        const uri = (c: Api.Checkpoint) => `bt://loops:${c.run_id}/${c.target === "trainer" ? "weights" : "sampler_weights"}/${c.checkpoint_id}`
        yield* Console.log(
          table(["ID", "NAME", "TARGET", "TYPE", "SIZE", "CREATED", "URI"], list.map((c) => [c.id, c.checkpoint_id, c.target, c.checkpoint_type, bytes(c.size_bytes), c.created_at, uri(c)])),
        )
        yield* Console.log(`download one with: gyre export <URI> --out DIR`)
      })),
).pipe(Command.withDescription("List a Loops run's checkpoints with their bt:// URIs"))

/** `gyre loops runs | deactivate <run_id> | checkpoints <run_id>`. */
export const loopsCommand = Command.make("loops").pipe(
  Command.withDescription("Loops runs and checkpoints: list runs (and check that none is left billing), deactivate one, list a run's checkpoints"),
  Command.withSubcommands([runsCommand, deactivateCommand, checkpointsCommand]),
)
