/**
 * Messages to another thread that are ready in one turn of the event loop go as one: a
 * multi-turn group makes dozens of sampler calls at once, and every `postMessage` costs
 * both threads (a packed buffer, a structured clone, a wake-up of the other thread). The
 * batch goes out once this turn's callbacks and microtasks have run (`setImmediate`).
 *
 * @since 0.1.0
 */

/**
 * A function that queues an item; the items queued in one turn of the event loop are
 * given to `send` together, in the order they were queued. A batch `send` throws for (an
 * item that cannot be cloned) is sent again item by item, and each item that still throws
 * goes to `failed`, so one bad item loses nothing else.
 * @since 0.1.0 @category constructors
 */
export const make = <A>(send: (items: Array<A>) => void, failed: (item: A, error: unknown) => void): ((item: A) => void) => {
  let items: Array<A> = []
  const flush = () => {
    const batch = items
    items = []
    try {
      send(batch)
    } catch {
      for (const item of batch) {
        try {
          send([item])
        } catch (e) {
          failed(item, e)
        }
      }
    }
  }
  return (item) => {
    if (items.push(item) === 1) setImmediate(flush)
  }
}
