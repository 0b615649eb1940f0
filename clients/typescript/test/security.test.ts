// TLS, mTLS and bearer tokens against the servers of `with_server.py --secure`, with
// certificates issued when the run started.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { Code, connect, HistorySchema, Role, TurnkeeperError, type TlsOptions } from "../src/index.js";

function env(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === "") throw new Error(`${name} is not set: run make test (with_server.py --secure)`);
  return value;
}

function tls(mtls: boolean): TlsOptions {
  const ca = readFileSync(env("TURNKEEPER_TLS_CA"));
  if (!mtls) return { ca };
  return { ca, cert: readFileSync(env("TURNKEEPER_TLS_CLIENT_CERT")), key: readFileSync(env("TURNKEEPER_TLS_CLIENT_KEY")) };
}

const history = create(HistorySchema, {
  shape: {
    case: "chat",
    value: {
      messages: [
        { role: Role.USER, content: "hello" },
        { role: Role.ASSISTANT, content: "hi" },
        { role: Role.USER, content: "again" },
      ],
    },
  },
});

test("TLS with a token", async () => {
  const client = connect(env("TURNKEEPER_TLS_ADDRESS"), { tls: tls(false), token: env("TURNKEEPER_TOKEN") });
  try {
    assert.equal((await client.estimateTokens({ history })).turns, 2);
  } finally {
    client.close();
  }
});

test("TLS without a token is UNAUTHENTICATED", async () => {
  const client = connect(env("TURNKEEPER_TLS_ADDRESS"), { tls: tls(false) });
  try {
    await assert.rejects(client.estimateTokens({ history }), (error: unknown) => {
      assert.ok(error instanceof TurnkeeperError);
      assert.equal(error.code, Code.Unauthenticated);
      assert.equal(error.reasonName, "ERROR_REASON_UNAUTHENTICATED");
      return true;
    });
  } finally {
    client.close();
  }
});

test("mTLS with a client certificate and a token", async () => {
  const client = connect(env("TURNKEEPER_MTLS_ADDRESS"), { tls: tls(true), token: env("TURNKEEPER_TOKEN") });
  try {
    assert.equal((await client.estimateTokens({ history })).turns, 2);
  } finally {
    client.close();
  }
});

test("mTLS without a client certificate fails before reaching the server", async () => {
  const client = connect(env("TURNKEEPER_MTLS_ADDRESS"), { tls: tls(false), token: env("TURNKEEPER_TOKEN") });
  try {
    await assert.rejects(client.estimateTokens({ history }), (error: unknown) => {
      assert.ok(error instanceof TurnkeeperError);
      assert.notEqual(error.code, Code.Unauthenticated);
      assert.equal(error.reasonName, "");
      return true;
    });
  } finally {
    client.close();
  }
});

test("tls.cert and tls.key go together", () => {
  assert.throws(() => connect("127.0.0.1:1", { tls: { cert: "x" } }), /together/);
});

test("TrimEvents carry the token and honour the subscribe right", async () => {
  const allowed = connect(env("TURNKEEPER_TLS_ADDRESS"), { tls: tls(false), token: env("TURNKEEPER_TOKEN") });
  const denied = connect(env("TURNKEEPER_TLS_ADDRESS"), { tls: tls(false), token: env("TURNKEEPER_TOKEN_NO_EVENTS") });
  try {
    const subscription = await allowed.subscribeTrimEvents({});
    subscription.close();
    await assert.rejects(denied.subscribeTrimEvents({}), (error: unknown) => {
      assert.ok(error instanceof TurnkeeperError, String(error));
      assert.equal(error.codeName, "PERMISSION_DENIED");
      assert.equal(error.reasonName, "ERROR_REASON_PERMISSION_DENIED");
      return true;
    });
  } finally {
    allowed.close();
    denied.close();
  }
});
