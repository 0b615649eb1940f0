import type { GenEnum, GenFile, GenMessage } from "@bufbuild/protobuf/codegenv2";
import type { JsonObject, Message } from "@bufbuild/protobuf";
/**
 * Describes the file turnkeeper/v1/history.proto.
 */
export declare const file_turnkeeper_v1_history: GenFile;
/**
 * ToolCall is one structured tool invocation requested by the assistant.
 *
 * @generated from message turnkeeper.v1.ToolCall
 */
export type ToolCall = Message<"turnkeeper.v1.ToolCall"> & {
    /**
     * The provider-assigned call identifier that the matching tool result echoes in `tool_call_id`.
     *
     * @generated from field: string id = 1;
     */
    id: string;
    /**
     * The name of the tool being called.
     *
     * @generated from field: string name = 2;
     */
    name: string;
    /**
     * The call arguments exactly as the provider produced them, usually a JSON object as text.
     *
     * @generated from field: string arguments = 3;
     */
    arguments: string;
};
/**
 * Describes the message turnkeeper.v1.ToolCall.
 * Use `create(ToolCallSchema)` to create a new message.
 */
export declare const ToolCallSchema: GenMessage<ToolCall>;
/**
 * Attachment is an image a tool declared as part of its result.
 * Attachments are priced at 1,600 tokens each while they are sent (tool results of the current user turn)
 * and never as text; the payload itself is carried through untouched.
 *
 * @generated from message turnkeeper.v1.Attachment
 */
export type Attachment = Message<"turnkeeper.v1.Attachment"> & {
    /**
     * The media type of the payload, for example `image/png`.
     *
     * @generated from field: string media_type = 1;
     */
    mediaType: string;
    /**
     * Where the image comes from.
     *
     * @generated from oneof turnkeeper.v1.Attachment.source
     */
    source: {
        /**
         * The image bytes inline.
         *
         * @generated from field: bytes data = 2;
         */
        value: Uint8Array;
        case: "data";
    } | {
        /**
         * A reference the runtime can load: a path, an `https://` URL or a `data:` URL.
         *
         * @generated from field: string uri = 3;
         */
        value: string;
        case: "uri";
    } | {
        case: undefined;
        value?: undefined;
    };
};
/**
 * Describes the message turnkeeper.v1.Attachment.
 * Use `create(AttachmentSchema)` to create a new message.
 */
export declare const AttachmentSchema: GenMessage<Attachment>;
/**
 * ChatMessage is one provider-facing row of the working history.
 *
 * @generated from message turnkeeper.v1.ChatMessage
 */
export type ChatMessage = Message<"turnkeeper.v1.ChatMessage"> & {
    /**
     * The role of the row. Required.
     *
     * @generated from field: turnkeeper.v1.Role role = 1;
     */
    role: Role;
    /**
     * The text content. On user rows, `[IMAGE:<ref>]` markers with a loadable ref are images sent to the model.
     *
     * @generated from field: string content = 2;
     */
    content: string;
    /**
     * The identifier of the tool call this row answers. Required on tool rows; may also be set on `[Tool results]` carrier rows.
     *
     * @generated from field: string tool_call_id = 3;
     */
    toolCallId: string;
    /**
     * The structured tool calls of an assistant row. Only allowed on assistant rows.
     *
     * @generated from field: repeated turnkeeper.v1.ToolCall tool_calls = 4;
     */
    toolCalls: ToolCall[];
    /**
     * Images the tool declared. Only allowed on tool rows and on `[Tool results]` carrier rows.
     *
     * @generated from field: repeated turnkeeper.v1.Attachment attachments = 5;
     */
    attachments: Attachment[];
    /**
     * True for the synthetic breadcrumb row that says earlier context was omitted.
     * A breadcrumb is a user row, never a turn boundary, and may only stand right after the leading system rows.
     *
     * @generated from field: bool breadcrumb = 6;
     */
    breadcrumb: boolean;
    /**
     * What the row's provider format carries that turnkeeper does not price, kept so a converter can
     * give the provider back exactly what it sent: the skeleton of the provider fragment the row came
     * from, under one key naming the format (`openai_chat`, `openai_responses`, `anthropic`, `langchain`).
     * docs/converters.md defines the skeletons. The service never prices, validates or changes it:
     * a kept row comes back with its passthrough untouched. Empty when the row has nothing to carry.
     *
     * @generated from field: google.protobuf.Struct passthrough = 7;
     */
    passthrough?: JsonObject | undefined;
    /**
     * True on a tool-exchange summary row turnkeeper wrote in place of a collapsed turn's tool calls and results
     * (spec §13.1). Only allowed on assistant rows without tool calls. A summary row a runtime sends back is an
     * assistant row like any other, never a turn boundary, and a turn holding only it is not collapsed again.
     *
     * @generated from field: bool tool_exchange_summary = 8;
     */
    toolExchangeSummary: boolean;
    /**
     * True on a real user row (a turn boundary) whose whole turn every trim keeps (spec §15.1): the pinned turns that
     * stand before a cut move ahead of the breadcrumb. A pin on any other row is INVALID_ARGUMENT.
     *
     * @generated from field: bool pinned = 9;
     */
    pinned: boolean;
    /**
     * True on the summary row (spec §15.2): a user row whose content the runtime wrote from a summarizer's answer
     * (PlanCompaction). At most one, right after the leading system rows and before any breadcrumb; it belongs to the
     * fixed prefix, is never a turn boundary, never dropped and never projected, and is priced as text.
     *
     * @generated from field: bool summary = 10;
     */
    summary: boolean;
};
/**
 * Describes the message turnkeeper.v1.ChatMessage.
 * Use `create(ChatMessageSchema)` to create a new message.
 */
export declare const ChatMessageSchema: GenMessage<ChatMessage>;
/**
 * AssistantToolCalls is a structured assistant step that requested tools.
 *
 * @generated from message turnkeeper.v1.AssistantToolCalls
 */
export type AssistantToolCalls = Message<"turnkeeper.v1.AssistantToolCalls"> & {
    /**
     * The assistant text that accompanied the calls, possibly empty.
     *
     * @generated from field: string text = 1;
     */
    text: string;
    /**
     * The requested tool calls.
     *
     * @generated from field: repeated turnkeeper.v1.ToolCall tool_calls = 2;
     */
    toolCalls: ToolCall[];
    /**
     * The model's reasoning text, if the provider returned any. It is priced as text.
     *
     * @generated from field: string reasoning = 3;
     */
    reasoning: string;
    /**
     * What the step's provider format carries that turnkeeper does not price, kept so a converter can
     * give the provider back exactly what it sent: the skeleton of the provider fragment the step came
     * from, under one key naming the format (`openai_chat`, `openai_responses`, `anthropic`, `langchain`).
     * docs/converters.md defines the skeletons. The service never prices, validates or changes it:
     * a kept step comes back with its passthrough untouched. Empty when the step has nothing to carry.
     *
     * @generated from field: google.protobuf.Struct passthrough = 4;
     */
    passthrough?: JsonObject | undefined;
};
/**
 * Describes the message turnkeeper.v1.AssistantToolCalls.
 * Use `create(AssistantToolCallsSchema)` to create a new message.
 */
export declare const AssistantToolCallsSchema: GenMessage<AssistantToolCalls>;
/**
 * ToolResult is the result of one tool call inside a ToolResults row.
 *
 * @generated from message turnkeeper.v1.ToolResult
 */
export type ToolResult = Message<"turnkeeper.v1.ToolResult"> & {
    /**
     * The identifier of the tool call this result answers. Required.
     *
     * @generated from field: string tool_call_id = 1;
     */
    toolCallId: string;
    /**
     * The name of the tool that produced the result. It is not priced.
     *
     * @generated from field: string tool_name = 2;
     */
    toolName: string;
    /**
     * The text output of the tool.
     *
     * @generated from field: string content = 3;
     */
    content: string;
    /**
     * Images the tool declared with its result.
     *
     * @generated from field: repeated turnkeeper.v1.Attachment attachments = 4;
     */
    attachments: Attachment[];
    /**
     * What the result's provider format carries that turnkeeper does not price, kept so a converter can
     * give the provider back exactly what it sent: the skeleton of the provider fragment the result came
     * from, under one key naming the format (`openai_chat`, `openai_responses`, `anthropic`, `langchain`).
     * docs/converters.md defines the skeletons. The service never prices, validates or changes it:
     * a kept result comes back with its passthrough untouched. Empty when the result has nothing to carry.
     *
     * @generated from field: google.protobuf.Struct passthrough = 5;
     */
    passthrough?: JsonObject | undefined;
};
/**
 * Describes the message turnkeeper.v1.ToolResult.
 * Use `create(ToolResultSchema)` to create a new message.
 */
export declare const ToolResultSchema: GenMessage<ToolResult>;
/**
 * ToolResults is a structured row carrying the results of one or more tool calls.
 *
 * @generated from message turnkeeper.v1.ToolResults
 */
export type ToolResults = Message<"turnkeeper.v1.ToolResults"> & {
    /**
     * The results, each priced as one provider tool row.
     *
     * @generated from field: repeated turnkeeper.v1.ToolResult results = 1;
     */
    results: ToolResult[];
};
/**
 * Describes the message turnkeeper.v1.ToolResults.
 * Use `create(ToolResultsSchema)` to create a new message.
 */
export declare const ToolResultsSchema: GenMessage<ToolResults>;
/**
 * ConversationMessage is one row of the structured agent history.
 *
 * @generated from message turnkeeper.v1.ConversationMessage
 */
export type ConversationMessage = Message<"turnkeeper.v1.ConversationMessage"> & {
    /**
     * The kind of row. Exactly one must be set.
     *
     * @generated from oneof turnkeeper.v1.ConversationMessage.message
     */
    message: {
        /**
         * A plain chat row. A user chat row that is not a breadcrumb or `[Tool results]` carrier starts a turn.
         *
         * @generated from field: turnkeeper.v1.ChatMessage chat = 1;
         */
        value: ChatMessage;
        case: "chat";
    } | {
        /**
         * An assistant step that requested tools.
         *
         * @generated from field: turnkeeper.v1.AssistantToolCalls assistant_tool_calls = 2;
         */
        value: AssistantToolCalls;
        case: "assistantToolCalls";
    } | {
        /**
         * The results of tool calls.
         *
         * @generated from field: turnkeeper.v1.ToolResults tool_results = 3;
         */
        value: ToolResults;
        case: "toolResults";
    } | {
        case: undefined;
        value?: undefined;
    };
};
/**
 * Describes the message turnkeeper.v1.ConversationMessage.
 * Use `create(ConversationMessageSchema)` to create a new message.
 */
export declare const ConversationMessageSchema: GenMessage<ConversationMessage>;
/**
 * ChatHistory is a provider-facing working history, oldest row first.
 *
 * @generated from message turnkeeper.v1.ChatHistory
 */
export type ChatHistory = Message<"turnkeeper.v1.ChatHistory"> & {
    /**
     * The rows, oldest first.
     *
     * @generated from field: repeated turnkeeper.v1.ChatMessage messages = 1;
     */
    messages: ChatMessage[];
};
/**
 * Describes the message turnkeeper.v1.ChatHistory.
 * Use `create(ChatHistorySchema)` to create a new message.
 */
export declare const ChatHistorySchema: GenMessage<ChatHistory>;
/**
 * ConversationHistory is a structured agent history, oldest row first.
 *
 * @generated from message turnkeeper.v1.ConversationHistory
 */
export type ConversationHistory = Message<"turnkeeper.v1.ConversationHistory"> & {
    /**
     * The rows, oldest first.
     *
     * @generated from field: repeated turnkeeper.v1.ConversationMessage messages = 1;
     */
    messages: ConversationMessage[];
};
/**
 * Describes the message turnkeeper.v1.ConversationHistory.
 * Use `create(ConversationHistorySchema)` to create a new message.
 */
export declare const ConversationHistorySchema: GenMessage<ConversationHistory>;
/**
 * History is a conversation history in either of its two shapes.
 *
 * @generated from message turnkeeper.v1.History
 */
export type History = Message<"turnkeeper.v1.History"> & {
    /**
     * The shape of the history. Exactly one must be set; results come back in the same shape.
     *
     * @generated from oneof turnkeeper.v1.History.shape
     */
    shape: {
        /**
         * Provider-facing ChatMessage rows.
         *
         * @generated from field: turnkeeper.v1.ChatHistory chat = 1;
         */
        value: ChatHistory;
        case: "chat";
    } | {
        /**
         * Structured ConversationMessage rows.
         *
         * @generated from field: turnkeeper.v1.ConversationHistory conversation = 2;
         */
        value: ConversationHistory;
        case: "conversation";
    } | {
        case: undefined;
        value?: undefined;
    };
};
/**
 * Describes the message turnkeeper.v1.History.
 * Use `create(HistorySchema)` to create a new message.
 */
export declare const HistorySchema: GenMessage<History>;
/**
 * Role is the provider-facing role of a ChatMessage row.
 *
 * @generated from enum turnkeeper.v1.Role
 */
export declare enum Role {
    /**
     * The role was not set. It is rejected with INVALID_ARGUMENT.
     *
     * @generated from enum value: ROLE_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * A system prompt row. The leading run of system rows is always kept.
     *
     * @generated from enum value: ROLE_SYSTEM = 1;
     */
    SYSTEM = 1,
    /**
     * A user row. A user row that is neither a breadcrumb nor a `[Tool results]` carrier starts a turn.
     *
     * @generated from enum value: ROLE_USER = 2;
     */
    USER = 2,
    /**
     * An assistant reply, optionally carrying structured tool calls.
     *
     * @generated from enum value: ROLE_ASSISTANT = 3;
     */
    ASSISTANT = 3,
    /**
     * The result of one tool call, identified by `tool_call_id`.
     *
     * @generated from enum value: ROLE_TOOL = 4;
     */
    TOOL = 4
}
/**
 * Describes the enum turnkeeper.v1.Role.
 */
export declare const RoleSchema: GenEnum<Role>;
