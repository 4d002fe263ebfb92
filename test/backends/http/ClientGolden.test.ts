/**
 * What reaches the trainer stays byte-identical for a seed: a 6-step seeded run of each
 * client workload (single turn, hermes tool env, `openai` agent env; Qwen3's tokenizer),
 * through the HTTP client and `serve`'s server to the instant service, gives the datums
 * `forward_backward` received and the run folder's rollouts, divergence and metrics rows
 * (time and throughput left out) whose hashes are in `fixtures/client-golden.json`,
 * captured before the client's hot paths were reworked. `GYRE_WRITE_GOLDEN=1` rewrites it
 * (only for a change meant to change what is trained).
 */
import { createHash } from "node:crypto"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, References } from "effect"
import * as Client from "../../../src/backends/http/client/Client.ts"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Server from "../../../src/backends/http/server/Server.ts"
import * as RunLog from "../../../src/folder/RunLog.ts"
import * as Runner from "../../../src/Runner.ts"
import { Tokenizer } from "../../../src/services/Tokenizer.ts"
import * as Tokenizers from "../../../src/tokenizers/index.ts"
import { envs, QWEN3_DIR, scriptFor, WORKLOADS, type Workload } from "./ClientWorkloads.ts"
import { makeInstant } from "./InstantService.ts"

const GOLDEN = Path.join(import.meta.dirname, "fixtures", "client-golden.json")
const sha = (text: string) => createHash("sha256").update(text).digest("hex")

const runOf = (workload: Workload) =>
  Effect.gen(function* () {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-client-golden-"))
    const instant = makeInstant({ script: scriptFor(workload, yield* Tokenizer) })
    const server = yield* instant.provide(Server.make({}))
    const settings = Runner.defaults(envs[workload].name, { outDir: dir, steps: 6, groups: 2, groupSize: 2, evalEvery: 0, saveEvery: 0, logRolloutsEvery: 1, seed: 7, sampling: { maxTokens: 600, temperature: 1 } })
    yield* Runner.run(settings, envs[workload]).pipe(Effect.provide(Client.layer({ baseUrl: server.url, retry: Retry.fast })))
    const paths = RunLog.paths(dir)
    const metrics = Fs.readFileSync(paths.metrics, "utf8").trim().split("\n").map((line) =>
      Object.fromEntries(Object.entries(JSON.parse(line) as Record<string, number>).filter(([k]) => !k.startsWith("time/") && !k.startsWith("throughput/")))
    )
    return {
      steps: instant.recorded.length,
      datums: sha(JSON.stringify(instant.recorded)),
      rollouts: sha(Fs.readFileSync(paths.rollouts, "utf8")),
      divergence: sha(Fs.readFileSync(Path.join(dir, "divergence.jsonl"), "utf8")),
      metrics: sha(JSON.stringify(metrics)),
    }
  }).pipe(Effect.scoped)

describe("what the client sends the trainer", () => {
  it.live("6 seeded steps of each workload give the golden datums and run files", () =>
    Effect.gen(function* () {
      const got: Record<string, unknown> = {}
      for (const w of WORKLOADS) got[w] = yield* runOf(w)
      if (process.env["GYRE_WRITE_GOLDEN"] === "1") Fs.writeFileSync(GOLDEN, JSON.stringify(got, null, 2) + "\n")
      const golden = JSON.parse(Fs.readFileSync(GOLDEN, "utf8")) as Record<string, unknown>
      for (const w of WORKLOADS) assert.deepStrictEqual(got[w], golden[w], `workload ${w}`)
    }).pipe(Effect.provide(Tokenizers.layer(QWEN3_DIR)), Effect.provideService(References.MinimumLogLevel, "Warn")))
})
