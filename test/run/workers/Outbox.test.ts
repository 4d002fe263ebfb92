/**
 * What an episode worker and the main thread send each other in batches: the items
 * queued in one turn of the event loop leave together, in order, and an item that cannot
 * be sent fails alone, the rest of its batch sent.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Outbox from "../../../src/run/workers/Outbox.ts"

const turn = () => new Promise((resolve) => setImmediate(resolve))

describe("Outbox", () => {
  it("sends the items of one turn as one batch, in order, and the next turn's as another", async () => {
    const sent: Array<Array<number>> = []
    const queue = Outbox.make<number>((items) => sent.push(items), () => assert.fail("nothing fails"))
    queue(1)
    queue(2)
    await Promise.resolve()
    queue(3)
    assert.deepStrictEqual(sent, [])
    await turn()
    queue(4)
    await turn()
    assert.deepStrictEqual(sent, [[1, 2, 3], [4]])
  })

  it("sends the rest of a batch when one item cannot be sent, and names that one", async () => {
    const sent: Array<number> = []
    const failed: Array<number> = []
    const queue = Outbox.make<number | (() => void)>(
      (items) => {
        // as postMessage, which refuses a batch holding a function
        structuredClone(items)
        for (const i of items) sent.push(i as number)
      },
      (item) => failed.push((item as () => number)()),
    )
    queue(1)
    queue(() => 7)
    queue(3)
    await turn()
    assert.deepStrictEqual(sent, [1, 3])
    assert.deepStrictEqual(failed, [7])
  })
})
