/**
 * gyre/rewards: ready-made rewards for `Env.make({ reward })`.
 *
 * - `answers`: numeric answers (`numericAnswer`), math answers graded as Math-Verify grades
 *   them (`mathAnswer`), and exact text answers (`exactMatch`);
 * - `format`: regular expressions, tags, tag sequences, JSON objects (1 or 0, never fail);
 * - `length`: hard limits, a soft length penalty, not cut off;
 * - `judge`: a language model asked a templated question (the `Judge` service);
 * - `preference`: a group ranked by the judge (RULER-style) or compared pair by pair (Bradley-Terry);
 * - `code`: model-written JavaScript run against tests in a QuickJS sandbox (the `Sandbox` service);
 * - `python`: model-written Python run against tests in Pyodide, Sandbox Fusion or E2B (the `PythonSandbox` service).
 *
 * @since 0.1.0
 */
/** Numeric, math and exact-match answer rewards, and the number parsing they use. */
export * as answers from "./answers.ts"
/** Format rewards: patterns, tags, tag sequences, JSON objects. */
export * as format from "./format.ts"
/** Length limits and penalties in characters or tokens. */
export * as length from "./length.ts"
/** Code rewards: programs run against tests in a QuickJS sandbox. */
export * as code from "./code.ts"
/** Python rewards: programs run against tests in Pyodide or Sandbox Fusion. */
export * as python from "./python.ts"
export {
  /** Scores 1 when the answer read from the completion equals the problem's number. */
  numericAnswer,
  /** Scores 1 when the completion's answer equals the problem's text (after normalization). */
  exactMatch,
  /** Scores 1 when the completion's final answer equals the problem's math answer (as Math-Verify decides). */
  mathAnswer,
  /** Scores 1 when the problem's math answer can be read (add with weight 0 to count those that cannot). */
  mathGoldReadable,
  /** The golds `mathAnswer` cannot read as math: check a data set before a run. */
  unreadableGolds,
  /** The text after a completion's last thinking block. */
  afterThinking,
} from "./answers.ts"
export {
  /** Scores 1 when the completion matches a regular expression. */
  matches,
  /** Scores 1 when the completion holds a `<tag>...</tag>` block. */
  hasTag,
  /** Scores 1 when the completion holds the tags in order. */
  tagSequence,
  /** Scores 1 when the completion holds a JSON object (optionally of a schema). */
  jsonObject,
} from "./format.ts"
export {
  /** Scores 1 when the completion is at most `max` characters. */
  maxLength,
  /** Scores 1 when the completion is at most `max` tokens. */
  maxTokens,
  /** A penalty that grows linearly over a range of lengths. */
  lengthPenalty,
  /** Scores 1 when sampling stopped on its own rather than at the token limit. */
  notTruncated,
} from "./length.ts"
export {
  /** A reward that asks a judge model a templated question and parses a score from its reply. */
  judge,
  /** The judge model a `judge` reward asks (provide it with the env's `services`). */
  Judge,
  /** The last number in a judge's reply (the default score parser). */
  lastNumber,
} from "./judge.ts"
export {
  /** A group reward from one ranking of the group's completions by the judge. */
  rankJudge,
  /** A group reward from the judge's pairwise preferences, fitted with Bradley-Terry. */
  pairwiseJudge,
  /** Bradley-Terry log-strengths from a win matrix. */
  bradleyTerry,
} from "./preference.ts"
export {
  /** The fraction of a problem's tests that the completion's program passes, run in the `Sandbox`. */
  passesTests,
  /** Runs a program against tests in the `Sandbox`, reporting what passed. */
  runTests,
  /** The sandbox code rewards run programs in (QuickJS in WebAssembly; provide `Sandbox.layer()`). */
  Sandbox,
  /** A program that could not run to the end, with its `reason`. */
  ProgramError,
  /** A sandbox that could not start or answer. */
  SandboxError,
} from "./code.ts"
export {
  /** The fraction of a problem's tests (function calls or stdin/stdout cases) the completion's Python program passes. */
  pythonTests,
  /** Runs a Python program against tests in the `PythonSandbox`, reporting what passed. */
  runPythonTests,
  /** The sandbox Python rewards run programs in (Pyodide in worker threads, or Sandbox Fusion; provide `PythonSandbox.layer()`). */
  PythonSandbox,
  /** A Python program that could not run to the end, with its `reason`. */
  PythonProgramError,
  /** A Python sandbox or service that could not start or answer. */
  PythonSandboxError,
  /** The program in a completion: the last ```python block, else the whole text. */
  pythonProgram,
  /** The test of an MBPP-style `assert f(args) == expected`, read as JSON values. */
  testOfAssert,
} from "./python.ts"
