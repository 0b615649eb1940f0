// Vercel AI SDK messages (`ModelMessage[]` of `ai`, and the `LanguageModelV4Prompt` a middleware
// sees, which has the same parts) <-> turnkeeper.v1 History (passthrough key `ai_sdk`).
// docs/converters.md is the mapping.
import { create } from "@bufbuild/protobuf";
import { ConversionError } from "../errors.js";
import { Role, ToolCallSchema } from "../gen/turnkeeper/v1/history_pb.js";
import { addOpaque, canonicalJson, codePoints, copy, encodeBase64, expectArray, expectObject, expectString, finish, flatRows, isOpaque, marker, markerTextRow, newRow, plainJson, shown, splitMarkers, Streams, takeOpaque, } from "./common.js";
const FORMAT = "ai_sdk";
const ROLES = { system: Role.SYSTEM, user: Role.USER, assistant: Role.ASSISTANT, tool: Role.TOOL };
const ROLE_NAMES = { [Role.SYSTEM]: "system", [Role.USER]: "user", [Role.ASSISTANT]: "assistant" };
/** Tool outputs whose `value` is a text, and those whose `value` is any JSON value (priced as its JSON). */
const TEXT_OUTPUTS = ["text", "error-text"];
const JSON_OUTPUTS = ["json", "error-json"];
/** Binary data (a `Uint8Array` image or file) is read as base64, the form the AI SDK also accepts. */
function binaryAsBase64(_key, value) {
    if (value instanceof Uint8Array)
        return encodeBase64(value);
    if (value instanceof ArrayBuffer)
        return encodeBase64(new Uint8Array(value));
    return value;
}
/** The AI SDK values as the JSON this converter reads (binary as base64, a `URL` as its text). */
export function aiSdkJson(value) {
    return plainJson(value, "messages", binaryAsBase64);
}
function sendableImage(value) {
    return typeof value === "string" && /^(https?:|data:)/.test(value.trim());
}
/**
 * Converts AI SDK messages (`ModelMessage[]`, a `LanguageModelV4Prompt`, or `{ messages }`) to a
 * History: one row per message, except a tool message, which is one tool row per `tool-result`.
 */
export function fromAISDK(input, options) {
    const value = aiSdkJson(input);
    const list = Array.isArray(value) ? value : expectArray(expectObject(value, "request").messages, "messages");
    const rows = [];
    list.forEach((raw, i) => rows.push(...importMessage(expectObject(raw, `messages[${i}]`), `messages[${i}]`)));
    return finish(rows, FORMAT, defaultSkeleton, options);
}
function importMessage(message, where) {
    const role = ROLES[shown(message.role)];
    if (role === undefined)
        throw new ConversionError(`${where}.role: unsupported role '${shown(message.role)}'`);
    const skeleton = copy(message);
    if (role === Role.TOOL)
        return importToolMessage(message, where);
    const row = newRow(role, skeleton);
    const content = message.content;
    if (typeof content === "string")
        skeleton.content = row.add(content);
    else if (role === Role.SYSTEM)
        throw new ConversionError(`${where}.content: a system message's content is a string`);
    else
        skeleton.content = expectArray(content, `${where}.content`).map((p, k) => importPart(row, expectObject(p, `${where}.content[${k}]`), `${where}.content[${k}]`));
    return [row];
}
function importPart(row, part, where) {
    const skeleton = copy(part);
    const role = row.message.role;
    if (part.type === "text")
        skeleton.text = row.add(expectString(part.text, `${where}.text`));
    else if (part.type === "reasoning" && role === Role.ASSISTANT)
        skeleton.text = row.add(expectString(part.text, `${where}.text`), "reasoning");
    else if (part.type === "image" && role === Role.USER && sendableImage(part.image)) {
        row.add(marker(part.image, where));
        delete skeleton.image;
    }
    else if (part.type === "tool-call" && role === Role.ASSISTANT && part.providerExecuted !== true) {
        if (part.input === undefined)
            throw new ConversionError(`${where}.input: a tool call needs its input`);
        row.message.toolCalls.push(create(ToolCallSchema, {
            id: expectString(part.toolCallId, `${where}.toolCallId`),
            name: expectString(part.toolName, `${where}.toolName`),
            arguments: canonicalJson(part.input),
        }));
        delete skeleton.toolCallId;
        delete skeleton.toolName;
        delete skeleton.input;
    }
    else
        return addOpaque(row, part); // files, base64 images, provider-executed tools and their results
    return skeleton;
}
/** One tool row per `tool-result` part; the rows after the first continue the same message (no `role`). */
function importToolMessage(message, where) {
    const parts = expectArray(message.content, `${where}.content`);
    if (parts.length === 0)
        throw new ConversionError(`${where}.content: a tool message without results has no row`);
    return parts.map((raw, k) => {
        const here = `${where}.content[${k}]`;
        const part = expectObject(raw, here);
        if (part.type !== "tool-result")
            throw new ConversionError(`${here}: unsupported tool message part type '${shown(part.type)}'`);
        const row = newRow(Role.TOOL);
        row.message.toolCallId = expectString(part.toolCallId, `${here}.toolCallId`);
        const skeleton = copy(part);
        delete skeleton.toolCallId;
        skeleton.output = importOutput(row, expectObject(part.output, `${here}.output`), `${here}.output`);
        row.skeleton = k === 0 ? { ...copy(message), content: [skeleton] } : { content: [skeleton] };
        return row;
    });
}
function importOutput(row, output, where) {
    const skeleton = copy(output);
    const kind = shown(output.type);
    if (TEXT_OUTPUTS.includes(kind))
        skeleton.value = row.add(expectString(output.value, `${where}.value`));
    else if (JSON_OUTPUTS.includes(kind))
        skeleton.value = row.add(canonicalJson(output.value ?? null));
    else if (kind === "execution-denied" && typeof output.reason === "string")
        skeleton.reason = row.add(output.reason);
    else if (kind === "content") {
        skeleton.value = expectArray(output.value, `${where}.value`).map((raw, k) => {
            const part = expectObject(raw, `${where}.value[${k}]`);
            return part.type === "text" ? { ...copy(part), text: row.add(expectString(part.text, `${where}.value[${k}].text`)) } : addOpaque(row, part);
        });
    }
    else if (kind !== "execution-denied")
        return addOpaque(row, output);
    return skeleton;
}
/** Whether a tool row after `row` (as exported) continues its tool message. */
function continuesTool(row) {
    return row?.message.role === Role.TOOL;
}
function defaultSkeleton(row, previous) {
    const message = row.message;
    const n = codePoints(message.content);
    if (message.role === Role.TOOL) {
        const result = { type: "tool-result", output: { type: "text", value: n } };
        return continuesTool(previous) ? { content: [result] } : { role: "tool", content: [result] };
    }
    const roleName = ROLE_NAMES[message.role];
    if (roleName === undefined)
        throw new ConversionError(`role ${message.role} has no AI SDK role`);
    if (message.role === Role.ASSISTANT && message.toolCalls.length > 0) {
        return { role: roleName, content: [...(n > 0 ? [{ type: "text", text: n }] : []), ...message.toolCalls.map(() => ({ type: "tool-call" }))] };
    }
    if (message.role === Role.USER && !markerTextRow(message)) {
        const pieces = splitMarkers(message.content);
        if (pieces.some((p) => p.marker !== undefined)) {
            return { role: roleName, content: pieces.map((p) => (p.marker !== undefined ? { type: "image" } : { type: "text", text: codePoints(p.text ?? "") })) };
        }
    }
    return { role: roleName, content: n };
}
export function toAISDK(history) {
    const out = [];
    const names = new Map(); // call id -> tool name, for results built without passthrough
    let previous;
    flatRows(history, FORMAT).forEach((row, i) => {
        const where = `rows[${i}]`;
        for (const call of row.message.toolCalls)
            names.set(call.id, call.name);
        const skeleton = row.skeleton ?? defaultSkeleton(row, previous);
        const message = exportMessage(row, skeleton, where, names);
        const last = out[out.length - 1];
        if ("role" in skeleton)
            out.push(message);
        else if (last?.role === "tool" && Array.isArray(last.content))
            last.content.push(...message.content);
        else
            out.push({ role: "tool", ...message });
        previous = { message: row.message, reasoning: row.reasoning, skeleton };
    });
    return out; // plain JSON objects; `Message` is the caller's name for them
}
function exportMessage(row, skeleton, where, names) {
    const message = row.message;
    if (skeleton.role !== undefined && ROLES[shown(skeleton.role)] !== message.role)
        throw new ConversionError(`${where}: passthrough role does not match the row`);
    if (skeleton.role === undefined && message.role !== Role.TOOL)
        throw new ConversionError(`${where}: only a tool row continues a message`);
    const streams = new Streams(row, where);
    const out = copy(skeleton);
    const content = skeleton.content;
    if (Array.isArray(content)) {
        const parts = content.map((p, k) => exportPart(message, streams, expectObject(p, `${where}.content[${k}]`), where, names));
        out.content = parts.filter((p) => p !== undefined); // tool calls the sweep removed are gone
    }
    else {
        out.content = streams.text.take(content, `${where}.content`);
    }
    streams.done();
    return out;
}
function exportPart(message, streams, part, where, names) {
    if (isOpaque(part))
        return expectObject(takeOpaque(streams.text, part, where), where);
    const out = copy(part);
    switch (part.type) {
        case "text":
            out.text = streams.text.take(part.text, `${where}.text`);
            return out;
        case "reasoning":
            out.text = streams.reasoning.take(part.text, `${where}.text`);
            return out;
        case "image":
            out.image = streams.text.markerUrl(where);
            return out;
        case "tool-call": {
            const call = streams.call();
            if (call === undefined)
                return undefined;
            let input;
            try {
                input = JSON.parse(call.arguments);
            }
            catch {
                throw new ConversionError(`${where}: tool call ${call.id} arguments are not JSON`);
            }
            return { ...out, toolCallId: call.id, toolName: call.name, input: input };
        }
        case "tool-result": {
            if (message.role !== Role.TOOL)
                throw new ConversionError(`${where}: passthrough tool-result on a row that is not a tool`);
            out.toolCallId = message.toolCallId;
            if (out.toolName === undefined)
                out.toolName = names.get(message.toolCallId) ?? "";
            out.output = exportOutput(streams, expectObject(part.output, `${where}.output`), where);
            return out;
        }
        default:
            throw new ConversionError(`${where}: passthrough part type '${shown(part.type)}' is not an AI SDK part`);
    }
}
function exportOutput(streams, output, where) {
    if (isOpaque(output))
        return expectObject(takeOpaque(streams.text, output, where), where);
    const out = copy(output);
    const kind = shown(output.type);
    if (TEXT_OUTPUTS.includes(kind))
        out.value = streams.text.take(output.value, `${where}.value`);
    else if (JSON_OUTPUTS.includes(kind))
        out.value = takeOpaque(streams.text, { opaque: output.value ?? null }, `${where}.value`);
    else if (kind === "execution-denied" && output.reason !== undefined)
        out.reason = streams.text.take(output.reason, `${where}.reason`);
    else if (kind === "content") {
        out.value = expectArray(output.value, `${where}.value`).map((raw) => {
            const part = expectObject(raw, where);
            return isOpaque(part) ? takeOpaque(streams.text, part, where) : { ...part, text: streams.text.take(part.text, `${where}.text`) };
        });
    }
    return out;
}
//# sourceMappingURL=ai_sdk.js.map