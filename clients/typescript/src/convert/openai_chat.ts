// OpenAI Chat Completions `messages` <-> turnkeeper.v1 History (passthrough key `openai_chat`).
// docs/converters.md is the mapping; the converter vectors pin it.
import { create, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { ConversionError } from "../errors.js";
import { Role, ToolCallSchema, type ChatMessage, type History } from "../gen/turnkeeper/v1/history_pb.js";
import {
  attachmentFromUrl,
  attachmentUrl,
  codePoints,
  copy,
  expectArray,
  expectObject,
  expectString,
  finish,
  flatRows,
  imagesAreAttachments,
  isCarrier,
  marker,
  markerTextRow,
  newRow,
  partTexts,
  shown,
  splitMarkers,
  Streams,
  type ConvertOptions,
  type FlatRow,
  type Row,
  plainJson,
  type ProviderJson,
} from "./common.js";

const FORMAT = "openai_chat";
const ROLES: Record<string, Role> = {
  system: Role.SYSTEM,
  developer: Role.SYSTEM,
  user: Role.USER,
  assistant: Role.ASSISTANT,
  tool: Role.TOOL,
};
const ROLE_NAMES: Partial<Record<Role, string>> = {
  [Role.SYSTEM]: "system",
  [Role.USER]: "user",
  [Role.ASSISTANT]: "assistant",
  [Role.TOOL]: "tool",
};
const PART_TYPES: Partial<Record<Role, readonly string[]>> = {
  [Role.SYSTEM]: ["text"],
  [Role.USER]: ["text", "image_url"],
  [Role.ASSISTANT]: ["text", "refusal"],
  [Role.TOOL]: ["text", "image_url"],
};

/** Converts Chat Completions `messages` (or a request object holding them) to a History. */
export function fromOpenAI(input: ProviderJson, options?: ConvertOptions): History {
  const messages = plainJson(input, "messages");
  const list = Array.isArray(messages) ? messages : expectArray(expectObject(messages, "request").messages, "messages");
  const rows = list.map((m, i) => importMessage(m, `messages[${i}]`));
  return finish(rows, FORMAT, defaultSkeleton, options);
}

function importMessage(raw: JsonValue, where: string): Row {
  const message = expectObject(raw, where);
  const roleName = expectString(message.role, `${where}.role`);
  const role = ROLES[roleName];
  if (role === undefined) throw new ConversionError(`${where}.role: unsupported role '${roleName}'`);
  // A key whose value is null is absent (SDK dumps write `function_call: null`, `tool_calls: null`);
  // the skeleton keeps the null, so it round-trips.
  if (message.function_call !== undefined && message.function_call !== null) throw new ConversionError(`${where}.function_call: the deprecated form; send tool_calls`);
  const skeleton = copy(message);
  const row = newRow(role, skeleton);
  if (role === Role.TOOL) {
    row.message.toolCallId = expectString(message.tool_call_id, `${where}.tool_call_id`);
    delete skeleton.tool_call_id;
  }
  const content = message.content;
  if (typeof content === "string") skeleton.content = row.add(content);
  else if (content !== null && content !== undefined) skeleton.content = importParts(row, content, `${where}.content`);
  if (typeof message.refusal === "string" && role === Role.ASSISTANT) skeleton.refusal = row.add(message.refusal);
  if (message.tool_calls !== undefined && message.tool_calls !== null) {
    if (role !== Role.ASSISTANT) throw new ConversionError(`${where}.tool_calls: only assistant messages carry tool calls`);
    skeleton.tool_calls = expectArray(message.tool_calls, `${where}.tool_calls`).map((c, j) => importCall(row, c, `${where}.tool_calls[${j}]`));
  }
  return row;
}

function importParts(row: Row, content: JsonValue, where: string): JsonObject[] {
  const parts = expectArray(content, where).map((p, k) => expectObject(p, `${where}[${k}]`));
  const role = row.message.role;
  const attach = role === Role.TOOL || (role === Role.USER && isCarrier(partTexts(parts, ["text"])));
  return parts.map((part, k) => {
    const here = `${where}[${k}]`;
    const kind = part.type;
    if (typeof kind !== "string" || !(PART_TYPES[role] ?? []).includes(kind)) {
      throw new ConversionError(`${here}: unsupported content part type '${shown(kind)}' here`);
    }
    const skeleton = copy(part);
    if (kind === "text") skeleton.text = row.add(expectString(part.text, `${here}.text`));
    else if (kind === "refusal") skeleton.refusal = row.add(expectString(part.refusal, `${here}.refusal`));
    else {
      const image = copy(expectObject(part.image_url, `${here}.image_url`));
      const url = expectString(image.url, `${here}.image_url.url`);
      delete image.url;
      skeleton.image_url = image;
      if (attach) row.message.attachments.push(attachmentFromUrl(url, here));
      else row.add(marker(url, here));
    }
    return skeleton;
  });
}

function importCall(row: Row, raw: JsonValue, where: string): JsonObject {
  const call = expectObject(raw, where);
  if ((call.type ?? "function") !== "function") throw new ConversionError(`${where}.type: unsupported tool call type '${shown(call.type)}'`);
  const fn = expectObject(call.function, `${where}.function`);
  row.message.toolCalls.push(
    create(ToolCallSchema, {
      id: expectString(call.id, `${where}.id`),
      name: expectString(fn.name, `${where}.function.name`),
      arguments: expectString(fn.arguments ?? "", `${where}.function.arguments`),
    }),
  );
  const skeleton = copy(call);
  delete skeleton.id;
  const rest = copy(fn);
  delete rest.name;
  delete rest.arguments;
  skeleton.function = rest;
  return skeleton;
}

function defaultSkeleton(row: FlatRow): JsonObject {
  const message = row.message;
  const roleName = ROLE_NAMES[message.role];
  if (roleName === undefined) throw new ConversionError(`role ${message.role} has no Chat Completions role`);
  const n = codePoints(message.content);
  const out: JsonObject = { role: roleName };
  if (message.role === Role.ASSISTANT && message.toolCalls.length > 0) {
    out.content = n > 0 ? n : null;
    out.tool_calls = message.toolCalls.map(() => ({ type: "function", function: {} }));
  } else if (message.attachments.length > 0 && imagesAreAttachments(message)) {
    const parts: JsonObject[] = n > 0 || message.role === Role.USER ? [{ type: "text", text: n }] : [];
    for (const _ of message.attachments) parts.push({ type: "image_url", image_url: {} });
    out.content = parts;
  } else if (message.role === Role.USER && !markerTextRow(message)) {
    const pieces = splitMarkers(message.content);
    out.content = pieces.some((p) => p.marker !== undefined)
      ? pieces.map((p): JsonObject => (p.marker !== undefined ? { type: "image_url", image_url: {} } : { type: "text", text: codePoints(p.text ?? "") }))
      : n;
  } else {
    out.content = n;
  }
  return out;
}

/**
 * Converts a History (either shape) to Chat Completions `messages`: plain JSON objects, typed as
 * `Message` when asked (`toOpenAI<ChatCompletionMessageParam>(history)` with the openai SDK).
 */
export function toOpenAI(history: History): JsonObject[];
export function toOpenAI<Message extends object>(history: History): Message[];
export function toOpenAI<Message extends object>(history: History): Message[] {
  // Plain JSON objects; `Message` is the caller's name for them (e.g. openai's ChatCompletionMessageParam).
  return flatRows(history, FORMAT).map((row, i) => exportRow(row, row.skeleton ?? defaultSkeleton(row), `messages[${i}]`)) as Message[];
}

function exportRow(row: FlatRow, skeleton: JsonObject, where: string): JsonObject {
  const message = row.message;
  if (ROLES[shown(skeleton.role)] !== message.role) {
    throw new ConversionError(`${where}: passthrough role '${shown(skeleton.role)}' does not match the row`);
  }
  const streams = new Streams(row, where);
  const out = copy(skeleton);
  if (message.role === Role.TOOL) out.tool_call_id = message.toolCallId;
  const content = skeleton.content;
  if (Array.isArray(content)) {
    out.content = content.map((p, k) => exportPart(message, streams, expectObject(p, `${where}.content[${k}]`), where));
  } else if (content !== null && content !== undefined) {
    out.content = streams.text.take(content, `${where}.content`);
  }
  if (skeleton.refusal !== undefined && skeleton.refusal !== null) out.refusal = streams.text.take(skeleton.refusal, `${where}.refusal`);
  if (skeleton.tool_calls !== undefined && skeleton.tool_calls !== null) {
    const calls: JsonObject[] = [];
    for (const [j, raw] of expectArray(skeleton.tool_calls, `${where}.tool_calls`).entries()) {
      const call = streams.call();
      if (call === undefined) break;
      const filled = copy(expectObject(raw, `${where}.tool_calls[${j}]`));
      const fn = copy(expectObject(filled.function ?? {}, where));
      fn.name = call.name;
      fn.arguments = call.arguments;
      filled.id = call.id;
      filled.function = fn;
      calls.push(filled);
    }
    out.tool_calls = calls;
  }
  streams.done();
  return out;
}

function exportPart(message: ChatMessage, streams: Streams, part: JsonObject, where: string): JsonObject {
  const out = copy(part);
  if (part.type === "text") out.text = streams.text.take(part.text, `${where}.text`);
  else if (part.type === "refusal") out.refusal = streams.text.take(part.refusal, `${where}.refusal`);
  else if (part.type === "image_url") {
    const image = copy(expectObject(part.image_url ?? {}, `${where}.image_url`));
    image.url = imagesAreAttachments(message) ? attachmentUrl(streams.attachment(where), where) : streams.text.markerUrl(where);
    out.image_url = image;
  } else {
    throw new ConversionError(`${where}: passthrough part type '${shown(part.type)}' is not Chat Completions`);
  }
  return out;
}
