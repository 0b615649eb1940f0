import type { CallModelInputFilter, CallModelInputFilterArgs } from "@openai/agents";
import type { TurnkeeperClient } from "../client.js";
import { type AdapterOptions } from "./prepare.js";
export type TurnkeeperInputFilterOptions = AdapterOptions<CallModelInputFilterArgs> & {
    /** The tool schemas priced beside the history; default: the agent's function tools as JSON. */
    toolSchemas?: string[] | ((args: CallModelInputFilterArgs) => string[]);
};
/**
 * A `callModelInputFilter` that prepares every model call of a run with `prepareModelCall`: the
 * instructions are priced as a hook text beside the history (never trimmed), the agent's tools
 * as tool schemas, and the items the model receives are the SDK's own objects, less what was
 * trimmed or swept.
 */
export declare function turnkeeperInputFilter(client: TurnkeeperClient, options?: TurnkeeperInputFilterOptions): CallModelInputFilter;
