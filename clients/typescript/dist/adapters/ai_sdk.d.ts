import { type LanguageModelMiddleware, type PrepareStepFunction, type ToolSet } from "ai";
import type { TurnkeeperClient } from "../client.js";
import { type AdapterOptions } from "./prepare.js";
type PrepareStepArgs = Parameters<PrepareStepFunction<ToolSet>>[0];
type MiddlewareArgs = Parameters<NonNullable<LanguageModelMiddleware["transformParams"]>>[0];
export type TurnkeeperPrepareStepOptions = AdapterOptions<PrepareStepArgs> & {
    /** The call's tools, priced as tool schemas beside the history (their JSON schema). */
    tools?: ToolSet;
};
export type TurnkeeperMiddlewareOptions = AdapterOptions<MiddlewareArgs>;
/**
 * A `prepareStep` that prepares every step's messages with `prepareModelCall` from the call's
 * full history (its initial messages and every response message so far), so a trim never
 * compounds: the instructions are priced as hook texts (never trimmed), `tools` as tool schemas,
 * and the messages are the SDK's own objects, less what was trimmed or swept.
 */
export declare function turnkeeperPrepareStep<TOOLS extends ToolSet = ToolSet>(client: TurnkeeperClient, options?: TurnkeeperPrepareStepOptions): PrepareStepFunction<TOOLS>;
/**
 * A language model middleware that prepares every call's prompt with `prepareModelCall`: system
 * messages are leading history rows (kept by every trim), the call's function tools are priced as
 * tool schemas, and the prompt's own parts come back for every message left as it was.
 */
export declare function turnkeeperMiddleware(client: TurnkeeperClient, options?: TurnkeeperMiddlewareOptions): LanguageModelMiddleware;
export {};
