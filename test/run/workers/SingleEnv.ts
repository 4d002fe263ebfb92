/** The single-turn test env of `ThreadEnvs.ts` as a module's default export, as `gyre run <path>` loads it. */
export { single as default } from "./ThreadEnvs.ts"
