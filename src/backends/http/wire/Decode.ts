/**
 * The HTTP backend decodes with gyre's one Schema decoding helper, `src/util/Decode.ts`.
 *
 * @since 0.1.0
 */
export { decode, formatIssue } from "../../../util/Decode.ts"
