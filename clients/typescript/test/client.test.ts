// The wrapper against the live server: both transports, deadlines, message size, rich errors.
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { after, describe, test } from "node:test";
import { create, equals } from "@bufbuild/protobuf";
import type { Interceptor } from "@connectrpc/connect";
import {
  Code,
  connect,
  ErrorReason,
  EstimateTokensRequestSchema,
  EstimateTokensResponseSchema,
  HistorySchema,
  Role,
  TurnkeeperError,
  type History,
  type MessageEstimate,
} from "../src/index.js";
import { serverAddress, serverUnixPath, tcpClient } from "./support.js";

function chat(...messages: { role: Role; content?: string; toolCallId?: string }[]): History {
  return create(HistorySchema, { shape: { case: "chat", value: { messages } } });
}

const abcde = create(EstimateTokensRequestSchema, { history: chat({ role: Role.USER, content: "abcde" }) });

describe("connections", () => {
  // Each target form must reach the server; the spec pins "abcde" on a user row at 6 tokens.
  const targets: [string, () => Parameters<typeof connect>[0]][] = [
    ["host:port", () => serverAddress()],
    ["{ address }", () => ({ address: serverAddress() })],
    ["http:// URL", () => `http://${serverAddress()}`],
    ["socket path", () => serverUnixPath()],
    ["unix:path", () => `unix:${serverUnixPath()}`],
    ["unix:///path", () => `unix://${serverUnixPath()}`],
    ["{ unix }", () => ({ unix: serverUnixPath() })],
  ];
  for (const [name, target] of targets) {
    test(`connects by ${name}`, async () => {
      const client = connect(target());
      try {
        const response = await client.estimateTokens(abcde);
        assert.equal(response.totalTokens, 6n);
        assert.equal(response.turns, 1);
      } finally {
        client.close();
      }
    });
  }

  test("TCP and Unix socket give the same answer", async () => {
    const tcp = connect(serverAddress());
    const unix = connect(serverUnixPath());
    try {
      const request = { history: chat({ role: Role.SYSTEM, content: "sys" }, { role: Role.USER, content: "héllo 🦀" }) };
      const [a, b] = await Promise.all([tcp.estimateTokens(request), unix.estimateTokens(request)]);
      assert.ok(equals(EstimateTokensResponseSchema, a, b));
      assert.deepEqual(
        a.messages.map((m: MessageEstimate) => m.totalTokens),
        [5n, 7n], // ceil(3/4)+4, ceil(11/4)+4
      );
    } finally {
      tcp.close();
      unix.close();
    }
  });

  test("an unreachable server is UNAVAILABLE", async () => {
    // A port that was free a moment ago: nothing listens there any more.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
    const { port } = probe.address() as { port: number };
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const client = connect(`127.0.0.1:${port}`, { connectTimeoutMs: 2000 });
    try {
      await assert.rejects(client.estimateTokens(abcde), (e: unknown) => {
        assert.ok(e instanceof TurnkeeperError);
        assert.equal(e.code, Code.Unavailable);
        assert.equal(e.codeName, "UNAVAILABLE");
        assert.equal(e.reasonName, ""); // no server, no ErrorInfo
        return true;
      });
    } finally {
      client.close();
    }
  });

  test("rejects an empty Unix socket path", () => {
    assert.throws(() => connect("unix:"), TypeError);
  });
});

describe("deadlines and limits", () => {
  test("every unary call carries a deadline, overridable per call", async () => {
    const seen: (string | null)[] = [];
    const capture: Interceptor = (next) => (req) => {
      seen.push(req.header.get("grpc-timeout"));
      return next(req);
    };
    const client = tcpClient({ timeoutMs: 5000, interceptors: [capture] });
    try {
      await client.estimateTokens(abcde);
      await client.estimateTokens(abcde, { timeoutMs: 1234 });
      await client.estimateTokens(abcde, { timeoutMs: 0 }); // <= 0 disables the deadline
      assert.deepEqual(seen, ["5000m", "1234m", null]);
    } finally {
      client.close();
    }
  });

  test("an expired deadline is DEADLINE_EXCEEDED", async () => {
    const client = tcpClient();
    try {
      // 8 MiB cannot be sent, priced and answered within 1 ms.
      const big = { history: chat({ role: Role.USER, content: "x".repeat(8 << 20) }) };
      await assert.rejects(client.estimateTokens(big, { timeoutMs: 1 }), (e: unknown) => {
        assert.ok(e instanceof TurnkeeperError);
        assert.equal(e.codeName, "DEADLINE_EXCEEDED");
        return true;
      });
    } finally {
      client.close();
    }
  });

  test("messages beyond gRPC's 4 MiB default pass both ways", async () => {
    const client = tcpClient();
    try {
      const content = "x".repeat(24 << 20);
      // SweepOrphans returns the history, so 24 MiB travels in both directions.
      const response = await client.sweepOrphans({ history: chat({ role: Role.USER, content }) });
      assert.equal(response.history?.shape.case, "chat");
      assert.equal(response.history?.shape.value?.messages[0]?.content.length, content.length);
    } finally {
      client.close();
    }
  });
});

describe("rich errors", () => {
  const client = tcpClient();
  after(() => client.close());

  test("an invalid history decodes into ErrorInfo and BadRequest", async () => {
    const history = chat({ role: Role.UNSPECIFIED, content: "?" }, { role: Role.TOOL, content: "result" });
    await assert.rejects(client.estimateTokens({ history }), (e: unknown) => {
      assert.ok(e instanceof TurnkeeperError, String(e));
      assert.equal(e.code, Code.InvalidArgument);
      assert.equal(e.codeName, "INVALID_ARGUMENT");
      assert.equal(e.domain, "turnkeeper.v1");
      assert.equal(e.reasonName, "ERROR_REASON_INVALID_HISTORY");
      assert.equal(e.reason, ErrorReason.INVALID_HISTORY);
      assert.deepEqual(
        e.fieldViolations.map((v) => v.field).sort(),
        ["history.chat.messages[0].role", "history.chat.messages[1].tool_call_id"],
      );
      assert.ok(e.fieldViolations.every((v) => v.description !== ""));
      assert.equal(e.capacityReport, undefined);
      assert.ok(e.rawMessage.length > 0);
      return true;
    });
  });

  test("a missing history names the `history` field", async () => {
    await assert.rejects(client.estimateTokens({}), (e: unknown) => {
      assert.ok(e instanceof TurnkeeperError);
      assert.deepEqual(e.fieldViolations.map((v) => v.field), ["history"]);
      return true;
    });
  });

  test("a request over capacity carries the CapacityReport", async () => {
    const profiles = {
      runtime: { defaultProvider: "tiny" },
      providers: [{ alias: "tiny", model: "m", contextWindow: 10n }],
      selection: {},
    };
    // "x" * 40 prices at ceil(40/4) + 4 = 14 tokens; one hook text "abcd" at 5; 3 reserved: 22 > 10.
    const request = {
      history: chat({ role: Role.USER, content: "x".repeat(40) }),
      profiles,
      hookTexts: ["abcd"],
      reservedOutputTokens: 3n,
    };
    for (const call of [() => client.checkCapacity(request), () => client.prepareModelCall(request)]) {
      await assert.rejects(call(), (e: unknown) => {
        assert.ok(e instanceof TurnkeeperError, String(e));
        assert.equal(e.codeName, "FAILED_PRECONDITION");
        assert.equal(e.reason, ErrorReason.CONTEXT_WINDOW_EXCEEDED);
        const report = e.capacityReport;
        assert.ok(report, "no CapacityReport detail");
        assert.equal(report.messageTokens, 14n);
        assert.equal(report.hookTokens, 5n);
        assert.equal(report.reservedOutputTokens, 3n);
        assert.equal(report.totalTokens, 22n);
        assert.equal(report.fits, false);
        assert.equal(report.capacity?.known, true);
        assert.equal(report.capacity?.safetyTokens, 10n);
        assert.ok(e.preconditionViolations.length > 0, "no PreconditionFailure detail");
        return true;
      });
    }
  });
});
