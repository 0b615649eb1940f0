import { Code, ConnectError } from "@connectrpc/connect";
import { type PreconditionFailure_Violation } from "./gen/google/rpc/error_details_pb.js";
import { ErrorReason } from "./gen/turnkeeper/v1/errors_pb.js";
import { type CapacityReport } from "./gen/turnkeeper/v1/trim_pb.js";
/** The `google.rpc.ErrorInfo` domain of every error the server raises. */
export declare const ERROR_DOMAIN = "turnkeeper.v1";
/** A field violation from `google.rpc.BadRequest`: the request path (snake_case) and what is wrong with it. */
export interface FieldViolation {
    readonly field: string;
    readonly description: string;
}
/**
 * An RPC that failed, with the rich details of the server's `google.rpc.Status` decoded.
 *
 * The original ConnectError stays available as `cause`.
 */
export declare class TurnkeeperError extends Error {
    readonly name = "TurnkeeperError";
    /** The gRPC status code (Connect's Code values equal the gRPC numbers). */
    readonly code: Code;
    /** The canonical gRPC name of `code`, such as `INVALID_ARGUMENT`. */
    readonly codeName: string;
    /** The status message without the `[code]` prefix Connect adds to `message`. */
    readonly rawMessage: string;
    /** The ErrorInfo reason as sent, such as `ERROR_REASON_INVALID_HISTORY`; empty when the status had no ErrorInfo. */
    readonly reasonName: string;
    /** `reasonName` as an enum value; UNSPECIFIED when absent or unknown to this client version. */
    readonly reason: ErrorReason;
    /** The ErrorInfo domain (`turnkeeper.v1` for server errors); empty when absent. */
    readonly domain: string;
    /** The ErrorInfo metadata. */
    readonly errorMetadata: Readonly<Record<string, string>>;
    /** Every `google.rpc.BadRequest` field violation, in server order. */
    readonly fieldViolations: readonly FieldViolation[];
    /** Every `google.rpc.PreconditionFailure` violation. */
    readonly preconditionViolations: readonly PreconditionFailure_Violation[];
    /** The `turnkeeper.v1.CapacityReport` attached to CONTEXT_WINDOW_EXCEEDED failures. */
    readonly capacityReport: CapacityReport | undefined;
    /** The `google.rpc.RetryInfo` delay an overloaded server asks for, in ms (the client's `RetryPolicy` honours it). */
    readonly retryDelayMs: number | undefined;
    readonly cause: ConnectError;
    constructor(cause: ConnectError);
    /** Wraps what a Connect call threw; anything that is not a ConnectError is wrapped as UNKNOWN. */
    static from(reason: unknown): TurnkeeperError;
}
/**
 * Wraps what a call threw. connect-node reports a connection that died under an open stream as
 * CANCELLED (the HTTP/2 stream is reset with CANCEL); when the caller's signal did not fire, that is
 * a transport failure, so it becomes UNAVAILABLE as gRPC defines it and retry policies apply.
 */
export declare function callError(reason: unknown, signal: AbortSignal | undefined): TurnkeeperError;
/** The canonical gRPC status name of a code (`Code.InvalidArgument` -> `INVALID_ARGUMENT`). */
export declare function codeName(code: Code): string;
/**
 * Provider JSON or a history that a converter cannot carry (docs/converters.md); the message names
 * the place and the reason, such as `messages[3].content[1]: unsupported content part type 'input_audio' here`.
 */
export declare class ConversionError extends Error {
    readonly name = "ConversionError";
}
