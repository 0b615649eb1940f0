// Vercel AI SDK: `prepareStep: turnkeeperPrepareStep(client, {...})` for generateText, streamText
// and agents, or `wrapLanguageModel({ model, middleware: turnkeeperMiddleware(client, {...}) })`
// for any call of a model. The SDK keeps its whole history; only the request is trimmed.
import { asSchema } from "ai";
import { aiSdkJson, fromAISDK, toAISDK } from "../convert/ai_sdk.js";
import { prepareHistory, withOriginals } from "./prepare.js";
/** The JSON the model is sent for each tool: name, description and input schema. */
async function toolSchemas(tools) {
    const out = [];
    for (const [name, tool] of Object.entries(tools ?? {})) {
        const inputSchema = await asSchema(tool.inputSchema).jsonSchema;
        out.push(JSON.stringify({ name, description: tool.description, inputSchema }));
    }
    return out;
}
/** The step's instructions as the texts priced beside the history. */
function instructionTexts(instructions) {
    if (instructions === undefined)
        return [];
    const all = Array.isArray(instructions) ? instructions : [instructions];
    return all.map((one) => (typeof one === "string" ? one : one.content)).filter((text) => text !== "");
}
/**
 * A `prepareStep` that prepares every step's messages with `prepareModelCall` from the call's
 * full history (its initial messages and every response message so far), so a trim never
 * compounds: the instructions are priced as hook texts (never trimmed), `tools` as tool schemas,
 * and the messages are the SDK's own objects, less what was trimmed or swept.
 */
export function turnkeeperPrepareStep(client, options = {}) {
    let schemas;
    return async (args) => {
        const step = args;
        const full = [...step.initialMessages, ...step.responseMessages, ...(step.experimental_steeringMessages ?? [])];
        schemas ??= toolSchemas(options.tools);
        const hookTexts = instructionTexts(step.instructions);
        const prepared = await prepareHistory(client, options, step, fromAISDK(full), { hookTexts, toolSchemas: await schemas });
        return { messages: withOriginals(toAISDK(prepared), full, aiSdkJson) };
    };
}
/**
 * A language model middleware that prepares every call's prompt with `prepareModelCall`: system
 * messages are leading history rows (kept by every trim), the call's function tools are priced as
 * tool schemas, and the prompt's own parts come back for every message left as it was.
 */
export function turnkeeperMiddleware(client, options = {}) {
    return {
        specificationVersion: "v4",
        transformParams: async (args) => {
            const { params } = args;
            const tools = (params.tools ?? []).flatMap((tool) => tool.type === "function" ? [JSON.stringify({ name: tool.name, description: tool.description, inputSchema: tool.inputSchema })] : []);
            const prepared = await prepareHistory(client, options, args, fromAISDK(params.prompt), { hookTexts: [], toolSchemas: tools });
            const prompt = withOriginals(toAISDK(prepared), params.prompt, aiSdkJson);
            return { ...params, prompt };
        },
    };
}
//# sourceMappingURL=ai_sdk.js.map