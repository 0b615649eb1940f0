// Vercel AI SDK: `prepareStep: turnkeeperPrepareStep(client, {...})` for generateText, streamText
// and agents, or `wrapLanguageModel({ model, middleware: turnkeeperMiddleware(client, {...}) })`
// for any call of a model. The SDK keeps its whole history; only the request is trimmed.
import { asSchema, type LanguageModelMiddleware, type ModelMessage, type PrepareStepFunction, type PrepareStepResult, type ToolSet } from "ai";
import type { TurnkeeperClient } from "../client.js";
import { aiSdkJson, fromAISDK, toAISDK } from "../convert/ai_sdk.js";
import { prepareHistory, withOriginals, type AdapterOptions } from "./prepare.js";

type PrepareStepArgs = Parameters<PrepareStepFunction<ToolSet>>[0];
type MiddlewareArgs = Parameters<NonNullable<LanguageModelMiddleware["transformParams"]>>[0];

export type TurnkeeperPrepareStepOptions = AdapterOptions<PrepareStepArgs> & {
  /** The call's tools, priced as tool schemas beside the history (their JSON schema). */
  tools?: ToolSet;
};

export type TurnkeeperMiddlewareOptions = AdapterOptions<MiddlewareArgs>;

/** The JSON the model is sent for each tool: name, description and input schema. */
async function toolSchemas(tools: ToolSet | undefined): Promise<string[]> {
  const out: string[] = [];
  for (const [name, tool] of Object.entries(tools ?? {})) {
    const inputSchema = await asSchema(tool.inputSchema).jsonSchema;
    out.push(JSON.stringify({ name, description: tool.description, inputSchema }));
  }
  return out;
}

/** The step's instructions as the texts priced beside the history. */
function instructionTexts(instructions: PrepareStepArgs["instructions"]): string[] {
  if (instructions === undefined) return [];
  const all = Array.isArray(instructions) ? instructions : [instructions];
  return all.map((one) => (typeof one === "string" ? one : one.content)).filter((text) => text !== "");
}

/**
 * A `prepareStep` that prepares every step's messages with `prepareModelCall` from the call's
 * full history (its initial messages and every response message so far), so a trim never
 * compounds: the instructions are priced as hook texts (never trimmed), `tools` as tool schemas,
 * and the messages are the SDK's own objects, less what was trimmed or swept.
 */
export function turnkeeperPrepareStep<TOOLS extends ToolSet = ToolSet>(
  client: TurnkeeperClient,
  options: TurnkeeperPrepareStepOptions = {},
): PrepareStepFunction<TOOLS> {
  let schemas: Promise<string[]> | undefined;
  return async (args): Promise<PrepareStepResult<TOOLS>> => {
    const step = args as unknown as PrepareStepArgs;
    const full: ModelMessage[] = [...step.initialMessages, ...step.responseMessages, ...(step.experimental_steeringMessages ?? [])];
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
export function turnkeeperMiddleware(client: TurnkeeperClient, options: TurnkeeperMiddlewareOptions = {}): LanguageModelMiddleware {
  return {
    specificationVersion: "v4",
    transformParams: async (args) => {
      const { params } = args;
      const tools = (params.tools ?? []).flatMap((tool) =>
        tool.type === "function" ? [JSON.stringify({ name: tool.name, description: tool.description, inputSchema: tool.inputSchema })] : [],
      );
      const prepared = await prepareHistory(client, options, args, fromAISDK(params.prompt), { hookTexts: [], toolSchemas: tools });
      const prompt: typeof params.prompt = withOriginals(toAISDK(prepared), params.prompt, aiSdkJson);
      return { ...params, prompt };
    },
  };
}
