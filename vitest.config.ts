import { defineConfig } from "vitest/config"

export default defineConfig({
  // "gyre" and its subpaths resolve to the source through tsconfig.json's paths (the
  // package's exports point at the build in dist/, which tests must not load a second copy of)
  resolve: { tsconfigPaths: true },
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
  },
})
