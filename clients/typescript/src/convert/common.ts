// Pieces every converter shares: rows being built, skeletons, cursors, markers, attachments.
// docs/converters.md is the mapping; the vectors in tests/conformance/converters pin it.
import { create, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { ConversionError } from "../errors.js";
import {
  AttachmentSchema,
  AssistantToolCallsSchema,
  ChatMessageSchema,
  ConversationMessageSchema,
  HistorySchema,
  Role,
  ToolResultSchema,
  type Attachment,
  type ChatMessage,
  type ConversationMessage,
  type History,
  type ToolCall,
} from "../gen/turnkeeper/v1/history_pb.js";

/** The server's default breadcrumb text (docs/semantics.md, Trims). */
export const DEFAULT_BREADCRUMB = "[earlier turns omitted to fit the context window]";
export const CARRIER_PREFIX = "[Tool results]";
const MARKER_OPEN = "[IMAGE:";

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
export function plainJson(value: ProviderJson, where: string, replacer?: (key: string, value: unknown) => unknown): JsonValue {
  let text: string | undefined;
  try {
    text = JSON.stringify(value, replacer);
  } catch (e) {
    throw new ConversionError(`${where}: not JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (text === undefined) throw new ConversionError(`${where}: not JSON`);
  return JSON.parse(text) as JsonValue;
}

export function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export function expectString(value: unknown, where: string): string {
  if (typeof value !== "string") throw new ConversionError(`${where}: expected a string, got ${kindOf(value)}`);
  return value;
}

export function expectObject(value: unknown, where: string): JsonObject {
  if (!isObject(value)) throw new ConversionError(`${where}: expected an object, got ${kindOf(value)}`);
  return value;
}

export function expectArray(value: unknown, where: string): JsonValue[] {
  if (!Array.isArray(value)) throw new ConversionError(`${where}: expected an array, got ${kindOf(value)}`);
  return value as JsonValue[];
}

function kindOf(value: unknown): string {
  return value === null ? "null" : Array.isArray(value) ? "array" : typeof value;
}

function expectLength(value: unknown, where: string): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0) {
    throw new ConversionError(`${where}: passthrough slot is not a length`);
  }
  return value;
}

/** A JSON value for an error message: strings as they are, anything else as JSON. */
export function shown(value: unknown): string {
  return typeof value === "string" ? value : (JSON.stringify(value) ?? String(value));
}

/** The length of a string in code points, the unit of every skeleton slot. */
export function codePoints(text: string): number {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

export function copy<T extends JsonValue>(value: T): T {
  return structuredClone(value);
}

/** Deep equality of JSON values (object key order does not matter). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  if (isObject(a) && isObject(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => k in b && jsonEqual(a[k], b[k]));
  }
  return false;
}

function byCodePoint(a: string, b: string): number {
  const x = Array.from(a, (c) => c.codePointAt(0) ?? 0);
  const y = Array.from(b, (c) => c.codePointAt(0) ?? 0);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return (x[i] ?? 0) - (y[i] ?? 0);
  return x.length - y.length;
}

/** Compact JSON with sorted keys: the one text every client writes for a JSON value. */
export function canonicalJson(value: JsonValue): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (isObject(value)) {
    const keys = Object.keys(value).sort(byCodePoint);
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k] as JsonValue)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

export function isCarrier(content: string): boolean {
  return content.startsWith(CARRIER_PREFIX);
}

function sendableUrl(ref: string): boolean {
  const trimmed = ref.trim();
  return trimmed.startsWith("http://") || trimmed.startsWith("https://") || trimmed.startsWith("data:");
}

export function marker(url: string, where: string): string {
  if (url.includes("]")) throw new ConversionError(`${where}: image URL contains ']' and cannot be an [IMAGE:] marker`);
  return `${MARKER_OPEN}${url}]`;
}

/** User text as text runs (strings) and the marker texts of sendable `[IMAGE:<ref>]` markers. */
export function splitMarkers(content: string): { text?: string; marker?: string }[] {
  const parts: { text?: string; marker?: string }[] = [];
  let textStart = 0;
  let pos = 0;
  for (;;) {
    const start = content.indexOf(MARKER_OPEN, pos);
    if (start < 0) break;
    const end = content.indexOf("]", start + MARKER_OPEN.length);
    if (end < 0) break;
    if (sendableUrl(content.slice(start + MARKER_OPEN.length, end))) {
      if (start > textStart) parts.push({ text: content.slice(textStart, start) });
      parts.push({ marker: content.slice(start, end + 1) });
      textStart = end + 1;
    }
    pos = end + 1;
  }
  if (textStart < content.length) parts.push({ text: content.slice(textStart) });
  return parts;
}

/** The URL inside a marker text `[IMAGE:<url>]`. */
export function markerUrl(markerText: string): string {
  return markerText.slice(MARKER_OPEN.length, -1);
}

export function parseDataUrl(url: string): { mediaType: string; payload: string } | undefined {
  if (!url.startsWith("data:")) return undefined;
  const comma = url.indexOf(",");
  if (comma < 0) return undefined;
  const header = url.slice("data:".length, comma);
  if (!header.endsWith(";base64")) return undefined;
  return { mediaType: header.slice(0, -";base64".length), payload: url.slice(comma + 1) };
}

export function decodeBase64(payload: string, where: string): Uint8Array {
  if (payload.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(payload)) {
    throw new ConversionError(`${where}: invalid base64 image data`);
  }
  return new Uint8Array(Buffer.from(payload, "base64"));
}

export function encodeBase64(data: Uint8Array): string {
  return Buffer.from(data).toString("base64");
}

/** A data URL becomes inline bytes, any other URL a `uri` (no media type is guessed). */
export function attachmentFromUrl(url: string, where: string): Attachment {
  const parsed = parseDataUrl(url);
  if (parsed !== undefined) {
    return create(AttachmentSchema, {
      mediaType: parsed.mediaType,
      source: { case: "data", value: decodeBase64(parsed.payload, where) },
    });
  }
  return create(AttachmentSchema, { source: { case: "uri", value: url } });
}

export function attachmentUrl(attachment: Attachment, where: string): string {
  const source = attachment.source;
  if (source.case === "data") return `data:${attachment.mediaType};base64,${encodeBase64(source.value)}`;
  if (source.case === "uri") return source.value;
  throw new ConversionError(`${where}: attachment has neither data nor uri`);
}

/** A provider row being imported: the row, its priced text as pieces in provider order, its skeleton. */
export class Row {
  readonly pieces: [Stream, string][] = [];
  constructor(
    readonly message: ChatMessage,
    public skeleton: JsonObject,
  ) {}

  /** Adds priced text; returns its length, which the skeleton keeps in the text's place. */
  add(text: string, stream: Stream = "text"): number {
    this.pieces.push([stream, text]);
    return codePoints(text);
  }

  joined(stream?: Stream): string {
    return this.pieces
      .filter(([s]) => stream === undefined || s === stream)
      .map(([, t]) => t)
      .join("");
  }
}

export function newRow(role: Role, skeleton: JsonObject = {}): Row {
  return new Row(create(ChatMessageSchema, { role }), skeleton);
}

/** One provider row on its way out, with its reasoning (undefined where it is in `content`) and skeleton. */
export interface FlatRow {
  message: ChatMessage;
  reasoning: string | undefined;
  skeleton: JsonObject | undefined;
}

export type DefaultSkeleton = (row: FlatRow, previous: FlatRow | undefined) => JsonObject;

/** Fills content, sets the caller's marks, marks the breadcrumb, drops skeletons equal to the default and builds the history. */
export function finish(
  rows: Row[],
  format: string,
  defaultSkeleton: DefaultSkeleton,
  options: ConvertOptions | undefined,
): History {
  for (const row of rows) row.message.content = row.joined();
  applyMarks(rows, options?.marks ?? {}, options?.breadcrumbTexts ?? [DEFAULT_BREADCRUMB]);
  let previous: FlatRow | undefined;
  for (const row of rows) {
    if (!jsonEqual(row.skeleton, defaultSkeleton({ message: row.message, reasoning: undefined, skeleton: undefined }, previous))) {
      row.message.passthrough = { [format]: row.skeleton };
    }
    previous = { message: row.message, reasoning: undefined, skeleton: row.skeleton };
  }
  return buildHistory(rows, options?.shape ?? "chat");
}

/** A real user row (spec §0): a turn boundary, the only row a pin may mark (§15.1). */
export function startsTurn(message: ChatMessage): boolean {
  return message.role === Role.USER && !message.breadcrumb && !message.summary && !isCarrier(message.content);
}

/**
 * The summary and pinned-turn marks of a history, to keep beside its provider JSON and pass back as
 * `marks` when importing it again. A mark no provider position can name (a pin on a row that starts
 * no turn, a summary row anywhere but right after the leading system rows) throws
 * {@link ConversionError}: the server refuses such a history too.
 */
export function turnMarks(history: History): { summary: boolean; pinnedTurns: number[] } {
  const rows = flatRows(history, "").map((row) => row.message);
  const first = rows.findIndex((row) => row.role !== Role.SYSTEM);
  const pinnedTurns: number[] = [];
  let turn = 0;
  rows.forEach((row, i) => {
    if (row.summary && i !== first) throw new ConversionError(`rows[${i}]: a summary row stands nowhere but right after the system rows`);
    if (startsTurn(row)) {
      if (row.pinned) pinnedTurns.push(turn);
      turn++;
    } else if (row.pinned) {
      throw new ConversionError(`rows[${i}]: pinned, but only a real user row starts a turn`);
    }
  });
  return { summary: rows[first]?.summary ?? false, pinnedTurns };
}

/**
 * Sets the caller's marks and finds the breadcrumb. Provider formats have no breadcrumb flag: a user
 * row with a known breadcrumb text is the breadcrumb the server inserted when it stands where one may
 * (spec §7, §15.1): right after the leading system rows, the summary row and the pinned turns before
 * it. Turns are counted without it, so the pins are set on the same walk.
 */
function applyMarks(rows: Row[], marks: TurnMarks, texts: readonly string[]): void {
  let leading = 0;
  while (leading < rows.length && rows[leading]?.message.role === Role.SYSTEM) leading++;
  const afterSystem = rows.slice(leading).map((row) => row.message);
  if (marks.summary === true) {
    const first = afterSystem[0];
    if (first === undefined || first.role !== Role.USER || first.attachments.length > 0 || isCarrier(first.content)) {
      throw new ConversionError("marks.summary: the first message after the system messages is no plain user message");
    }
    first.summary = true;
  }
  const pinned = new Set(marks.pinnedTurns ?? []);
  let turn = 0;
  let crumbMayFollow = true;
  for (const message of afterSystem) {
    if (message.summary) continue;
    const isCrumbText = message.role === Role.USER && texts.includes(message.content) && message.attachments.length === 0;
    if (crumbMayFollow && isCrumbText) {
      message.breadcrumb = true;
      crumbMayFollow = false;
    } else if (startsTurn(message)) {
      message.pinned = pinned.has(turn);
      crumbMayFollow = crumbMayFollow && message.pinned;
      turn++;
    } else if (turn === 0) {
      // Rows before the first real user row belong to the first turn (spec §0).
      crumbMayFollow = false;
    }
  }
  const missing = (marks.pinnedTurns ?? []).find((n) => !(Number.isInteger(n) && n >= 0 && n < turn));
  if (missing !== undefined) throw new ConversionError(`marks.pinnedTurns: turn ${missing} does not exist (the history has ${turn})`);
}

function buildHistory(rows: Row[], shape: Shape): History {
  if (shape === "chat") return create(HistorySchema, { shape: { case: "chat", value: { messages: rows.map((r) => r.message) } } });
  const out: ConversationMessage[] = [];
  const names = new Map<string, string>();
  for (const row of rows) {
    const m = row.message;
    if (m.role === Role.ASSISTANT && m.toolCalls.length > 0) {
      for (const call of m.toolCalls) names.set(call.id, call.name);
      const step = create(AssistantToolCallsSchema, {
        text: row.joined("text"),
        reasoning: row.joined("reasoning"),
        toolCalls: m.toolCalls,
      });
      if (m.passthrough !== undefined) step.passthrough = m.passthrough;
      out.push(create(ConversationMessageSchema, { message: { case: "assistantToolCalls", value: step } }));
    } else if (m.role === Role.TOOL) {
      const result = create(ToolResultSchema, {
        toolCallId: m.toolCallId,
        toolName: names.get(m.toolCallId) ?? "",
        content: m.content,
        attachments: m.attachments,
      });
      if (m.passthrough !== undefined) result.passthrough = m.passthrough;
      const last = out[out.length - 1];
      if (last?.message.case === "toolResults") last.message.value.results.push(result);
      else out.push(create(ConversationMessageSchema, { message: { case: "toolResults", value: { results: [result] } } }));
    } else {
      out.push(create(ConversationMessageSchema, { message: { case: "chat", value: m } }));
    }
  }
  return create(HistorySchema, { shape: { case: "conversation", value: { messages: out } } });
}

function skeletonOf(passthrough: JsonObject | undefined, format: string): JsonObject | undefined {
  if (format === "" || passthrough === undefined || !(format in passthrough)) return undefined;
  const value = passthrough[format];
  if (!isObject(value)) throw new ConversionError(`passthrough.${format}: expected an object`);
  return value;
}

/** The provider rows a history stands for, in order, with their `format` skeletons. */
export function flatRows(history: History, format: string): FlatRow[] {
  const shape = history.shape;
  if (shape.case === "chat") {
    return shape.value.messages.map((m) => ({ message: m, reasoning: undefined, skeleton: skeletonOf(m.passthrough, format) }));
  }
  if (shape.case !== "conversation") throw new ConversionError("history: neither chat nor conversation is set");
  const rows: FlatRow[] = [];
  shape.value.messages.forEach((message, i) => {
    const kind = message.message;
    if (kind.case === "chat") {
      rows.push({ message: kind.value, reasoning: undefined, skeleton: skeletonOf(kind.value.passthrough, format) });
    } else if (kind.case === "assistantToolCalls") {
      const step = kind.value;
      const row = create(ChatMessageSchema, { role: Role.ASSISTANT, content: step.text, toolCalls: step.toolCalls });
      rows.push({ message: row, reasoning: step.reasoning, skeleton: skeletonOf(step.passthrough, format) });
    } else if (kind.case === "toolResults") {
      for (const result of kind.value.results) {
        const row = create(ChatMessageSchema, {
          role: Role.TOOL,
          toolCallId: result.toolCallId,
          content: result.content,
          attachments: result.attachments,
        });
        rows.push({ message: row, reasoning: undefined, skeleton: skeletonOf(result.passthrough, format) });
      }
    } else {
      throw new ConversionError(`history.conversation.messages[${i}]: no message set`);
    }
  });
  return rows;
}

/** Reads a row's priced text back in the order the skeleton's slots name it. */
export class Cursor {
  private pos = 0;
  constructor(
    private readonly text: string,
    private readonly where: string,
    private readonly field: string,
  ) {}

  take(length: unknown, where: string): string {
    let n = expectLength(length, where);
    const start = this.pos;
    while (n > 0 && this.pos < this.text.length) {
      const cp = this.text.codePointAt(this.pos) ?? 0;
      this.pos += cp > 0xffff ? 2 : 1;
      n--;
    }
    if (n > 0) {
      throw new ConversionError(
        `${where}: passthrough wants ${String(length)} characters of ${this.field} but only ${codePoints(this.text.slice(start))} remain; the row changed since it was converted`,
      );
    }
    return this.text.slice(start, this.pos);
  }

  /** The URL of the `[IMAGE:<url>]` marker at the current position. */
  markerUrl(where: string): string {
    if (!this.text.startsWith(MARKER_OPEN, this.pos)) throw new ConversionError(`${where}: passthrough expects an [IMAGE:] marker here`);
    const end = this.text.indexOf("]", this.pos);
    const url = this.text.slice(this.pos + MARKER_OPEN.length, end);
    this.pos = end + 1;
    return url;
  }

  done(): void {
    if (this.pos !== this.text.length) {
      throw new ConversionError(
        `${this.where}: ${codePoints(this.text.slice(this.pos))} characters of ${this.field} have no place in the passthrough or the target format`,
      );
    }
  }
}

/** The text and reasoning cursors of one row, its attachments and tool calls in order. */
export class Streams {
  readonly text: Cursor;
  readonly reasoning: Cursor;
  private readonly attachments: Attachment[];
  private readonly calls: ToolCall[];

  constructor(
    row: FlatRow,
    private readonly where: string,
  ) {
    this.text = new Cursor(row.message.content, where, "content");
    this.reasoning = row.reasoning === undefined ? this.text : new Cursor(row.reasoning, where, "reasoning");
    this.attachments = [...row.message.attachments];
    this.calls = [...row.message.toolCalls];
    if (row.message.toolCallId !== "" && row.message.role !== Role.TOOL) {
      throw new ConversionError(`${where}: tool_call_id on a non-tool row has no provider field`);
    }
  }

  attachment(where: string): Attachment {
    const next = this.attachments.shift();
    if (next === undefined) throw new ConversionError(`${where}: passthrough expects an attachment the row lacks`);
    return next;
  }

  /** The next tool call; undefined once the row has no more (the sweep may have removed some). */
  call(): ToolCall | undefined {
    return this.calls.shift();
  }

  done(): void {
    this.text.done();
    this.reasoning.done();
    if (this.attachments.length > 0) throw new ConversionError(`${this.where}: attachments have no place in the passthrough`);
    if (this.calls.length > 0) throw new ConversionError(`${this.where}: tool calls have no place in the passthrough`);
  }
}

/** Images of a tool row or a `[Tool results]` carrier are attachments; other user rows' are markers. */
export function imagesAreAttachments(message: ChatMessage): boolean {
  return message.role === Role.TOOL || (message.role === Role.USER && isCarrier(message.content));
}

/** A user row whose `[IMAGE:]` markers are plain text: the breadcrumb, the summary row (priced as text, spec §15.2) or a carrier. */
export function markerTextRow(message: ChatMessage): boolean {
  return message.breadcrumb || message.summary || isCarrier(message.content);
}

/** The concatenated `text` of the parts whose type is one of `types`. */
export function partTexts(parts: JsonObject[], types: readonly string[]): string {
  return parts
    .filter((p) => typeof p.type === "string" && types.includes(p.type) && typeof p.text === "string")
    .map((p) => p.text as string)
    .join("");
}

/**
 * An item or part turnkeeper has no row field for (a hosted tool call, a file, a compaction): its
 * canonical JSON is priced as text in the row, and its skeleton is `{"opaque": length}`, so it is
 * counted, stays with its turn and comes back as it went in.
 */
export function addOpaque(row: Row, value: JsonValue, stream: Stream = "text"): JsonObject {
  return { opaque: row.add(canonicalJson(value), stream) };
}

export function isOpaque(skeleton: JsonObject): boolean {
  const keys = Object.keys(skeleton);
  return keys.length === 1 && keys[0] === "opaque";
}

/** The opaque value whose canonical JSON is at the cursor. */
export function takeOpaque(cursor: Cursor, skeleton: JsonObject, where: string): JsonValue {
  const text = cursor.take(skeleton.opaque, where);
  try {
    return JSON.parse(text) as JsonValue;
  } catch {
    throw new ConversionError(`${where}: the opaque value's text is no longer JSON; the row changed since it was converted`);
  }
}

/** The provider items a skeleton stands for: several for a grouped row (`{"items": [...]}`), else itself. */
export function skeletonItems(skeleton: JsonObject): JsonObject[] {
  const items = skeleton.items;
  if (Array.isArray(items) && skeleton.type === undefined && skeleton.role === undefined) {
    return items.map((item, k) => expectObject(item, `passthrough.items[${k}]`));
  }
  return [skeleton];
}

/**
 * The default items of a user or assistant row (Responses and Agents SDK alike): a user row's
 * content split at its image markers into parts, an assistant row's calls after its text.
 */
export function rowItems(message: ChatMessage, item: JsonObject, n: number, image: () => JsonObject): JsonObject[] {
  if (message.role === Role.USER) {
    if (message.attachments.length > 0 && isCarrier(message.content)) {
      item.content = [{ type: "input_text", text: n }, ...message.attachments.map(image)];
    } else if (!markerTextRow(message)) {
      const pieces = splitMarkers(message.content);
      if (pieces.some((p) => p.marker !== undefined)) {
        item.content = pieces.map((p) => (p.marker !== undefined ? image() : { type: "input_text", text: codePoints(p.text ?? "") }));
      }
    }
  }
  if (message.role === Role.ASSISTANT && message.toolCalls.length > 0) {
    const calls = message.toolCalls.map(() => ({ type: "function_call" }));
    return n > 0 ? [item, ...calls] : calls;
  }
  return [item];
}

/**
 * A reasoning item's row (Responses and Agents SDK alike): each of `parts`' keys holds a list of
 * parts of its type, whose texts the row carries as reasoning.
 */
export function reasoningRow(
  item: JsonObject,
  skeleton: JsonObject,
  where: string,
  parts: readonly (readonly [string, string])[],
): Row {
  const row = newRow(Role.ASSISTANT, skeleton);
  for (const [key, partType] of parts) {
    const value = item[key];
    if (value === undefined || value === null) continue;
    skeleton[key] = expectArray(value, `${where}.${key}`).map((rawPart, k) => {
      const part = expectObject(rawPart, `${where}.${key}[${k}]`);
      if (part.type !== partType) throw new ConversionError(`${where}.${key}[${k}]: expected a ${partType} part`);
      return { ...copy(part), text: row.add(expectString(part.text, `${where}.${key}[${k}]`), "reasoning") };
    });
  }
  return row;
}
