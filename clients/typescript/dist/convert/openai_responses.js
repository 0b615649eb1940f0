// OpenAI Responses input items (what the Agents SDK sessions store) <-> turnkeeper.v1 History
// (passthrough key `openai_responses`). docs/converters.md is the mapping; the converter vectors pin it.
import { create } from "@bufbuild/protobuf";
import { ConversionError } from "../errors.js";
import { Role, ToolCallSchema } from "../gen/turnkeeper/v1/history_pb.js";
import { attachmentFromUrl, attachmentUrl, canonicalJson, codePoints, copy, expectArray, expectObject, expectString, finish, flatRows, imagesAreAttachments, isCarrier, marker, newRow, partTexts, shown, skeletonItems, Streams, reasoningRow, rowItems, plainJson, } from "./common.js";
const FORMAT = "openai_responses";
const ROLES = { system: Role.SYSTEM, developer: Role.SYSTEM, user: Role.USER, assistant: Role.ASSISTANT };
const ROLE_NAMES = { [Role.SYSTEM]: "system", [Role.USER]: "user", [Role.ASSISTANT]: "assistant" };
const TEXT_PARTS = ["input_text", "output_text"];
/**
 * Items turnkeeper has no row field for but a model reads (the hosted tools' calls and their outputs, the
 * Agents SDK's references and compactions): each is one assistant row whose text is the item's canonical
 * JSON, so it is priced, stays within its turn and comes back as it went in. An output is an assistant
 * row like its call: as a tool row it would answer no call and the orphan sweep would remove it.
 */
const OPAQUE_ITEMS = [
    "web_search_call",
    "file_search_call",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "computer_call",
    "computer_call_output",
    "code_interpreter_call",
    "image_generation_call",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "tool_search_call",
    "compaction_trigger",
    "hosted_tool_call",
    "item_reference",
    "compaction",
];
/** Content parts kept the same way inside their message or tool output. */
const OPAQUE_PARTS = ["input_file"];
/** The item's type; an item without one is a message, or an item reference (its `type` is optional). */
function itemType(item) {
    if (item.type !== undefined && item.type !== null)
        return item.type;
    return (item.role === undefined || item.role === null) && "id" in item ? "item_reference" : "message";
}
/** The item or part back from the canonical JSON its row holds at the cursor. */
function opaque(streams, length, where) {
    const text = streams.text.take(length, where);
    let value;
    try {
        value = JSON.parse(text);
    }
    catch {
        throw new ConversionError(`${where}: the row's text is no longer the item's JSON`);
    }
    return expectObject(value, where);
}
/**
 * Converts Responses input items (or a request object holding them as `input`) to a History: one
 * row per item, except that consecutive `function_call` items (parallel calls) are one assistant row.
 */
export function fromOpenAIResponses(input, options) {
    const items = plainJson(input, "input");
    const list = Array.isArray(items) ? items : expectArray(expectObject(items, "request").input, "input");
    const rows = [];
    let calls; // the item skeletons of the last row while it is a run of function_call items
    list.forEach((raw, i) => {
        const where = `input[${i}]`;
        const item = expectObject(raw, where);
        const last = rows[rows.length - 1];
        if (item.type === "function_call" && calls !== undefined && last !== undefined) {
            const single = newRow(Role.ASSISTANT, copy(item));
            importFunctionCall(single, item, where);
            last.message.toolCalls.push(...single.message.toolCalls);
            calls.push(single.skeleton);
            last.skeleton = { items: calls };
            return;
        }
        const row = importItem(item, where);
        calls = item.type === "function_call" ? [row.skeleton] : undefined;
        rows.push(row);
    });
    return finish(rows, FORMAT, (row) => defaultSkeleton(row), options);
}
function importFunctionCall(row, item, where) {
    row.message.toolCalls.push(create(ToolCallSchema, {
        id: expectString(item.call_id, `${where}.call_id`),
        name: expectString(item.name, `${where}.name`),
        arguments: expectString(item.arguments, `${where}.arguments`),
    }));
    delete row.skeleton.call_id;
    delete row.skeleton.name;
    delete row.skeleton.arguments;
}
function importItem(item, where) {
    const kind = itemType(item);
    const skeleton = copy(item);
    if (typeof kind === "string" && OPAQUE_ITEMS.includes(kind)) {
        const row = newRow(Role.ASSISTANT, { type: kind });
        row.skeleton.item = row.add(canonicalJson(item));
        return row;
    }
    if (kind === "message") {
        const role = ROLES[shown(item.role)];
        if (role === undefined)
            throw new ConversionError(`${where}.role: unsupported role '${shown(item.role)}'`);
        const row = newRow(role, skeleton);
        skeleton.content = typeof item.content === "string" ? row.add(item.content) : importParts(row, item.content, `${where}.content`);
        return row;
    }
    if (kind === "function_call") {
        const row = newRow(Role.ASSISTANT, skeleton);
        importFunctionCall(row, item, where);
        return row;
    }
    if (kind === "function_call_output") {
        const row = newRow(Role.TOOL, skeleton);
        row.message.toolCallId = expectString(item.call_id, `${where}.call_id`);
        delete skeleton.call_id;
        skeleton.output = typeof item.output === "string" ? row.add(item.output) : importParts(row, item.output, `${where}.output`);
        return row;
    }
    if (kind === "reasoning") {
        const row = reasoningRow(item, skeleton, where, [
            ["summary", "summary_text"],
            ["content", "reasoning_text"],
        ]);
        if (typeof item.encrypted_content === "string")
            skeleton.encrypted_content = row.add(item.encrypted_content, "reasoning");
        return row;
    }
    throw new ConversionError(`${where}.type: unsupported item type '${shown(kind)}'`);
}
function importParts(row, content, where) {
    const parts = expectArray(content, where).map((p, k) => expectObject(p, `${where}[${k}]`));
    const role = row.message.role;
    const attach = role === Role.TOOL || (role === Role.USER && isCarrier(partTexts(parts, TEXT_PARTS)));
    return parts.map((part, k) => {
        const here = `${where}[${k}]`;
        const skeleton = copy(part);
        if (typeof part.type === "string" && OPAQUE_PARTS.includes(part.type))
            return { type: part.type, part: row.add(canonicalJson(part)) };
        if (typeof part.type === "string" && TEXT_PARTS.includes(part.type))
            skeleton.text = row.add(expectString(part.text, `${here}.text`));
        else if (part.type === "refusal" && role === Role.ASSISTANT)
            skeleton.refusal = row.add(expectString(part.refusal, `${here}.refusal`));
        else if (part.type === "input_image" && (role === Role.USER || role === Role.TOOL)) {
            const url = expectString(part.image_url, `${here}.image_url`);
            delete skeleton.image_url;
            if (attach)
                row.message.attachments.push(attachmentFromUrl(url, here));
            else
                row.add(marker(url, here));
        }
        else
            throw new ConversionError(`${here}: unsupported content part type '${shown(part.type)}' here`);
        return skeleton;
    });
}
function defaultSkeleton(row) {
    const items = defaultItems(row);
    return items.length === 1 ? items[0] : { items };
}
function defaultItems(row) {
    const message = row.message;
    const n = codePoints(message.content);
    const image = () => ({ type: "input_image", detail: "auto" });
    if (message.role === Role.TOOL) {
        const output = message.attachments.length > 0 ? [...(n > 0 ? [{ type: "input_text", text: n }] : []), ...message.attachments.map(image)] : n;
        return [{ type: "function_call_output", output }];
    }
    const roleName = ROLE_NAMES[message.role];
    if (roleName === undefined)
        throw new ConversionError(`role ${message.role} has no Responses role`);
    const item = { role: roleName, content: n };
    return rowItems(message, item, n, image);
}
export function toOpenAIResponses(history) {
    const out = [];
    flatRows(history, FORMAT).forEach((row, i) => {
        const where = `rows[${i}]`;
        const streams = new Streams(row, where);
        for (const item of row.skeleton !== undefined ? skeletonItems(row.skeleton) : defaultItems(row)) {
            const exported = exportItem(row.message, streams, item, where);
            if (exported !== undefined)
                out.push(exported);
        }
        streams.done();
    });
    return out; // plain JSON objects; `Item` is the caller's name for them
}
/** One item back from its skeleton; undefined for a `function_call` whose call the orphan sweep removed. */
function exportItem(message, streams, skeleton, where) {
    const out = copy(skeleton);
    const kind = skeleton.type ?? "message";
    if (typeof kind === "string" && OPAQUE_ITEMS.includes(kind))
        return opaque(streams, skeleton.item, `${where}.item`);
    if (kind === "message") {
        if (ROLES[shown(skeleton.role)] !== message.role)
            throw new ConversionError(`${where}: passthrough role does not match the row`);
        const content = skeleton.content;
        out.content = Array.isArray(content)
            ? content.map((p) => exportPart(message, streams, expectObject(p, where), where))
            : streams.text.take(content, `${where}.content`);
    }
    else if (kind === "function_call") {
        if (message.role !== Role.ASSISTANT)
            throw new ConversionError(`${where}: passthrough function_call on a row that is not an assistant's`);
        const call = streams.call();
        if (call === undefined)
            return undefined;
        Object.assign(out, { call_id: call.id, name: call.name, arguments: call.arguments });
    }
    else if (kind === "function_call_output") {
        if (message.role !== Role.TOOL)
            throw new ConversionError(`${where}: passthrough function_call_output on a non-tool row`);
        out.call_id = message.toolCallId;
        const output = skeleton.output;
        out.output = Array.isArray(output)
            ? output.map((p) => exportPart(message, streams, expectObject(p, where), where))
            : streams.text.take(output, `${where}.output`);
    }
    else if (kind === "reasoning") {
        for (const key of ["summary", "content"]) {
            const parts = skeleton[key];
            if (Array.isArray(parts)) {
                out[key] = parts.map((p) => {
                    const part = expectObject(p, where);
                    return { ...part, text: streams.reasoning.take(part.text, where) };
                });
            }
        }
        if (skeleton.encrypted_content !== undefined && skeleton.encrypted_content !== null) {
            out.encrypted_content = streams.reasoning.take(skeleton.encrypted_content, where);
        }
    }
    else {
        throw new ConversionError(`${where}: passthrough item type '${shown(kind)}' is not Responses`);
    }
    return out;
}
function exportPart(message, streams, part, where) {
    if (typeof part.type === "string" && OPAQUE_PARTS.includes(part.type))
        return opaque(streams, part.part, `${where}.part`);
    const out = copy(part);
    if (typeof part.type === "string" && TEXT_PARTS.includes(part.type))
        out.text = streams.text.take(part.text, `${where}.text`);
    else if (part.type === "refusal")
        out.refusal = streams.text.take(part.refusal, `${where}.refusal`);
    else if (part.type === "input_image") {
        out.image_url = imagesAreAttachments(message) ? attachmentUrl(streams.attachment(where), where) : streams.text.markerUrl(where);
    }
    else
        throw new ConversionError(`${where}: passthrough part type '${shown(part.type)}' is not Responses`);
    return out;
}
//# sourceMappingURL=openai_responses.js.map