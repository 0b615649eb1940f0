import { type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { Role, type Attachment, type ChatMessage, type History, type ToolCall } from "../gen/turnkeeper/v1/history_pb.js";
/** The server's default breadcrumb text (docs/semantics.md, Trims). */
export declare const DEFAULT_BREADCRUMB = "[earlier turns omitted to fit the context window]";
export declare const CARRIER_PREFIX = "[Tool results]";
export type Shape = "chat" | "conversation";
/** The stream a skeleton slot takes priced text from (one field except on conversation steps). */
export type Stream = "text" | "reasoning";
export interface ConvertOptions {
    /** The history shape to build; `chat` by default. */
    shape?: Shape;
    /** User texts right after the leading system rows that mark the breadcrumb (default: the server's). */
    breadcrumbTexts?: readonly string[];
    /** The spec §15 marks kept beside the provider JSON ({@link turnMarks}), set on the rows imported. */
    marks?: TurnMarks;
}
/**
 * The spec §15 marks of a history, which no provider format can carry: a provider refuses a key it
 * does not know, so the summary row and a pinned turn's user row export as plain user messages, and
 * the runtime keeps these marks beside the provider JSON.
 */
export interface TurnMarks {
    /** The first row after the leading system rows is the summary row (§15.2). */
    readonly summary?: boolean;
    /**
     * The pinned turns (§15.1) by their 0-based position among the history's turns, ascending; a turn
     * starts at a real user row (not the summary, the breadcrumb or a `[Tool results]` carrier).
     */
    readonly pinnedTurns?: readonly number[];
}
/**
 * What the converters take: parsed JSON, or the same values as the SDKs type them (the `openai` and
 * `@anthropic-ai/sdk` interfaces such as `ChatCompletionMessageParam[]`, `ResponseInputItem[]`,
 * `MessageCreateParams`, which are not `JsonValue`s to the compiler). It is read as JSON (see
 * {@link plainJson}) and checked at run time.
 */
export type ProviderJson = JsonValue | object;
/**
 * The input as plain JSON: what `JSON.stringify` makes of it (a property whose value is
 * `undefined` is dropped, `toJSON` is honoured), so SDK objects read as the JSON their SDK sends.
 */
export declare function plainJson(value: ProviderJson, where: string, replacer?: (key: string, value: unknown) => unknown): JsonValue;
export declare function isObject(value: unknown): value is JsonObject;
export declare function expectString(value: unknown, where: string): string;
export declare function expectObject(value: unknown, where: string): JsonObject;
export declare function expectArray(value: unknown, where: string): JsonValue[];
/** A JSON value for an error message: strings as they are, anything else as JSON. */
export declare function shown(value: unknown): string;
/** The length of a string in code points, the unit of every skeleton slot. */
export declare function codePoints(text: string): number;
export declare function copy<T extends JsonValue>(value: T): T;
/** Deep equality of JSON values (object key order does not matter). */
export declare function jsonEqual(a: unknown, b: unknown): boolean;
/** Compact JSON with sorted keys: the one text every client writes for a JSON value. */
export declare function canonicalJson(value: JsonValue): string;
export declare function isCarrier(content: string): boolean;
export declare function marker(url: string, where: string): string;
/** User text as text runs (strings) and the marker texts of sendable `[IMAGE:<ref>]` markers. */
export declare function splitMarkers(content: string): {
    text?: string;
    marker?: string;
}[];
/** The URL inside a marker text `[IMAGE:<url>]`. */
export declare function markerUrl(markerText: string): string;
export declare function parseDataUrl(url: string): {
    mediaType: string;
    payload: string;
} | undefined;
export declare function decodeBase64(payload: string, where: string): Uint8Array;
export declare function encodeBase64(data: Uint8Array): string;
/** A data URL becomes inline bytes, any other URL a `uri` (no media type is guessed). */
export declare function attachmentFromUrl(url: string, where: string): Attachment;
export declare function attachmentUrl(attachment: Attachment, where: string): string;
/** A provider row being imported: the row, its priced text as pieces in provider order, its skeleton. */
export declare class Row {
    readonly message: ChatMessage;
    skeleton: JsonObject;
    readonly pieces: [Stream, string][];
    constructor(message: ChatMessage, skeleton: JsonObject);
    /** Adds priced text; returns its length, which the skeleton keeps in the text's place. */
    add(text: string, stream?: Stream): number;
    joined(stream?: Stream): string;
}
export declare function newRow(role: Role, skeleton?: JsonObject): Row;
/** One provider row on its way out, with its reasoning (undefined where it is in `content`) and skeleton. */
export interface FlatRow {
    message: ChatMessage;
    reasoning: string | undefined;
    skeleton: JsonObject | undefined;
}
export type DefaultSkeleton = (row: FlatRow, previous: FlatRow | undefined) => JsonObject;
/** Fills content, sets the caller's marks, marks the breadcrumb, drops skeletons equal to the default and builds the history. */
export declare function finish(rows: Row[], format: string, defaultSkeleton: DefaultSkeleton, options: ConvertOptions | undefined): History;
/** A real user row (spec §0): a turn boundary, the only row a pin may mark (§15.1). */
export declare function startsTurn(message: ChatMessage): boolean;
/**
 * The summary and pinned-turn marks of a history, to keep beside its provider JSON and pass back as
 * `marks` when importing it again. A mark no provider position can name (a pin on a row that starts
 * no turn, a summary row anywhere but right after the leading system rows) throws
 * {@link ConversionError}: the server refuses such a history too.
 */
export declare function turnMarks(history: History): {
    summary: boolean;
    pinnedTurns: number[];
};
/** The provider rows a history stands for, in order, with their `format` skeletons. */
export declare function flatRows(history: History, format: string): FlatRow[];
/** Reads a row's priced text back in the order the skeleton's slots name it. */
export declare class Cursor {
    private readonly text;
    private readonly where;
    private readonly field;
    private pos;
    constructor(text: string, where: string, field: string);
    take(length: unknown, where: string): string;
    /** The URL of the `[IMAGE:<url>]` marker at the current position. */
    markerUrl(where: string): string;
    done(): void;
}
/** The text and reasoning cursors of one row, its attachments and tool calls in order. */
export declare class Streams {
    private readonly where;
    readonly text: Cursor;
    readonly reasoning: Cursor;
    private readonly attachments;
    private readonly calls;
    constructor(row: FlatRow, where: string);
    attachment(where: string): Attachment;
    /** The next tool call; undefined once the row has no more (the sweep may have removed some). */
    call(): ToolCall | undefined;
    done(): void;
}
/** Images of a tool row or a `[Tool results]` carrier are attachments; other user rows' are markers. */
export declare function imagesAreAttachments(message: ChatMessage): boolean;
/** A user row whose `[IMAGE:]` markers are plain text: the breadcrumb, the summary row (priced as text, spec §15.2) or a carrier. */
export declare function markerTextRow(message: ChatMessage): boolean;
/** The concatenated `text` of the parts whose type is one of `types`. */
export declare function partTexts(parts: JsonObject[], types: readonly string[]): string;
/**
 * An item or part turnkeeper has no row field for (a hosted tool call, a file, a compaction): its
 * canonical JSON is priced as text in the row, and its skeleton is `{"opaque": length}`, so it is
 * counted, stays with its turn and comes back as it went in.
 */
export declare function addOpaque(row: Row, value: JsonValue, stream?: Stream): JsonObject;
export declare function isOpaque(skeleton: JsonObject): boolean;
/** The opaque value whose canonical JSON is at the cursor. */
export declare function takeOpaque(cursor: Cursor, skeleton: JsonObject, where: string): JsonValue;
/** The provider items a skeleton stands for: several for a grouped row (`{"items": [...]}`), else itself. */
export declare function skeletonItems(skeleton: JsonObject): JsonObject[];
/**
 * The default items of a user or assistant row (Responses and Agents SDK alike): a user row's
 * content split at its image markers into parts, an assistant row's calls after its text.
 */
export declare function rowItems(message: ChatMessage, item: JsonObject, n: number, image: () => JsonObject): JsonObject[];
/**
 * A reasoning item's row (Responses and Agents SDK alike): each of `parts`' keys holds a list of
 * parts of its type, whose texts the row carries as reasoning.
 */
export declare function reasoningRow(item: JsonObject, skeleton: JsonObject, where: string, parts: readonly (readonly [string, string])[]): Row;
