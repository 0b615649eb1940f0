// Lossless converters between provider conversation JSON and turnkeeper.v1 histories (docs/converters.md).
export { fromOpenAI, toOpenAI } from "./openai_chat.js";
export { fromOpenAIResponses, toOpenAIResponses } from "./openai_responses.js";
export { fromOpenAIAgents, toOpenAIAgents } from "./openai_agents.js";
export { fromAISDK, toAISDK } from "./ai_sdk.js";
export { fromAnthropic, toAnthropic, MAX_CACHE_MARKS } from "./anthropic.js";
export { CARRIER_PREFIX, DEFAULT_BREADCRUMB, canonicalJson, turnMarks } from "./common.js";
//# sourceMappingURL=index.js.map