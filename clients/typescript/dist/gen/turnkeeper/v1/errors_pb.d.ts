import type { GenEnum, GenFile } from "@bufbuild/protobuf/codegenv2";
/**
 * Describes the file turnkeeper/v1/errors.proto.
 */
export declare const file_turnkeeper_v1_errors: GenFile;
/**
 * ErrorReason is the `reason` of the `google.rpc.ErrorInfo` attached to every error status.
 * The ErrorInfo domain is `turnkeeper.v1` and the reason is the value's full name, such as `ERROR_REASON_INVALID_HISTORY`.
 *
 * @generated from enum turnkeeper.v1.ErrorReason
 */
export declare enum ErrorReason {
    /**
     * Not set; never returned by the server.
     *
     * @generated from enum value: ERROR_REASON_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * A history row is malformed: unknown role, tool row without `tool_call_id`, misplaced breadcrumb, and so on.
     *
     * @generated from enum value: ERROR_REASON_INVALID_HISTORY = 1;
     */
    INVALID_HISTORY = 1,
    /**
     * A profile is malformed: duplicate provider alias, zero context window, negative or non-finite price, and so on.
     *
     * @generated from enum value: ERROR_REASON_INVALID_PROFILE = 2;
     */
    INVALID_PROFILE = 2,
    /**
     * The limits or the mode of a request are missing or do not go together, such as a tool-result cap given both
     * explicitly and through profiles.
     *
     * @generated from enum value: ERROR_REASON_INVALID_LIMITS = 3;
     */
    INVALID_LIMITS = 3,
    /**
     * The request holds more rows, or more bytes, than the server accepts.
     *
     * @generated from enum value: ERROR_REASON_REQUEST_TOO_LARGE = 4;
     */
    REQUEST_TOO_LARGE = 4,
    /**
     * The prepared request does not fit the model's capacity; a CapacityReport is attached.
     *
     * @generated from enum value: ERROR_REASON_CONTEXT_WINDOW_EXCEEDED = 5;
     */
    CONTEXT_WINDOW_EXCEEDED = 5,
    /**
     * A TrimEvents request is malformed, such as an unreadable cursor.
     *
     * @generated from enum value: ERROR_REASON_INVALID_SUBSCRIPTION = 6;
     */
    INVALID_SUBSCRIPTION = 6,
    /**
     * The server is shutting down and accepts no new calls or subscriptions (status UNAVAILABLE):
     * call again, or subscribe again with the last cursor, on another replica or after the restart.
     *
     * @generated from enum value: ERROR_REASON_SHUTTING_DOWN = 7;
     */
    SHUTTING_DOWN = 7,
    /**
     * A ReportedUsage is missing where the mode needs it, given where nothing uses it, or inconsistent
     * (tool-schema tokens above the estimated input tokens).
     *
     * @generated from enum value: ERROR_REASON_INVALID_USAGE = 9;
     */
    INVALID_USAGE = 9,
    /**
     * A ClassifyProviderError request is malformed, such as an HTTP status outside 100-599.
     *
     * @generated from enum value: ERROR_REASON_INVALID_PROVIDER_ERROR = 10;
     */
    INVALID_PROVIDER_ERROR = 10,
    /**
     * The server is at a load limit (status RESOURCE_EXHAUSTED): the request bytes in flight would
     * exceed the server's budget, or too many large requests run at once. Nothing was done; a
     * google.rpc.RetryInfo says when to retry, and ErrorInfo metadata names the `limit` that was hit.
     *
     * @generated from enum value: ERROR_REASON_OVERLOADED = 11;
     */
    OVERLOADED = 11,
    /**
     * The call carries no bearer token, or one the server does not know (status UNAUTHENTICATED). Send
     * `authorization: Bearer <token>` metadata with a token from the server's token file.
     *
     * @generated from enum value: ERROR_REASON_UNAUTHENTICATED = 12;
     */
    UNAUTHENTICATED = 12,
    /**
     * The token is valid but may not do this (status PERMISSION_DENIED): act as another runtime than the
     * one it is issued for (`CallerContext.runtime_id`), or subscribe to TrimEvents without that right.
     *
     * @generated from enum value: ERROR_REASON_PERMISSION_DENIED = 13;
     */
    PERMISSION_DENIED = 13,
    /**
     * The request bytes do not decode as the RPC's request message (a truncated varint or length, a
     * wire type 6 or 7, a string that is not UTF-8, nesting deeper than 100...). The BadRequest names
     * each top-level request field whose bytes do not decode, or the empty path when the request's
     * own framing is broken.
     *
     * @generated from enum value: ERROR_REASON_MALFORMED_REQUEST = 14;
     */
    MALFORMED_REQUEST = 14,
    /**
     * The server failed on a request it should have answered (status INTERNAL); the failure is logged
     * with its trace. Nothing was published; the request may be retried.
     *
     * @generated from enum value: ERROR_REASON_INTERNAL = 15;
     */
    INTERNAL = 15,
    /**
     * The request's CallerContext cannot be used (status INVALID_ARGUMENT): an id is longer than
     * 256 bytes of UTF-8. The field violation names the id.
     *
     * @generated from enum value: ERROR_REASON_INVALID_CALLER = 16;
     */
    INVALID_CALLER = 16
}
/**
 * Describes the enum turnkeeper.v1.ErrorReason.
 */
export declare const ErrorReasonSchema: GenEnum<ErrorReason>;
