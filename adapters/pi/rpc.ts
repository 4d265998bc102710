/**
 * A JSON-RPC 2.0 client for `selfctx serve --stdio`, a child process speaking one JSON value per
 * line. Lines are split on "\n" only: Node's readline also splits on U+2028 and U+2029, which the
 * server's JSON may carry unescaped inside strings.
 */

import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";

export class RpcError extends Error {
  constructor(
    message: string,
    readonly code: number,
    readonly data: unknown,
  ) {
    super(message);
  }
}

type Pending = { resolve: (value: any) => void; reject: (error: Error) => void };

export class SelfctxServer {
  private child: ChildProcessWithoutNullStreams;
  private buffer = "";
  private nextId = 1;
  private pending = new Map<number, Pending>();
  private exited: Promise<number | null>;
  stderr = "";

  constructor(command: string, args: string[], cwd: string) {
    this.child = spawn(command, args, { cwd, stdio: ["pipe", "pipe", "pipe"] });
    this.child.stdout.setEncoding("utf8");
    this.child.stdout.on("data", (chunk: string) => this.receive(chunk));
    this.child.stderr.setEncoding("utf8");
    this.child.stderr.on("data", (chunk: string) => {
      this.stderr = (this.stderr + chunk).slice(-20000); // the last lines, for error messages
    });
    this.exited = new Promise((resolve) => {
      this.child.on("exit", (code) => {
        const error = new Error(`selfctx serve exited (${code}): ${this.stderr.trim()}`);
        for (const waiting of this.pending.values()) waiting.reject(error);
        this.pending.clear();
        resolve(code);
      });
      this.child.on("error", (error) => {
        for (const waiting of this.pending.values()) waiting.reject(error);
        this.pending.clear();
        resolve(null);
      });
    });
  }

  private receive(chunk: string): void {
    this.buffer += chunk;
    let end: number;
    while ((end = this.buffer.indexOf("\n")) >= 0) {
      const line = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 1);
      if (!line.trim()) continue;
      const answer = JSON.parse(line);
      const waiting = this.pending.get(answer.id);
      if (!waiting) continue;
      this.pending.delete(answer.id);
      if (answer.error) {
        waiting.reject(new RpcError(answer.error.message, answer.error.code, answer.error.data));
      } else {
        waiting.resolve(answer.result);
      }
    }
  }

  call<T = any>(method: string, params: Record<string, unknown>): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
    });
  }

  /** End of input closes every session and ends the server; waits for it to exit. */
  async close(timeoutMs = 10000): Promise<void> {
    this.child.stdin.end();
    const timer = new Promise<null>((resolve) => setTimeout(() => resolve(null), timeoutMs));
    if ((await Promise.race([this.exited, timer])) === null && this.child.exitCode === null) {
      this.child.kill();
    }
  }
}
