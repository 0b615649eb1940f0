// OpenAI Agents SDK (JS): `callModelInputFilter: turnkeeperInputFilter(client, {...})` in the
// run options prepares each model call's input with turnkeeper. The SDK keeps its whole history;
// only the request the model receives is trimmed.
import type { CallModelInputFilter, CallModelInputFilterArgs } from "@openai/agents";
import type { TurnkeeperClient } from "../client.js";
import { plainJson } from "../convert/common.js";
import { fromOpenAIAgents, toOpenAIAgents } from "../convert/openai_agents.js";
import { prepareHistory, withOriginals, type AdapterOptions } from "./prepare.js";

export type TurnkeeperInputFilterOptions = AdapterOptions<CallModelInputFilterArgs> & {
  /** The tool schemas priced beside the history; default: the agent's function tools as JSON. */
  toolSchemas?: string[] | ((args: CallModelInputFilterArgs) => string[]);
};

/** The JSON of each function tool of the agent: what the model is sent for it. */
function agentToolSchemas(args: CallModelInputFilterArgs): string[] {
  return args.agent.tools.flatMap((tool) =>
    tool.type === "function" ? [JSON.stringify({ name: tool.name, description: tool.description, parameters: tool.parameters })] : [],
  );
}

/**
 * A `callModelInputFilter` that prepares every model call of a run with `prepareModelCall`: the
 * instructions are priced as a hook text beside the history (never trimmed), the agent's tools
 * as tool schemas, and the items the model receives are the SDK's own objects, less what was
 * trimmed or swept.
 */
export function turnkeeperInputFilter(client: TurnkeeperClient, options: TurnkeeperInputFilterOptions = {}): CallModelInputFilter {
  return async (args) => {
    const { input, instructions } = args.modelData;
    const schemas = options.toolSchemas;
    const toolSchemas = typeof schemas === "function" ? schemas(args) : (schemas ?? agentToolSchemas(args));
    const hookTexts = instructions !== undefined && instructions !== "" ? [instructions] : [];
    const prepared = await prepareHistory(client, options, args, fromOpenAIAgents(input), { hookTexts, toolSchemas });
    const items = withOriginals(toOpenAIAgents(prepared), input, (item) => plainJson(item, "input"));
    return instructions === undefined ? { input: items } : { input: items, instructions };
  };
}
