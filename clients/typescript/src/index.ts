export { connect, TurnkeeperClient, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_TIMEOUT_MS } from "./client.js";
export type { ClientOptions, Target, TlsOptions } from "./client.js";
export { ConversionError, TurnkeeperError, ERROR_DOMAIN, codeName } from "./errors.js";
export type { FieldViolation } from "./errors.js";
export {
  TrimEventSubscription,
  isRetryableStreamError,
  backoffDelay,
  DEFAULT_MAX_BATCH_EVENTS,
} from "./events.js";
export type { WatchOptions, BackoffOptions } from "./events.js";
export { DEFAULT_RETRY_POLICY, RETRYABLE_CODES } from "./retry.js";
export type { RetryPolicy } from "./retry.js";
export { reportedUsageOf } from "./usage.js";
export { applyCompaction } from "./compaction.js";
export {
  CARRIER_PREFIX,
  DEFAULT_BREADCRUMB,
  fromAISDK,
  fromAnthropic,
  fromOpenAI,
  fromOpenAIAgents,
  fromOpenAIResponses,
  toAISDK,
  toAnthropic,
  toOpenAI,
  toOpenAIAgents,
  toOpenAIResponses,
  turnMarks,
  MAX_CACHE_MARKS,
} from "./convert/index.js";
export type { AnthropicExportOptions, ConvertOptions, ProviderJson, Shape, TurnMarks } from "./convert/index.js";
export { Code } from "@connectrpc/connect";
export type { CallOptions } from "@connectrpc/connect";

// The turnkeeper.v1 contract: message types, their schemas (for create/fromJson/toJson) and enums.
export * from "./gen/turnkeeper/v1/errors_pb.js";
export * from "./gen/turnkeeper/v1/events_pb.js";
export * from "./gen/turnkeeper/v1/history_pb.js";
export * from "./gen/turnkeeper/v1/history_service_pb.js";
export * from "./gen/turnkeeper/v1/profile_pb.js";
export * from "./gen/turnkeeper/v1/resolution_pb.js";
export * from "./gen/turnkeeper/v1/trim_pb.js";
