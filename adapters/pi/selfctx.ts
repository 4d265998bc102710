/**
 * self-context-manager for the Pi coding agent.
 *
 * Spawns `selfctx serve --stdio` (the context manager's JSON-RPC server) when a Pi session starts,
 * and from then on, before every model call (Pi's `context` hook), hands it Pi's conversation and
 * gives Pi the managed conversation instead: old tool outputs collapsed to one line, files read
 * kept as versioned objects. The model gets four tools, `activate`, `deactivate`, `pin` and
 * `unpin`, to bring content back or keep it, and `search` over everything the session has seen.
 * The session is closed when Pi shuts down.
 *
 * Settings (environment; docs/configuration.md): SELFCTX_COMMAND (default `selfctx`), SELFCTX_STORE
 * (`memory`, `auto` or `xtdb://HOST:PORT`; default: the server's store setting, `memory` unless
 * configured), SELFCTX_POLICY (a layout policy name), SELFCTX_POLICY_OPTIONS (JSON, e.g.
 * `{"trigger_tokens": 20000}`).
 */

import type { ExtensionAPI, ExtensionContext } from "@mariozechner/pi-coding-agent";
import { Type } from "typebox";
import { fromChat, toChat, type PiMessage } from "./convert.ts";
import { SelfctxServer } from "./rpc.ts";

const TOOLS: Record<string, string> = {
  activate:
    "Load the full content of an object (a file or a tool output) into your context, by the id or #handle shown for it.",
  deactivate: "Collapse an object to its one-line summary; its content stays retrievable.",
  pin: "Keep a tool output in context: pinned outputs never collapse automatically.",
  unpin: "Remove a pin; the output may collapse again once it is old.",
};

export default function selfctx(pi: ExtensionAPI) {
  let server: SelfctxServer | undefined;
  let sessionId: string | undefined;
  let opening: Promise<void> | undefined;

  async function open(ctx: ExtensionContext): Promise<void> {
    const command = process.env.SELFCTX_COMMAND || "selfctx";
    // Without SELFCTX_STORE the server takes the store setting of its configuration (memory by default).
    const store = process.env.SELFCTX_STORE ? ["--store", process.env.SELFCTX_STORE] : [];
    const args = ["serve", "--stdio", ...store, "--workspace", ctx.cwd];
    server = new SelfctxServer(command, args, ctx.cwd);
    sessionId = `pi-${ctx.sessionManager.getSessionId()}`;
    const params: Record<string, unknown> = {
      session_id: sessionId,
      format: "openai",
      system_prompt: ctx.getSystemPrompt(),
      cwd: ctx.cwd,
    };
    if (process.env.SELFCTX_POLICY) params.policy = process.env.SELFCTX_POLICY;
    if (process.env.SELFCTX_POLICY_OPTIONS) params.policy_options = JSON.parse(process.env.SELFCTX_POLICY_OPTIONS);
    await server.call("session.open", params);
  }

  async function ready(ctx: ExtensionContext): Promise<SelfctxServer> {
    opening ??= open(ctx);
    await opening;
    return server!;
  }

  pi.on("session_start", async (_event, ctx) => {
    await ready(ctx);
  });

  pi.on("context", async (event, ctx) => {
    const rpc = await ready(ctx);
    const original = event.messages as PiMessage[];
    const systemPrompt = ctx.getSystemPrompt();
    const chat = toChat(original);
    await rpc.call("ingest", { session_id: sessionId, messages: chat, system: systemPrompt });
    const managed = await rpc.call<{ messages: any[] }>("assemble", { session_id: sessionId });
    // Never more than Pi would send itself (decision 0049): then Pi's own messages go unchanged.
    const own = [{ role: "system", content: systemPrompt }, ...chat];
    if (Buffer.byteLength(JSON.stringify(managed.messages)) > Buffer.byteLength(JSON.stringify(own))) {
      return {};
    }
    return { messages: fromChat(managed.messages, original, systemPrompt) as any };
  });

  for (const [name, description] of Object.entries(TOOLS)) {
    pi.registerTool({
      name,
      label: name,
      description,
      parameters: Type.Object({
        id: Type.String({ description: "The object's id or #handle, as shown in its line." }),
      }),
      async execute(_toolCallId, params, _signal, _onUpdate, ctx) {
        return relay(ctx, name, params);
      },
    });
  }

  async function relay(ctx: ExtensionContext, name: string, params: Record<string, unknown>) {
    const rpc = await ready(ctx);
    const answer = await rpc.call<{ ok: boolean; message: string }>("tools.call", {
      session_id: sessionId,
      name,
      arguments: params,
    });
    return { content: [{ type: "text" as const, text: answer.message }], details: { ok: answer.ok } };
  }

  pi.registerTool({
    name: "search",
    label: "search",
    description:
      "Search everything this session has seen (messages, tool outputs, every version of the files it knows), " +
      'best match first. Every word must occur (case-insensitive); quote a phrase to keep it whole. ' +
      "Each hit names the id that activate brings back.",
    parameters: Type.Object({
      query: Type.String({ description: 'Words or "a phrase" to look for.' }),
      role: Type.Optional(Type.Union([Type.Literal("user"), Type.Literal("assistant"), Type.Literal("tool")])),
      type: Type.Optional(Type.Union([Type.Literal("message"), Type.Literal("toolcall"), Type.Literal("file")])),
      limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 50 })),
    }),
    async execute(_toolCallId, params, _signal, _onUpdate, ctx) {
      return relay(ctx, "search", params as Record<string, unknown>);
    },
  });

  pi.on("session_shutdown", async () => {
    const rpc = server;
    server = undefined;
    opening = undefined;
    if (!rpc) return;
    try {
      await rpc.call("session.close", { session_id: sessionId });
    } finally {
      await rpc.close();
    }
  });
}
