// OpenAI Agents SDK (JS) items, `AgentInputItem` of @openai/agents, <-> turnkeeper.v1 History
// (passthrough key `openai_agents`). The SDK's own dialect of the Responses items: camelCase
// `callId`, `function_call_result`, reasoning as `input_text` parts, images as `image`, and item
// types turnkeeper has no row for (hosted tools, computer, shell, patch, compaction, ...), which
// are opaque rows. docs/converters.md is the mapping.
import { create, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { ConversionError } from "../errors.js";
import { Role, ToolCallSchema, type ChatMessage, type History } from "../gen/turnkeeper/v1/history_pb.js";
import {
  addOpaque,
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
  isOpaque,
  marker,
  newRow,
  partTexts,
  plainJson,
  shown,
  skeletonItems,
  Streams,
  takeOpaque,
  reasoningRow,
  rowItems,
  type ConvertOptions,
  type FlatRow,
  type ProviderJson,
  type Row,
} from "./common.js";

const FORMAT = "openai_agents";
const ROLES: Record<string, Role> = { system: Role.SYSTEM, user: Role.USER, assistant: Role.ASSISTANT };
const ROLE_NAMES: Partial<Record<Role, string>> = { [Role.SYSTEM]: "system", [Role.USER]: "user", [Role.ASSISTANT]: "assistant" };
const TEXT_PARTS = ["input_text", "output_text"];

function sendableImage(value: JsonValue | undefined): value is string {
  return typeof value === "string" && /^(https?:|data:)/.test(value.trim());
}

/**
 * Converts Agents SDK items (`AgentInputItem[]`, or `{ input }` as a `callModelInputFilter` gets
 * it) to a History: one row per item, consecutive `function_call` items (parallel calls) one
 * assistant row, and every item type turnkeeper has no row for an opaque assistant row.
 */
export function fromOpenAIAgents(input: ProviderJson, options?: ConvertOptions): History {
  const items = plainJson(input, "input");
  const list = Array.isArray(items) ? items : expectArray(expectObject(items, "modelData").input, "input");
  const rows: Row[] = [];
  let calls: JsonObject[] | undefined;
  list.forEach((raw, i) => {
    const where = `input[${i}]`;
    const item = expectObject(raw, where);
    const row = importItem(item, where);
    const last = rows[rows.length - 1];
    if (item.type === "function_call" && calls !== undefined && last !== undefined) {
      last.message.toolCalls.push(...row.message.toolCalls);
      calls.push(row.skeleton);
      last.skeleton = { items: calls };
      return;
    }
    calls = item.type === "function_call" ? [row.skeleton] : undefined;
    rows.push(row);
  });
  return finish(rows, FORMAT, defaultSkeleton, options);
}

function importItem(item: JsonObject, where: string): Row {
  const kind = item.type ?? "message";
  const skeleton = copy(item);
  if (kind === "message") {
    const role = ROLES[shown(item.role)];
    if (role === undefined) throw new ConversionError(`${where}.role: unsupported role '${shown(item.role)}'`);
    const row = newRow(role, skeleton);
    skeleton.content = typeof item.content === "string" ? row.add(item.content) : importParts(row, item.content, `${where}.content`, false);
    return row;
  }
  if (kind === "function_call") {
    const row = newRow(Role.ASSISTANT, skeleton);
    row.message.toolCalls.push(
      create(ToolCallSchema, {
        id: expectString(item.callId, `${where}.callId`),
        name: expectString(item.name, `${where}.name`),
        arguments: expectString(item.arguments, `${where}.arguments`),
      }),
    );
    delete skeleton.callId;
    delete skeleton.name;
    delete skeleton.arguments;
    return row;
  }
  if (kind === "function_call_result") {
    const row = newRow(Role.TOOL, skeleton);
    row.message.toolCallId = expectString(item.callId, `${where}.callId`);
    delete skeleton.callId;
    const output = item.output;
    if (typeof output === "string") skeleton.output = row.add(output);
    else if (Array.isArray(output)) skeleton.output = importParts(row, output, `${where}.output`, true);
    else {
      const part = expectObject(output, `${where}.output`);
      skeleton.output = part.type === "text" ? { ...copy(part), text: row.add(expectString(part.text, `${where}.output.text`)) } : addOpaque(row, part);
    }
    return row;
  }
  if (kind === "reasoning") return reasoningRow(item, skeleton, where, [
      ["content", "input_text"],
      ["rawContent", "reasoning_text"],
    ]);
  if (typeof kind !== "string") throw new ConversionError(`${where}.type: expected a string, got ${shown(kind)}`);
  const row = newRow(Role.ASSISTANT);
  row.skeleton = addOpaque(row, item);
  return row;
}

function importParts(row: Row, content: JsonValue | undefined, where: string, toolOutput: boolean): JsonObject[] {
  const parts = expectArray(content, where).map((p, k) => expectObject(p, `${where}[${k}]`));
  const role = row.message.role;
  const attach = toolOutput || (role === Role.USER && isCarrier(partTexts(parts, TEXT_PARTS)));
  return parts.map((part, k) => {
    const here = `${where}[${k}]`;
    const skeleton = copy(part);
    if (typeof part.type === "string" && TEXT_PARTS.includes(part.type)) skeleton.text = row.add(expectString(part.text, `${here}.text`));
    else if (part.type === "refusal" && role === Role.ASSISTANT) skeleton.refusal = row.add(expectString(part.refusal, `${here}.refusal`));
    else if (part.type === "input_image" && (role === Role.USER || role === Role.TOOL) && sendableImage(part.image)) {
      delete skeleton.image;
      if (attach) row.message.attachments.push(attachmentFromUrl(part.image, here));
      else row.add(marker(part.image, here));
    } else return addOpaque(row, part); // files, audio, images by file id: priced as their JSON
    return skeleton;
  });
}

function defaultSkeleton(row: FlatRow): JsonObject {
  const items = defaultItems(row);
  return items.length === 1 ? (items[0] as JsonObject) : { items };
}

function defaultItems(row: FlatRow): JsonObject[] {
  const message = row.message;
  const n = codePoints(message.content);
  const image = (): JsonObject => ({ type: "input_image" });
  if (message.role === Role.TOOL) {
    const output: JsonValue =
      message.attachments.length > 0 ? [...(n > 0 ? [{ type: "input_text", text: n }] : []), ...message.attachments.map(image)] : n;
    return [{ type: "function_call_result", status: "completed", output }];
  }
  const roleName = ROLE_NAMES[message.role];
  if (roleName === undefined) throw new ConversionError(`role ${message.role} has no Agents SDK role`);
  const item: JsonObject = { role: roleName, content: n };
  if (message.role === Role.ASSISTANT) {
    item.status = "completed";
    item.content = [{ type: "output_text", text: n }];
  }
  return rowItems(message, item, n, image);
}

/**
 * Converts a History (either shape) to Agents SDK items: plain JSON objects, typed as `Item` when
 * asked (`toOpenAIAgents<AgentInputItem>(history)` with @openai/agents).
 */
export function toOpenAIAgents(history: History): JsonObject[];
export function toOpenAIAgents<Item extends object>(history: History): Item[];
export function toOpenAIAgents<Item extends object>(history: History): Item[] {
  const out: JsonObject[] = [];
  const names = new Map<string, string>(); // call id -> tool name, for results built without passthrough
  flatRows(history, FORMAT).forEach((row, i) => {
    const where = `rows[${i}]`;
    const streams = new Streams(row, where);
    for (const call of row.message.toolCalls) names.set(call.id, call.name);
    for (const item of row.skeleton !== undefined ? skeletonItems(row.skeleton) : defaultItems(row)) {
      const exported = exportItem(row.message, streams, item, where, names);
      if (exported !== undefined) out.push(exported);
    }
    streams.done();
  });
  return out as Item[]; // plain JSON objects; `Item` is the caller's name for them
}

function exportItem(message: ChatMessage, streams: Streams, skeleton: JsonObject, where: string, names: Map<string, string>): JsonObject | undefined {
  if (isOpaque(skeleton)) return expectObject(takeOpaque(streams.text, skeleton, where), where);
  const out = copy(skeleton);
  const kind = skeleton.type ?? "message";
  if (kind === "message") {
    if (ROLES[shown(skeleton.role)] !== message.role) throw new ConversionError(`${where}: passthrough role does not match the row`);
    const content = skeleton.content;
    out.content = Array.isArray(content)
      ? content.map((p) => exportPart(message, streams, expectObject(p, where), where))
      : streams.text.take(content, `${where}.content`);
  } else if (kind === "function_call") {
    if (message.role !== Role.ASSISTANT) throw new ConversionError(`${where}: passthrough function_call on a row that is not an assistant's`);
    const call = streams.call();
    if (call === undefined) return undefined; // the orphan sweep removed it
    Object.assign(out, { callId: call.id, name: call.name, arguments: call.arguments });
  } else if (kind === "function_call_result") {
    if (message.role !== Role.TOOL) throw new ConversionError(`${where}: passthrough function_call_result on a non-tool row`);
    out.callId = message.toolCallId;
    if (out.name === undefined) out.name = names.get(message.toolCallId) ?? "";
    const output = skeleton.output;
    if (Array.isArray(output)) out.output = output.map((p) => exportPart(message, streams, expectObject(p, where), where));
    else if (typeof output === "object" && output !== null) out.output = exportPart(message, streams, expectObject(output, where), where);
    else out.output = streams.text.take(output, `${where}.output`);
  } else if (kind === "reasoning") {
    for (const key of ["content", "rawContent"]) {
      const parts = skeleton[key];
      if (Array.isArray(parts)) {
        out[key] = parts.map((p) => {
          const part = expectObject(p, where);
          return { ...part, text: streams.reasoning.take(part.text, where) };
        });
      }
    }
  } else {
    throw new ConversionError(`${where}: passthrough item type '${shown(kind)}' is not an Agents SDK item turnkeeper maps`);
  }
  return out;
}

function exportPart(message: ChatMessage, streams: Streams, part: JsonObject, where: string): JsonObject {
  if (isOpaque(part)) return expectObject(takeOpaque(streams.text, part, where), where);
  const out = copy(part);
  if (typeof part.type === "string" && [...TEXT_PARTS, "text"].includes(part.type)) out.text = streams.text.take(part.text, `${where}.text`);
  else if (part.type === "refusal") out.refusal = streams.text.take(part.refusal, `${where}.refusal`);
  else if (part.type === "input_image") {
    out.image = imagesAreAttachments(message) ? attachmentUrl(streams.attachment(where), where) : streams.text.markerUrl(where);
  } else throw new ConversionError(`${where}: passthrough part type '${shown(part.type)}' is not an Agents SDK part`);
  return out;
}
