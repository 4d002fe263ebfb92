/**
 * Final answers of thinking models: the `thinking` option every answer and format reward
 * shares, and `afterThinking`, the part of a completion after its last thinking block.
 * A `\boxed{17}` the model tried inside `<think>...</think>` must not decide over the
 * `\boxed{18}` it answers after it.
 *
 * @since 0.1.0
 */

/** Where a thinking block ends (and starts): only what follows it is read. @since 0.1.0 @category models */
export interface ThinkingMarkers {
  /** the texts that end a thinking block (default ["</think>"]) */
  readonly end: string | ReadonlyArray<string>
  /**
   * the texts that start one: a completion that starts one and never ends it gives no
   * answer (default ["<think>"] with the default end, else none)
   */
  readonly start?: string | ReadonlyArray<string>
  /**
   * the chat template opens the thinking block in the prompt (DeepSeek-R1's and
   * Qwen3-Thinking-2507's end the generation prompt with `<think>\n`), so a completion
   * without an end marker never left it and gives no answer (default false)
   */
  readonly openedByPrompt?: boolean
}

/**
 * The `thinking` option of the answer and format rewards: `true` reads only what follows
 * the last `</think>` (a completion that opens `<think>` and never closes it gives no
 * answer); markers say other tags; `false` or absent reads the whole completion.
 * @since 0.1.0 @category models
 */
export type Thinking = boolean | ThinkingMarkers

const DEFAULT: ThinkingMarkers = { end: ["</think>"] }

const list = (m: string | ReadonlyArray<string> | undefined): ReadonlyArray<string> => (m === undefined ? [] : typeof m === "string" ? [m] : m)

/**
 * The part of a completion after its last thinking block; undefined when it never leaves
 * one (it opens a block and never ends it, or the prompt opened it: `openedByPrompt`).
 * A completion with no thinking block at all is returned whole.
 *
 * @example
 * afterThinking("<think>maybe \\boxed{17}</think> so \\boxed{18}") // => " so \\boxed{18}"
 * afterThinking("<think>still thinking \\boxed{17}") // => undefined
 * afterThinking("plan: 17 [/plan] 18", { end: "[/plan]" }) // => " 18"
 * @since 0.1.0 @category utils
 */
export const afterThinking = (completion: string, markers: ThinkingMarkers = DEFAULT): string | undefined => {
  const endMarkers = list(markers.end)
  let cut = -1
  for (const m of endMarkers) {
    const i = completion.lastIndexOf(m)
    if (i >= 0 && i + m.length > cut) cut = i + m.length
  }
  if (cut >= 0) return completion.slice(cut)
  if (markers.openedByPrompt === true) return undefined
  const starts = markers.start !== undefined ? list(markers.start) : endMarkers.length === 1 && endMarkers[0] === "</think>" ? ["<think>"] : []
  return starts.some((s) => completion.includes(s)) ? undefined : completion
}

/**
 * The reader a reward's `thinking` option makes: the completion's final part (the whole
 * completion when the option is off), or undefined when the completion never leaves its
 * thinking block. Throws a TypeError naming `who` for markers that cannot be found.
 * @since 0.1.0 @category utils
 */
export const thinkingReader = (who: string, thinking: Thinking | undefined): (completion: string) => string | undefined => {
  if (thinking === undefined || thinking === false) return (completion) => completion
  const markers = thinking === true ? DEFAULT : thinking
  if (typeof markers !== "object" || markers === null) {
    throw new TypeError(`${who}: thinking must be true, false or { end: ["</think>"] }, got ${JSON.stringify(thinking)}`)
  }
  const bad = (m: ReadonlyArray<string>) => m.some((s) => typeof s !== "string" || s === "")
  if (list(markers.end).length === 0 || bad(list(markers.end))) {
    throw new TypeError(`${who}: thinking.end must list non-empty markers, got ${JSON.stringify(markers.end)}`)
  }
  if (bad(list(markers.start))) throw new TypeError(`${who}: thinking.start must list non-empty markers, got ${JSON.stringify(markers.start)}`)
  return (completion) => afterThinking(completion, markers)
}

/** The reason a completion that never leaves its thinking block gives no answer. @since 0.1.0 @category utils */
export const UNFINISHED_THINKING = "the completion never ends its thinking block"
