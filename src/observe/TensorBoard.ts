/**
 * `--tensorboard`: the run as TensorBoard events in `<run folder>/tensorboard`, one file
 * per process (`events.out.tfevents.<seconds>.gyre`): every metric as a scalar, each
 * step's rewards as the histogram `reward/total`, and a few of its samples as the text
 * `samples`. Watch with `tensorboard --logdir runs`.
 *
 * A write that fails is logged and the run goes on: the run folder's own files are the
 * record.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import * as Path from "node:path"
import * as Files from "../platform/FileSystem.ts"
import type { ObservedSample, RunObserverShape } from "../run/Observer.ts"
import { event, record, type Values } from "./TfEvents.ts"

/** Samples shown per step in the text `samples`. */
const SHOWN = 4

const sampleText = (samples: ReadonlyArray<ObservedSample>) =>
  samples.slice(0, SHOWN).map((s) => `**reward ${s.reward ?? "masked"}** · ${JSON.stringify(s.prompt)} → \`${s.completion}\``).join("\n\n")

/**
 * The observer that writes TensorBoard events under `dir`.
 * @since 0.1.0 @category constructors
 */
export const observer = Effect.fnUntraced(function* (dir: string) {
  const fs = yield* Files.current
  const file = Path.join(dir, `events.out.tfevents.${Math.floor(Date.now() / 1000)}.gyre`)
  const append = (step: number, values: Values | "file_version") =>
    Effect.suspend(() => fs.writeFile(file, record(event(Date.now() / 1000, step, values)), { flag: "a" })).pipe(
      Effect.catch((e) => Effect.logWarning(`--tensorboard: cannot write ${file}: ${Files.messageOf(e)}`)),
    )
  yield* fs.makeDirectory(dir, { recursive: true }).pipe(Effect.catch((e) => Effect.logWarning(`--tensorboard: cannot make ${dir}: ${Files.messageOf(e)}`)))
  yield* append(0, "file_version")
  yield* Effect.logInfo(`--tensorboard: writing ${file} (watch with tensorboard --logdir ${Path.dirname(Path.dirname(dir))})`)
  return {
    onMetrics: ({ step, ...scalars }) => append(step, { scalars }),
    onSamples: (step, samples) =>
      append(step, {
        histograms: { "reward/total": samples.flatMap((s) => (s.reward === null ? [] : [s.reward])) },
        texts: { samples: sampleText(samples) },
      }),
  } satisfies RunObserverShape
})
