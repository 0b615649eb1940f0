// Anthropic Messages (`system` + `messages`) <-> turnkeeper.v1 History (passthrough key `anthropic`).
// docs/converters.md is the mapping; the converter vectors pin it.
import { create } from "@bufbuild/protobuf";
import { ConversionError } from "../errors.js";
import { AttachmentSchema, Role, ToolCallSchema } from "../gen/turnkeeper/v1/history_pb.js";
import { CacheLifetime } from "../gen/turnkeeper/v1/profile_pb.js";
import { attachmentUrl, canonicalJson, codePoints, copy, decodeBase64, expectArray, expectObject, expectString, finish, flatRows, imagesAreAttachments, isCarrier, isObject, marker, markerTextRow, markerUrl, newRow, parseDataUrl, partTexts, shown, splitMarkers, Streams, plainJson, } from "./common.js";
const FORMAT = "anthropic";
/** The `cache_control` breakpoints a Messages request may carry (spec §14). */
export const MAX_CACHE_MARKS = 4;
/**
 * Past four marks, turnkeeper's breakpoint candidates are left out in this order (spec §14): the
 * newest collapsed turn's, the system row's, then the rolling last row's.
 */
const LEAVE_OUT_ORDER = [2, 1, 3];
const TTL = new Map([
    [CacheLifetime.FIVE_MINUTES, "5m"],
    [CacheLifetime.ONE_HOUR, "1h"],
]);
const MARK = "cache_control";
/**
 * Converts an Anthropic Messages request (`system` and `messages`; other keys are the caller's and
 * are not read), or a bare `messages` array, to a History.
 */
export function fromAnthropic(input, options) {
    const request = plainJson(input, "request");
    const rows = [];
    let messages;
    if (Array.isArray(request)) {
        messages = request;
    }
    else {
        const object = expectObject(request, "request");
        const system = object.system;
        if (typeof system === "string") {
            const row = newRow(Role.SYSTEM);
            row.add(system);
            rows.push(row);
        }
        else if (system !== undefined && system !== null) {
            expectArray(system, "system").forEach((raw, k) => rows.push(importSystemBlock(raw, `system[${k}]`)));
        }
        messages = expectArray(object.messages, "messages");
    }
    messages.forEach((raw, i) => {
        const where = `messages[${i}]`;
        const message = expectObject(raw, where);
        if (message.role === "user")
            rows.push(...importUser(message, where));
        else if (message.role === "assistant")
            rows.push(importAssistant(message, where));
        else
            throw new ConversionError(`${where}.role: unsupported role '${shown(message.role)}'`);
    });
    return finish(rows, FORMAT, defaultSkeleton, options);
}
function importSystemBlock(raw, where) {
    const block = expectObject(raw, where);
    if (block.type !== "text")
        throw new ConversionError(`${where}: only text blocks are supported`);
    const row = newRow(Role.SYSTEM, copy(block));
    row.skeleton.text = row.add(expectString(block.text, `${where}.text`));
    return row;
}
/** One row per `tool_result` block and one user row per run of other blocks; later rows continue the message. */
function importUser(message, where) {
    const skeleton = copy(message);
    const content = message.content;
    if (typeof content === "string") {
        const row = newRow(Role.USER, skeleton);
        skeleton.content = row.add(content);
        return [row];
    }
    const blocks = expectArray(content, `${where}.content`).map((b, k) => expectObject(b, `${where}.content[${k}]`));
    const runs = [];
    blocks.forEach((block, k) => {
        const last = runs[runs.length - 1];
        if (block.type === "tool_result" || last === undefined || last[0]?.[1].type === "tool_result")
            runs.push([[k, block]]);
        else
            last.push([k, block]);
    });
    if (runs.length === 0) {
        skeleton.content = [];
        return [newRow(Role.USER, skeleton)];
    }
    return runs.map((run, n) => {
        const head = n === 0 ? skeleton : {};
        const first = run[0];
        let row;
        if (first[1].type === "tool_result") {
            const [imported, block] = importToolResult(first[1], `${where}.content[${first[0]}]`);
            row = imported;
            head.content = [block];
        }
        else {
            row = newRow(Role.USER, head);
            head.content = importUserBlocks(row, run, `${where}.content`);
        }
        row.skeleton = head;
        return row;
    });
}
function importUserBlocks(row, run, where) {
    const attach = isCarrier(partTexts(run.map(([, b]) => b), ["text"]));
    return run.map(([k, block]) => {
        const here = `${where}[${k}]`;
        const skeleton = copy(block);
        if (block.type === "text")
            skeleton.text = row.add(expectString(block.text, `${here}.text`));
        else if (block.type === "image") {
            const url = importImage(block, skeleton, here);
            if (attach)
                row.message.attachments.push(attachment(url, here));
            else
                row.add(marker(url, here));
        }
        else
            throw new ConversionError(`${here}: unsupported user block type '${shown(block.type)}'`);
        return skeleton;
    });
}
/** The image's URL (a data URL for base64 sources); the skeleton keeps the rest of the source. */
function importImage(block, skeleton, where) {
    const source = copy(expectObject(block.source, `${where}.source`));
    let url;
    if (source.type === "base64") {
        const mediaType = expectString(source.media_type, `${where}.source.media_type`);
        url = `data:${mediaType};base64,${expectString(source.data, `${where}.source.data`)}`;
        delete source.data;
    }
    else if (source.type === "url") {
        url = expectString(source.url, `${where}.source.url`);
        delete source.url;
    }
    else {
        throw new ConversionError(`${where}.source.type: unsupported image source '${shown(source.type)}'`);
    }
    skeleton.source = source;
    return url;
}
function attachment(url, where) {
    const parsed = parseDataUrl(url);
    if (parsed !== undefined) {
        return create(AttachmentSchema, { mediaType: parsed.mediaType, source: { case: "data", value: decodeBase64(parsed.payload, where) } });
    }
    return create(AttachmentSchema, { source: { case: "uri", value: url } });
}
function importToolResult(block, where) {
    const row = newRow(Role.TOOL);
    row.message.toolCallId = expectString(block.tool_use_id, `${where}.tool_use_id`);
    const skeleton = copy(block);
    delete skeleton.tool_use_id;
    const content = block.content;
    if (typeof content === "string")
        skeleton.content = row.add(content);
    else if (content !== undefined && content !== null) {
        skeleton.content = expectArray(content, `${where}.content`).map((raw, k) => {
            const here = `${where}.content[${k}]`;
            const part = expectObject(raw, here);
            const out = copy(part);
            if (part.type === "text")
                out.text = row.add(expectString(part.text, `${here}.text`));
            else if (part.type === "image")
                row.message.attachments.push(attachment(importImage(part, out, here), here));
            else
                throw new ConversionError(`${here}: unsupported tool_result block type '${shown(part.type)}'`);
            return out;
        });
    }
    return [row, skeleton];
}
function importAssistant(message, where) {
    const skeleton = copy(message);
    const row = newRow(Role.ASSISTANT, skeleton);
    const content = message.content;
    if (typeof content === "string") {
        skeleton.content = row.add(content);
        return row;
    }
    skeleton.content = expectArray(content, `${where}.content`).map((raw, k) => {
        const here = `${where}.content[${k}]`;
        const block = expectObject(raw, here);
        const out = copy(block);
        if (block.type === "text")
            out.text = row.add(expectString(block.text, `${here}.text`));
        else if (block.type === "thinking")
            out.thinking = row.add(expectString(block.thinking, here), "reasoning");
        else if (block.type === "redacted_thinking")
            out.data = row.add(expectString(block.data, `${here}.data`), "reasoning");
        else if (block.type === "tool_use") {
            row.message.toolCalls.push(create(ToolCallSchema, {
                id: expectString(block.id, `${here}.id`),
                name: expectString(block.name, `${here}.name`),
                arguments: canonicalJson(expectObject(block.input, `${here}.input`)),
            }));
            delete out.id;
            delete out.name;
            delete out.input;
        }
        else
            throw new ConversionError(`${here}: unsupported assistant block type '${shown(block.type)}'`);
        return out;
    });
    return row;
}
/** Whether a tool row without passthrough after `row` (as exported) joins its message. */
function continues(row) {
    if (row?.skeleton === undefined)
        return false;
    return !("role" in row.skeleton) || row.message.role === Role.TOOL;
}
function imageSkeletonForUrl(url) {
    const parsed = parseDataUrl(url);
    return parsed !== undefined ? { type: "image", source: { type: "base64", media_type: parsed.mediaType } } : { type: "image", source: { type: "url" } };
}
function attachmentSkeleton(a) {
    return a.source.case === "data" ? { type: "image", source: { type: "base64", media_type: a.mediaType } } : { type: "image", source: { type: "url" } };
}
function defaultSkeleton(row, previous) {
    const message = row.message;
    const n = codePoints(message.content);
    switch (message.role) {
        case Role.SYSTEM:
            return {}; // a lone leading system row is the `system` string; see toAnthropic
        case Role.TOOL: {
            const result = { type: "tool_result", content: n };
            if (message.attachments.length > 0) {
                result.content = [...(n > 0 ? [{ type: "text", text: n }] : []), ...message.attachments.map(attachmentSkeleton)];
            }
            return continues(previous) ? { content: [result] } : { role: "user", content: [result] };
        }
        case Role.USER: {
            if (message.attachments.length > 0 && isCarrier(message.content)) {
                return { role: "user", content: [{ type: "text", text: n }, ...message.attachments.map(attachmentSkeleton)] };
            }
            const pieces = markerTextRow(message) ? [] : splitMarkers(message.content);
            if (!pieces.some((p) => p.marker !== undefined))
                return { role: "user", content: n };
            return {
                role: "user",
                content: pieces.map((p) => (p.marker !== undefined ? imageSkeletonForUrl(markerUrl(p.marker)) : { type: "text", text: codePoints(p.text ?? "") })),
            };
        }
        case Role.ASSISTANT:
            if (message.toolCalls.length === 0)
                return { role: "assistant", content: n };
            return { role: "assistant", content: [...(n > 0 ? [{ type: "text", text: n }] : []), ...message.toolCalls.map(() => ({ type: "tool_use" }))] };
        default:
            throw new ConversionError(`role ${message.role} has no Anthropic role`);
    }
}
/** Whether a row continuing a message joins the last one (a user message of blocks). */
function joinable(message) {
    return message?.role === "user" && Array.isArray(message.content);
}
export function toAnthropic(history, options) {
    const rows = flatRows(history, FORMAT);
    const places = [];
    let lead = 0;
    while (lead < rows.length && rows[lead]?.message.role === Role.SYSTEM)
        lead++;
    const out = {};
    const first = rows[0];
    if (lead === 1 && first !== undefined && first.skeleton === undefined) {
        out.system = first.message.content;
        places.push({ system: true, block: undefined });
    }
    else if (lead > 0) {
        out.system = rows.slice(0, lead).map((row, i) => {
            const skeleton = row.skeleton ?? { type: "text", text: codePoints(row.message.content) };
            const streams = new Streams(row, `rows[${i}]`);
            const block = copy(skeleton);
            block.text = streams.text.take(skeleton.text, `rows[${i}].text`);
            streams.done();
            places.push({ system: true, block: i });
            return block;
        });
    }
    const messages = [];
    let previous;
    for (let i = lead; i < rows.length; i++) {
        const row = rows[i];
        const where = `rows[${i}]`;
        if (row.message.role === Role.SYSTEM)
            throw new ConversionError(`${where}: Anthropic Messages has no system row after messages`);
        const skeleton = row.skeleton ?? defaultSkeleton(row, previous);
        const message = exportMessage(row, skeleton, where);
        const last = messages[messages.length - 1];
        if ("role" in skeleton)
            messages.push(message);
        else if (last !== undefined && joinable(last))
            last.content.push(...message.content);
        else
            messages.push({ role: "user", ...message });
        places.push(lastBlock(messages, message));
        previous = { message: row.message, reasoning: row.reasoning, skeleton };
    }
    out.messages = messages;
    const breakpoints = options?.cacheBreakpoints ?? [];
    if (breakpoints.length > 0) {
        markBreakpoints(out, historyRowPlaces(history, places), breakpoints, lead, options?.cacheLifetime ?? CacheLifetime.UNSPECIFIED);
    }
    return out; // plain JSON; `Conversation` is the caller's name for it
}
/** Where the row just rendered as `rendered` (now the last message) has its last block; none when it rendered no block. */
function lastBlock(messages, rendered) {
    const message = messages.length - 1;
    if (typeof rendered.content === "string")
        return { system: false, message, block: undefined };
    if (!Array.isArray(rendered.content) || rendered.content.length === 0)
        return undefined;
    return { system: false, message, block: (messages[message]?.content).length - 1 };
}
/**
 * The last block of each history row, from that of each provider row (a ToolResults row of the
 * conversation shape is one provider row per result).
 */
function historyRowPlaces(history, places) {
    if (history.shape.case !== "conversation")
        return places;
    let end = 0;
    return history.shape.value.messages.map((message) => {
        const count = message.message.case === "toolResults" ? message.message.value.results.length : 1;
        end += count;
        return count > 0 ? places[end - 1] : undefined;
    });
}
/**
 * Which candidate of spec §14 a returned breakpoint is: 1 the last leading system row, 3 the last
 * row, 2 one in between (the newest collapsed turn's last row).
 */
function candidate(index, lead, rows) {
    if (index === lead - 1)
        return 1;
    if (index === rows - 1)
        return 3;
    return 2;
}
/** The blocks array a place is in, and the index of its block (undefined: a string not yet a block). */
function holderOf(out, place) {
    if (place.system)
        return [out, "system"];
    return [out.messages[place.message], "content"];
}
/** Whether the block at `place` already carries a mark (a string content carries none). */
function marked(out, place) {
    if (place.block === undefined)
        return false;
    const [holder, key] = holderOf(out, place);
    const block = holder[key][place.block];
    return block?.[MARK] !== undefined && block[MARK] !== null;
}
/** The block at `place`, turning a string content (or the `system` string) into one text block. */
function blockAt(out, place) {
    const [holder, key] = holderOf(out, place);
    const value = holder[key];
    if (typeof value === "string")
        holder[key] = [{ type: "text", text: value }];
    return holder[key][place.block ?? 0];
}
/** The `cache_control` marks in rendered blocks, nested blocks included (null is absent). */
function countMarks(value) {
    if (Array.isArray(value))
        return value.reduce((n, item) => n + countMarks(item), 0);
    if (!isObject(value))
        return 0;
    let n = value[MARK] === undefined || value[MARK] === null ? 0 : 1;
    for (const [key, inner] of Object.entries(value))
        if (key !== MARK)
            n += countMarks(inner);
    return n;
}
/**
 * Puts `cache_control` on the last block of each breakpoint row, leaving out candidates in the order
 * 2, 1, 3 while the request would hold more than four marks (spec §14). A block that already carries
 * the caller's mark keeps it, and it serves that breakpoint.
 */
function markBreakpoints(out, places, breakpoints, lead, lifetime) {
    const wanted = [];
    breakpoints.forEach((index, k) => {
        const place = Number.isInteger(index) && index >= 0 && index < places.length ? places[index] : null;
        if (place === null)
            throw new ConversionError(`cacheBreakpoints[${k}]: ${index} is not a row of the history`);
        if (place !== undefined && !wanted.some(([p]) => p === place))
            wanted.push([place, candidate(index, lead, places.length)]);
    });
    const room = Math.max(MAX_CACHE_MARKS - countMarks(out.system) - countMarks(out.messages), 0);
    const marks = wanted.filter(([place]) => !marked(out, place));
    for (const leftOut of LEAVE_OUT_ORDER) {
        for (let k = marks.findIndex(([, c]) => c === leftOut); marks.length > room && k >= 0; k = marks.findIndex(([, c]) => c === leftOut)) {
            marks.splice(k, 1);
        }
    }
    const ttl = TTL.get(lifetime);
    for (const [place] of marks)
        blockAt(out, place)[MARK] = ttl === undefined ? { type: "ephemeral" } : { type: "ephemeral", ttl };
}
function exportMessage(row, skeleton, where) {
    const message = row.message;
    const expected = message.role === Role.ASSISTANT ? "assistant" : "user";
    if ((skeleton.role ?? "user") !== expected)
        throw new ConversionError(`${where}: passthrough role does not match the row`);
    const streams = new Streams(row, where);
    const out = copy(skeleton);
    const content = skeleton.content;
    if (Array.isArray(content)) {
        const blocks = content.map((b, k) => exportBlock(message, streams, expectObject(b, `${where}.content[${k}]`), where));
        // Tool-use blocks whose call the sweep removed are gone with it.
        out.content = blocks.filter((b) => b !== undefined);
    }
    else {
        out.content = streams.text.take(content, `${where}.content`);
    }
    streams.done();
    return out;
}
function exportBlock(message, streams, block, where) {
    const out = copy(block);
    switch (block.type) {
        case "text":
            out.text = streams.text.take(block.text, `${where}.text`);
            return out;
        case "thinking":
            out.thinking = streams.reasoning.take(block.thinking, `${where}.thinking`);
            return out;
        case "redacted_thinking":
            out.data = streams.reasoning.take(block.data, `${where}.data`);
            return out;
        case "tool_use": {
            const call = streams.call();
            if (call === undefined)
                return undefined;
            let input;
            try {
                input = call.arguments === "" ? {} : JSON.parse(call.arguments);
            }
            catch {
                throw new ConversionError(`${where}: tool call ${call.id} arguments are not JSON`);
            }
            if (!isObject(input))
                throw new ConversionError(`${where}: tool call ${call.id} arguments are not a JSON object`);
            return { ...out, id: call.id, name: call.name, input };
        }
        case "tool_result": {
            if (message.role !== Role.TOOL)
                throw new ConversionError(`${where}: passthrough tool_result on a row that is not a tool`);
            out.tool_use_id = message.toolCallId;
            const inner = block.content;
            if (Array.isArray(inner)) {
                out.content = inner.map((b) => exportBlock(message, streams, expectObject(b, where), where));
            }
            else if (inner !== undefined && inner !== null) {
                out.content = streams.text.take(inner, `${where}.content`);
            }
            return out;
        }
        case "image": {
            const url = imagesAreAttachments(message) ? attachmentUrl(streams.attachment(where), where) : streams.text.markerUrl(where);
            const source = copy(expectObject(block.source ?? {}, `${where}.source`));
            if (source.type === "base64") {
                const parsed = parseDataUrl(url);
                if (parsed === undefined)
                    throw new ConversionError(`${where}: a base64 image needs a data: URL, got ${url.slice(0, 40)}`);
                source.media_type ??= parsed.mediaType;
                source.data = parsed.payload;
            }
            else {
                source.url = url;
            }
            out.source = source;
            return out;
        }
        default:
            throw new ConversionError(`${where}: passthrough block type '${shown(block.type)}' is not Anthropic`);
    }
}
//# sourceMappingURL=anthropic.js.map