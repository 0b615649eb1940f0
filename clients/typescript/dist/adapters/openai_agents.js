import { plainJson } from "../convert/common.js";
import { fromOpenAIAgents, toOpenAIAgents } from "../convert/openai_agents.js";
import { prepareHistory, withOriginals } from "./prepare.js";
/** The JSON of each function tool of the agent: what the model is sent for it. */
function agentToolSchemas(args) {
    return args.agent.tools.flatMap((tool) => tool.type === "function" ? [JSON.stringify({ name: tool.name, description: tool.description, parameters: tool.parameters })] : []);
}
/**
 * A `callModelInputFilter` that prepares every model call of a run with `prepareModelCall`: the
 * instructions are priced as a hook text beside the history (never trimmed), the agent's tools
 * as tool schemas, and the items the model receives are the SDK's own objects, less what was
 * trimmed or swept.
 */
export function turnkeeperInputFilter(client, options = {}) {
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
//# sourceMappingURL=openai_agents.js.map