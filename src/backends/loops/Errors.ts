/**
 * The one error of the Loops control plane and of provisioning on it.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * A Loops control-plane call or a provisioning step failed. `route` names the route
 * (`POST /v1/loops/runs`) or the step (`provision`); `message` says what went wrong and
 * what to do, with the API key removed from anything the server sent.
 *
 * - `Config`: no API key, or one that cannot travel in a header
 * - `Auth`: 401 or 403 (a wrong key, or one without access to Loops)
 * - `NotFound`: 404 (no such run, session, deployment or checkpoint)
 * - `InvalidInput`: another 4xx (the message is the server's)
 * - `Unavailable`: 5xx, 429 or no answer, after retrying
 * - `Decode`: an answer that does not match the API reference (names the field)
 * - `NotReady`: a run that did not become ready within the ready timeout
 * - `Failed`: a run whose provisioning failed, or that ended while in use
 * - `Gone`: a run recorded in a run folder that is no longer active
 *
 * @since 0.1.0 @category errors
 */
export class LoopsError extends Schema.TaggedError<LoopsError>()("LoopsError", {
  reason: Schema.Literals(["Config", "Auth", "NotFound", "InvalidInput", "Unavailable", "Decode", "NotReady", "Failed", "Gone"]),
  route: Schema.String,
  message: Schema.String,
}) {}
