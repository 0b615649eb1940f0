export { fromOpenAI, toOpenAI } from "./openai.js";
export { fromOpenAIResponses, toOpenAIResponses } from "./responses.js";
export { fromAnthropic, toAnthropic } from "./anthropic.js";
export { CARRIER_PREFIX, DEFAULT_BREADCRUMB, canonicalJson } from "./common.js";
export type { ConvertOptions, Shape } from "./common.js";
