/**
 * Test double of a Loops deployment for a test file: gyre's data-plane server, started
 * before the file's tests and closed after them, behind a fake control plane that each
 * test opens in its scope (`fakeWith`).
 */
import { Effect } from "effect"
import { afterAll, beforeAll } from "vitest"
import { RANDOM_MODEL, startDataPlane } from "./DataPlane.ts"
import { type FakeOptions, startFake } from "./FakeControlPlane.ts"

/** Registers the file's data plane and returns `fakeWith`, a scoped control plane (API key `apiKey`) in front of it. */
export const fakeLoops = (apiKey: string) => {
  let dataPlane: Awaited<ReturnType<typeof startDataPlane>>
  beforeAll(async () => {
    dataPlane = await startDataPlane()
  })
  afterAll(async () => {
    await dataPlane.close()
  })
  const fakeWith = (options: Partial<FakeOptions> = {}) =>
    Effect.acquireRelease(
      Effect.promise(() => startFake({ apiKey, dataPlane: dataPlane.url, models: [RANDOM_MODEL], ...options })),
      (fake) => Effect.promise(() => fake.close()),
    )
  return { fakeWith }
}
