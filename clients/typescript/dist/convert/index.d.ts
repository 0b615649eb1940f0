export { fromOpenAI, toOpenAI } from "./openai_chat.js";
export { fromOpenAIResponses, toOpenAIResponses } from "./openai_responses.js";
export { fromOpenAIAgents, toOpenAIAgents } from "./openai_agents.js";
export { fromAISDK, toAISDK } from "./ai_sdk.js";
export { fromAnthropic, toAnthropic } from "./anthropic.js";
export { CARRIER_PREFIX, DEFAULT_BREADCRUMB, canonicalJson } from "./common.js";
export type { ConvertOptions, ProviderJson, Shape } from "./common.js";
