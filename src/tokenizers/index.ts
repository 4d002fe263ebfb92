/**
 * Tokenizers of real models, loaded from local files.
 *
 * @since 0.1.0
 */
export { fromDirectory, layer, TokenizerConfig, TokenizerJson, TokenizerLoadError } from "./HfTokenizer.ts"
export { applyTemplateArgs, parseTemplateArgs, type TemplateArgs, templateArgsProblem, withTemplateArgs } from "./TemplateArgs.ts"
