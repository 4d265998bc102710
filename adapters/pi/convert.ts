/**
 * Pi's messages and OpenAI chat messages, both ways: the context manager ingests and assembles
 * OpenAI messages; Pi's `context` hook gives and takes Pi's own (AgentMessage).
 */

type Block = { type: string; [key: string]: any };
export type PiMessage = { role: string; [key: string]: any };
export type ChatMessage = { role: string; content: any; [key: string]: any };

function text(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return (content as Block[])
    .map((b) => (b.type === "text" ? b.text : b.type === "image" ? "[image]" : ""))
    .join("");
}

/** Pi's conversation as an OpenAI chat-completions message list. */
export function toChat(messages: PiMessage[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  for (const m of messages) {
    if (m.role === "user") {
      out.push({ role: "user", content: text(m.content) });
    } else if (m.role === "assistant") {
      const blocks = (m.content ?? []) as Block[];
      const calls = blocks
        .filter((b) => b.type === "toolCall")
        .map((b) => ({
          id: b.id,
          type: "function",
          function: { name: b.name, arguments: JSON.stringify(b.arguments ?? {}) },
        }));
      const said = blocks
        .filter((b) => b.type === "text")
        .map((b) => b.text)
        .join("");
      out.push(calls.length ? { role: "assistant", content: said, tool_calls: calls } : { role: "assistant", content: said });
    } else if (m.role === "toolResult") {
      out.push({ role: "tool", tool_call_id: m.toolCallId, content: text(m.content) });
    } else if (m.role === "bashExecution") {
      if (m.excludeFromContext) continue;
      out.push({ role: "user", content: `Ran \`${m.command}\`\n${m.output ?? ""}` });
    } else if (m.role === "custom") {
      out.push({ role: "user", content: text(m.content) });
    } else if (m.role === "branchSummary" || m.role === "compactionSummary") {
      out.push({ role: "user", content: m.summary ?? "" });
    }
  }
  return out;
}

/**
 * The managed messages as Pi's own. `systemPrompt` is Pi's system prompt, which Pi sends itself:
 * a system message holding it is left out; any other system message (the metadata section, the
 * layout's guide after the prompt) becomes a context message the model reads as a user message.
 * Assistant messages keep the provider fields of Pi's message with the same tool calls (or of
 * Pi's last assistant message).
 */
export function fromChat(managed: ChatMessage[], original: PiMessage[], systemPrompt: string): PiMessage[] {
  const now = Date.now();
  const assistants = original.filter((m) => m.role === "assistant");
  const byCall = new Map<string, PiMessage>();
  const toolNames = new Map<string, string>();
  for (const m of assistants) {
    for (const b of (m.content ?? []) as Block[]) {
      if (b.type === "toolCall") {
        byCall.set(b.id, m);
        toolNames.set(b.id, b.name);
      }
    }
  }
  const template = assistants[assistants.length - 1] ?? {};
  const out: PiMessage[] = [];
  for (const m of managed) {
    if (m.role === "system") {
      let said = typeof m.content === "string" ? m.content : text(m.content);
      if (systemPrompt && said.startsWith(systemPrompt)) said = said.slice(systemPrompt.length).trim();
      if (said) out.push({ role: "custom", customType: "selfctx", content: said, display: false, timestamp: now });
    } else if (m.role === "user") {
      out.push({ role: "user", content: [{ type: "text", text: text(m.content) }], timestamp: now });
    } else if (m.role === "assistant") {
      const calls = (m.tool_calls ?? []) as any[];
      const source = calls.length ? (byCall.get(calls[0].id) ?? template) : template;
      const content: Block[] = [];
      if (m.content) content.push({ type: "text", text: m.content });
      for (const c of calls) {
        let args: unknown = {};
        try {
          args = JSON.parse(c.function.arguments || "{}");
        } catch {
          args = { _raw: c.function.arguments };
        }
        content.push({ type: "toolCall", id: c.id, name: c.function.name, arguments: args });
      }
      out.push({
        role: "assistant",
        content,
        api: source.api,
        provider: source.provider,
        model: source.model,
        usage: source.usage,
        stopReason: calls.length ? "toolUse" : "stop",
        timestamp: source.timestamp ?? now,
      });
    } else if (m.role === "tool") {
      out.push({
        role: "toolResult",
        toolCallId: m.tool_call_id,
        toolName: toolNames.get(m.tool_call_id) ?? "tool",
        content: [{ type: "text", text: text(m.content) }],
        isError: false,
        timestamp: now,
      });
    }
  }
  return out;
}
