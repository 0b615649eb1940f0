import { jsonEqual } from "../convert/common.js";
/** Sends one model call's history, with the texts and tool schemas that go beside it, through `prepareModelCall`. */
export async function prepareHistory(client, options, args, history, beside) {
    const sessionId = typeof options.sessionId === "function" ? options.sessionId(args) : options.sessionId;
    const request = {
        history,
        hookTexts: beside.hookTexts,
        toolSchemas: beside.toolSchemas,
        caller: { ...options.caller, sessionId: sessionId ?? "" },
    };
    if (options.profiles !== undefined)
        request.profiles = options.profiles;
    if (options.reservedOutputTokens !== undefined)
        request.reservedOutputTokens = options.reservedOutputTokens;
    const response = await client.prepareModelCall(request, options.callOptions);
    options.onPrepared?.(response, args);
    if (response.history === undefined)
        throw new Error("turnkeeper: PrepareModelCall answered without a history");
    return response.history;
}
/**
 * The prepared items with the framework's own objects in place of every item that came back
 * unchanged (in order: the kept items are a subsequence of the originals, plus the breadcrumb and
 * items the orphan sweep changed, which are the converter's plain JSON).
 */
export function withOriginals(prepared, originals, asJson) {
    const plain = originals.map(asJson);
    let next = 0;
    return prepared.map((item) => {
        for (let j = next; j < originals.length; j++) {
            if (jsonEqual(item, plain[j])) {
                next = j + 1;
                return originals[j];
            }
        }
        return item; // new or changed: the converter's JSON, which the framework accepts as its type
    });
}
//# sourceMappingURL=prepare.js.map