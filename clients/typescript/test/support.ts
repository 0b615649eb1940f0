// Shared helpers: the live server started by tests/support/with_server.py.
import { connect, type ClientOptions, type TurnkeeperClient } from "../src/index.js";

function requireEnv(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === "") {
    throw new Error(`${name} is not set: run the tests through tests/support/with_server.py (make test)`);
  }
  return value;
}

export const serverAddress = (): string => requireEnv("TURNKEEPER_ADDRESS");
export const serverUnixPath = (): string => requireEnv("TURNKEEPER_UNIX");
export const conformanceDir = (): string => requireEnv("TURNKEEPER_CONFORMANCE_DIR");

/** A TCP client for one test; closed by the caller (usually in `after`). */
export function tcpClient(options?: ClientOptions): TurnkeeperClient {
  return connect(serverAddress(), options);
}

/** JSON.stringify that prints bigint values (the generated uint64 fields) as strings. */
export function show(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? v.toString() : v), 2);
}
