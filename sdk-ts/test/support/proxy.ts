/**
 * A loopback HTTP/1.1 forwarder that loses answers or plays an overloaded
 * gateway, as the Python client's tests use. Requests are numbered across
 * connections; `plan[n]` says what happens to request n:
 *
 * - "forward" (also every request beyond the plan): relay it and its answer;
 * - "drop": forward it, read the service's whole answer, then close the
 *   client's connection without relaying it (the service acted, the client
 *   never hears);
 * - "unavailable": answer 503 itself without forwarding.
 */

import { connect, createServer, type Server, type Socket } from "node:net";

export type Step = "forward" | "drop" | "unavailable";

export interface SeenRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

const UNAVAILABLE =
  "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: 51\r\nConnection: close\r\n\r\n" +
  '{"error":"gateway is overloaded","code":"overload"}';

/** Reads whole HTTP/1.1 messages (head and Content-Length body) off a socket. */
class MessageReader {
  #buffer = Buffer.alloc(0);
  #waiting: (() => void) | null = null;
  #ended = false;

  constructor(socket: Socket) {
    socket.on("data", (chunk: Buffer) => {
      this.#buffer = Buffer.concat([this.#buffer, chunk]);
      this.#waiting?.();
    });
    const end = () => {
      this.#ended = true;
      this.#waiting?.();
    };
    socket.on("end", end);
    socket.on("close", end);
    socket.on("error", end);
  }

  async next(): Promise<{ raw: Buffer; headers: Record<string, string>; head: string } | null> {
    for (;;) {
      const headEnd = this.#buffer.indexOf("\r\n\r\n");
      if (headEnd >= 0) {
        const head = this.#buffer.subarray(0, headEnd).toString("latin1");
        const headers: Record<string, string> = {};
        for (const line of head.split("\r\n").slice(1)) {
          const colon = line.indexOf(":");
          if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
        }
        const total = headEnd + 4 + Number(headers["content-length"] ?? 0);
        if (this.#buffer.length >= total) {
          const raw = this.#buffer.subarray(0, total);
          this.#buffer = this.#buffer.subarray(total);
          return { raw, headers, head };
        }
      }
      if (this.#ended) return null;
      await new Promise<void>((resolve) => {
        this.#waiting = resolve;
      });
      this.#waiting = null;
    }
  }
}

export class Proxy {
  readonly upstreamPort: number;
  readonly plan: Step[];
  readonly requests: SeenRequest[] = [];
  #server: Server | null = null;
  readonly #sockets = new Set<Socket>();

  constructor(upstreamPort: number, plan: Step[] = []) {
    this.upstreamPort = upstreamPort;
    this.plan = [...plan];
  }

  get url(): string {
    const address = this.#server?.address();
    if (!address || typeof address === "string") throw new Error("the proxy is not listening");
    return `http://127.0.0.1:${address.port}`;
  }

  async start(): Promise<this> {
    this.#server = createServer((socket) => void this.#handle(socket));
    await new Promise<void>((resolve) => this.#server?.listen(0, "127.0.0.1", resolve));
    return this;
  }

  async stop(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    await new Promise((resolve) => this.#server?.close(resolve));
  }

  async #handle(client: Socket): Promise<void> {
    this.#sockets.add(client);
    const fromClient = new MessageReader(client);
    let upstream: { socket: Socket; reader: MessageReader } | null = null;
    try {
      for (;;) {
        const message = await fromClient.next();
        if (message === null) break;
        const [method = "", path = ""] = message.head.split("\r\n", 1)[0]?.split(" ") ?? [];
        const step = this.plan[this.requests.length] ?? "forward";
        this.requests.push({
          method,
          path,
          headers: message.headers,
          body: message.raw.subarray(message.raw.indexOf("\r\n\r\n") + 4).toString("utf8"),
        });
        if (step === "unavailable") {
          client.end(UNAVAILABLE);
          break;
        }
        if (upstream === null) {
          const socket = connect(this.upstreamPort, "127.0.0.1");
          this.#sockets.add(socket);
          upstream = { socket, reader: new MessageReader(socket) };
        }
        upstream.socket.write(message.raw);
        const answer = await upstream.reader.next();
        if (answer === null || step === "drop") break;
        client.write(answer.raw);
      }
    } finally {
      upstream?.socket.destroy();
      client.destroy();
    }
  }
}
