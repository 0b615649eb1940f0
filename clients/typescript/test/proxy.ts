// A loopback TCP proxy in front of the server, so tests can break a live connection the way a
// network or a restarting sidecar would.
import { connect, createServer, type Server, type Socket } from "node:net";

export class FlakyProxy {
  private readonly sockets = new Set<Socket>();
  private refusing = false;
  private readonly muted = new WeakSet<Socket>();
  /** Connections accepted (and forwarded) so far. */
  connections = 0;

  private constructor(
    private readonly server: Server,
    readonly address: string,
  ) {}

  static async start(upstream: string): Promise<FlakyProxy> {
    const split = upstream.lastIndexOf(":");
    const host = upstream.slice(0, split);
    const port = Number(upstream.slice(split + 1));
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const self = new FlakyProxy(server, `127.0.0.1:${(server.address() as { port: number }).port}`);
    server.on("connection", (client) => self.accept(client, host, port));
    return self;
  }

  /** Resets every open connection. */
  cut(): void {
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
  }

  /** While true, new connections are reset as soon as they are accepted. */
  refuse(on: boolean): void {
    this.refusing = on;
  }

  /** From now on nothing from the server reaches the clients of the open connections: they are half-open. */
  muteOpenConnections(): void {
    for (const socket of this.sockets) this.muted.add(socket);
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket, host: string, port: number): void {
    if (this.refusing) {
      client.destroy();
      return;
    }
    this.connections++;
    const upstream = connect(port, host);
    for (const socket of [client, upstream]) {
      this.sockets.add(socket);
      socket.on("error", () => socket.destroy());
      socket.on("close", () => {
        this.sockets.delete(socket);
        (socket === client ? upstream : client).destroy();
      });
    }
    client.pipe(upstream);
    upstream.on("data", (chunk: Buffer) => {
      if (!this.muted.has(client)) client.write(chunk);
    });
  }
}
