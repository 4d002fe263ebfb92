/**
 * The official Tinker SDK, unmodified, against `serve`: runs `scripts/sdk/check.sh` (every
 * call a user of the SDK makes, its REST client and CLI download, and its error paths;
 * the 100-step RL loop is left to the script's own runs, it takes minutes) when
 * `TINKER_SDK_DIR` names a checkout of the SDK's repository and `TINKER_SDK_PYTHON` (default
 * `python3`) has its dependencies. Without them (as in CI, which has no copy of the SDK)
 * it says so and skips; the golden fixtures of `Proto.test.ts` stand in for it there.
 */
import { execFileSync, spawnSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { describe, expect, it } from "vitest"

const sdk = process.env["TINKER_SDK_DIR"]
const python = process.env["TINKER_SDK_PYTHON"] ?? "python3"
const root = Path.resolve(import.meta.dirname, "../../..")

const usable = (): string | undefined => {
  if (sdk === undefined) return "TINKER_SDK_DIR is not set"
  if (!Fs.existsSync(Path.join(sdk, "src", "tinker"))) return `${sdk}/src/tinker is not there`
  const probe = spawnSync(python, ["-c", "import httpx, pydantic, numpy, google.protobuf, zstandard"], { encoding: "utf8" })
  return probe.status === 0 ? undefined : `${python} lacks the SDK's dependencies: ${(probe.stderr ?? "").trim().split("\n").at(-1)}`
}

const why = usable()
if (why !== undefined) console.log(`skipping the official SDK checks: ${why} (see scripts/sdk/check.sh)`)

describe.skipIf(why !== undefined)("the official Tinker SDK against serve", () => {
  it("every call passes, none hangs", () => {
    const out = execFileSync(Path.join(root, "scripts/sdk/check.sh"), [sdk!, "--skip-rl"], {
      cwd: root,
      encoding: "utf8",
      env: { ...process.env, PYTHON: python },
      // a synchronous call blocks vitest's own timer: its kill limit is the hang-only one (9 min)
      timeout: 540_000,
    })
    const failed = out.split("\n").filter((l) => l.startsWith("FAIL"))
    expect(failed).toEqual([])
    expect(out).toMatch(/(\d+) of \1 checks passed/)
  })
})
