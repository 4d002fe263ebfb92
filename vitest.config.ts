import { availableParallelism } from "node:os"
import { defineConfig } from "vitest/config"

// Test files that replace a module for their whole file (`vi.mock`) run in a fresh module
// graph; every other file shares its worker's modules with the files before it, which
// spares re-importing effect and tfjs per file (the bulk of the suite's time on 2 cores).
const ISOLATED = ["test/run/RunLog.test.ts"]

// Test files that start gyre's own processes (CLI runs, `serve`, a packed install): the
// slowest third of the suite, run by `npm run test:e2e` (CI runs both); `npm test` runs the rest.
const E2E = [
  "test/package/project.test.ts",
  "test/package/declarations.test.ts",
  "test/package/httpEntry.test.ts",
  "test/cli/run.test.ts",
  "test/cli/crash.test.ts",
  "test/cli/resume.test.ts",
  "test/cli/serveRestart.test.ts",
  "test/cli/errors.test.ts",
  "test/backends/loops/Cli.test.ts",
  "test/mcp/Inventory.test.ts",
  "test/platform/Runtime.test.ts",
  "test/observe/TensorBoard.test.ts",
  "test/docs/Commands.test.ts",
  "test/run/workers/Cli.test.ts",
  // a fake E2B whose sandboxes run bash and python3 processes
  "test/rewards/python/E2b.test.ts",
  // in process, but tens of seconds of CPU: a random model of Qwen3's 151,669-token vocabulary,
  // and runs played on episode worker threads (each loads the env, tokenizer and tsx's loader)
  "test/serve/RandomInit.test.ts",
  "test/run/workers/SameResults.test.ts",
  "test/run/workers/Direct.test.ts",
  "test/run/workers/LateCalls.test.ts",
  "test/run/workers/Unsendable.test.ts",
  "test/run/workers/Eval.test.ts",
  "test/run/workers/Otlp.test.ts",
  "test/cli/serveRandomInit.test.ts",
]

export default defineConfig({
  // "gyre" and its subpaths resolve to the source through tsconfig.json's paths (the
  // package's exports point at the build in dist/, which tests must not load a second copy of)
  resolve: { tsconfigPaths: true },
  test: {
    // a limit that only catches a hang: a loaded machine stretches every test several times
    // over, so no test sets a tighter wall-clock limit of its own
    testTimeout: 600_000,
    hookTimeout: 600_000,
    pool: "forks",
    // at least two workers: many files wait on child processes and servers they start, so
    // one worker per spare core (vitest's default, one on a 2-core machine) leaves a core idle
    maxWorkers: Math.max(2, availableParallelism() - 1),
    projects: [
      { extends: true, test: { name: "isolated", include: ISOLATED, isolate: true } },
      { extends: true, test: { name: "shared", include: ["test/**/*.test.ts"], exclude: [...ISOLATED, ...E2E], isolate: false } },
      // one build of dist/ first: the processes these files start run the built JavaScript
      { extends: true, test: { name: "e2e", include: E2E, isolate: false, globalSetup: ["test/e2eSetup.ts"] } },
    ],
  },
})
