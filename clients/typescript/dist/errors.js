import { Code, ConnectError } from "@connectrpc/connect";
import { BadRequestSchema, ErrorInfoSchema, PreconditionFailureSchema, RetryInfoSchema, } from "./gen/google/rpc/error_details_pb.js";
import { ErrorReason, ErrorReasonSchema } from "./gen/turnkeeper/v1/errors_pb.js";
import { CapacityReportSchema } from "./gen/turnkeeper/v1/trim_pb.js";
/** The `google.rpc.ErrorInfo` domain of every error the server raises. */
export const ERROR_DOMAIN = "turnkeeper.v1";
/**
 * An RPC that failed, with the rich details of the server's `google.rpc.Status` decoded.
 *
 * The original ConnectError stays available as `cause`.
 */
export class TurnkeeperError extends Error {
    name = "TurnkeeperError";
    /** The gRPC status code (Connect's Code values equal the gRPC numbers). */
    code;
    /** The canonical gRPC name of `code`, such as `INVALID_ARGUMENT`. */
    codeName;
    /** The status message without the `[code]` prefix Connect adds to `message`. */
    rawMessage;
    /** The ErrorInfo reason as sent, such as `ERROR_REASON_INVALID_HISTORY`; empty when the status had no ErrorInfo. */
    reasonName;
    /** `reasonName` as an enum value; UNSPECIFIED when absent or unknown to this client version. */
    reason;
    /** The ErrorInfo domain (`turnkeeper.v1` for server errors); empty when absent. */
    domain;
    /** The ErrorInfo metadata. */
    errorMetadata;
    /** Every `google.rpc.BadRequest` field violation, in server order. */
    fieldViolations;
    /** Every `google.rpc.PreconditionFailure` violation. */
    preconditionViolations;
    /** The `turnkeeper.v1.CapacityReport` attached to CONTEXT_WINDOW_EXCEEDED failures. */
    capacityReport;
    /** The `google.rpc.RetryInfo` delay an overloaded server asks for, in ms (the client's `RetryPolicy` honours it). */
    retryDelayMs;
    cause;
    constructor(cause) {
        super(cause.message);
        this.cause = cause;
        this.code = cause.code;
        this.codeName = codeName(cause.code);
        this.rawMessage = cause.rawMessage;
        const info = cause.findDetails(ErrorInfoSchema)[0];
        this.reasonName = info?.reason ?? "";
        this.reason = ErrorReasonSchema.values.find((v) => v.name === this.reasonName)?.number ?? ErrorReason.UNSPECIFIED;
        this.domain = info?.domain ?? "";
        this.errorMetadata = { ...info?.metadata };
        this.fieldViolations = cause
            .findDetails(BadRequestSchema)
            .flatMap((b) => b.fieldViolations)
            .map((v) => ({ field: v.field, description: v.description }));
        this.preconditionViolations = cause.findDetails(PreconditionFailureSchema).flatMap((p) => p.violations);
        this.capacityReport = cause.findDetails(CapacityReportSchema)[0];
        const delay = cause.findDetails(RetryInfoSchema)[0]?.retryDelay;
        this.retryDelayMs = delay === undefined ? undefined : Number(delay.seconds) * 1000 + delay.nanos / 1e6;
    }
    /** Wraps what a Connect call threw; anything that is not a ConnectError is wrapped as UNKNOWN. */
    static from(reason) {
        return reason instanceof TurnkeeperError ? reason : new TurnkeeperError(ConnectError.from(reason));
    }
}
/**
 * Wraps what a call threw. connect-node reports a connection that died under an open stream as
 * CANCELLED (the HTTP/2 stream is reset with CANCEL); when the caller's signal did not fire, that is
 * a transport failure, so it becomes UNAVAILABLE as gRPC defines it and retry policies apply.
 */
export function callError(reason, signal) {
    const cause = ConnectError.from(reason);
    // A status the server sent carries its grpc-status trailer; one connect-node made up locally does not.
    const fromServer = cause.metadata.has("grpc-status");
    if (cause.code === Code.Canceled && !fromServer && !signal?.aborted) {
        return new TurnkeeperError(new ConnectError(cause.rawMessage, Code.Unavailable, cause.metadata, undefined, cause));
    }
    return TurnkeeperError.from(cause);
}
/** The canonical gRPC status name of a code (`Code.InvalidArgument` -> `INVALID_ARGUMENT`). */
export function codeName(code) {
    // Connect spells it "Canceled"; gRPC's canonical name is CANCELLED.
    if (code === Code.Canceled)
        return "CANCELLED";
    const name = Code[code];
    return name === undefined ? `CODE_${code}` : name.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}
/**
 * Provider JSON or a history that a converter cannot carry (docs/converters.md); the message names
 * the place and the reason, such as `messages[3].content[1]: unsupported content part type 'input_audio' here`.
 */
export class ConversionError extends Error {
    name = "ConversionError";
}
//# sourceMappingURL=errors.js.map