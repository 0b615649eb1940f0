import { type CapacityReport, type ReportedUsage } from "./gen/turnkeeper/v1/trim_pb.js";
/**
 * The ReportedUsage of spec §10.3: the input tokens the provider reported for the previous request,
 * next to turnkeeper's estimate of it, read from the CapacityReport of the `prepareModelCall` (or
 * `checkCapacity`) that built it: everything sent, `totalTokens - reservedOutputTokens`, of which
 * `toolSchemaTokens` were tool schemas. Set it as `reportedUsage` of the next prepareModelCall, or
 * of a trimHistory in `TrimMode.REPORTED_USAGE`.
 */
export declare function reportedUsageOf(previous: CapacityReport, reportedInputTokens: bigint): ReportedUsage;
