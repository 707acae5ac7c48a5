// What both pages share: the iacCode properties, the approval card, the tool card and the error banner.
import { useEffect, useState, useSyncExternalStore, type ReactElement } from "react";
import { createRoot } from "react-dom/client";
import { useAgent, useCopilotKit, useDefaultRenderTool, useInterrupt } from "@copilotkit/react-core/v2";

const INVOCATION_KEY = "aguiadapter-copilotkit-invocation:";

/**
 * The page's thread and what every run sends with it.
 *
 * A thread that was used is in the page's address (?thread=..., written when
 * its first run starts, see useThreadInAddress), so a reload finds it again:
 * CopilotChat, given it as its threadId, connects when it mounts, and the
 * runtime's runner (adapter-runner.mjs) asks the adapter for the conversation
 * and the pending approval. A first visit has none: CopilotKit makes the
 * thread, and there is nothing to connect to.
 *
 * CopilotKit sends `properties` as forwardedProps on every run, so the
 * adapter's iacCode extension goes there. One rosInvocationId per thread, kept
 * beside it in localStorage: the resume of an interrupted turn must carry the
 * same value as that turn, also after a reload, and a later turn may keep it.
 * preferredLanguage: the adapter's errors (and the runtime's replies) in the
 * browser's language; CopilotKit's runtime does not pass the browser's
 * Accept-Language on.
 */
export async function loadThread(): Promise<{ threadId: string | undefined; properties: Record<string, unknown> }> {
  const config: { cwd: string } = await (await fetch("/config.json")).json();
  const threadId = new URL(location.href).searchParams.get("thread") ?? undefined;
  const saved = threadId === undefined ? null : localStorage.getItem(INVOCATION_KEY + threadId);
  rosInvocationId = saved ?? `copilotkit-${crypto.randomUUID()}`;
  return {
    threadId,
    properties: {
      iacCode: { schemaVersion: 1, rosInvocationId, cwd: config.cwd, preferredLanguage: navigator.language },
    },
  };
}

let rosInvocationId = "";

/** Once a run starts on the page's thread: the thread in the address, its rosInvocationId beside it. */
function useThreadInAddress(): void {
  const { agent } = useAgent();
  useEffect(() => {
    const subscription = agent.subscribe({
      onRunInitialized: () => {
        localStorage.setItem(INVOCATION_KEY + agent.threadId, rosInvocationId);
        const url = new URL(location.href);
        if (url.searchParams.get("thread") === agent.threadId) return;
        url.searchParams.set("thread", agent.threadId);
        history.replaceState(null, "", url);
      },
    });
    return () => subscription.unsubscribe();
  }, [agent]);
}

export const PLACEHOLDER = "Try: hello, tool, think, permission notes.txt, question";

type Interrupt = {
  id: string;
  message?: string;
  responseSchema?: { properties?: Record<string, unknown> };
  metadata?: { target?: string; options?: { id: string; label: string }[] };
};

type InterruptProps = {
  interrupt: Interrupt | null;
  resolve: (payload: unknown, interruptId?: string) => Promise<unknown>;
  cancel: (interruptId?: string) => Promise<unknown>;
};

/** A permission asks for {"decision": "allow_once" | "deny"}; a question for {"selectedId": ...}. */
function ApprovalCard({ interrupt, resolve, cancel }: InterruptProps): ReactElement | null {
  if (!interrupt) return null;
  const asksDecision = Boolean(interrupt.responseSchema?.properties?.decision);
  const options = interrupt.metadata?.options ?? [];
  const answer = (payload: unknown) => () => void resolve(payload, interrupt.id);
  return (
    <div className="approval" data-testid="approval">
      <p className="approval-message">{interrupt.message ?? "The agent needs an answer."}</p>
      {interrupt.metadata?.target ? <p className="approval-target">{interrupt.metadata.target}</p> : null}
      <div className="approval-actions">
        {asksDecision ? (
          <>
            <button type="button" onClick={answer({ decision: "allow_once" })}>Approve</button>
            <button type="button" onClick={answer({ decision: "deny" })}>Deny</button>
          </>
        ) : (
          <>
            {options.map((option) => (
              <button key={option.id} type="button" onClick={answer({ selectedId: option.id })}>
                {option.label}
              </button>
            ))}
            <button type="button" onClick={() => void cancel(interrupt.id)}>Cancel</button>
          </>
        )}
      </div>
    </div>
  );
}

/**
 * The results the adapter streamed (TOOL_CALL_RESULT), by toolCallId.
 *
 * After an approval CopilotKit records the answer ({"decision":"allow_once"})
 * as the tool's result before it resumes, and keeps only the first result of
 * a call in its messages, so a renderer is handed the answer. The tool's own
 * result comes in the resumed run; the card shows that one when there is one.
 */
const streamed = new Map<string, string>();
const listeners = new Set<() => void>();

function onStreamedResult(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

function useStreamedResults(): void {
  const { agent } = useAgent();
  useEffect(() => {
    const subscription = agent.subscribe({
      onToolCallResultEvent: ({ event }) => {
        streamed.set(event.toolCallId, event.content);
        for (const listener of listeners) listener();
      },
    });
    return () => subscription.unsubscribe();
  }, [agent]);
}

type ToolProps = { name: string; toolCallId: string; parameters: unknown; result: string | undefined };

/** A tool call and its result. */
function ToolCard({ name, toolCallId, parameters, result }: ToolProps): ReactElement {
  const own = useSyncExternalStore(onStreamedResult, () => streamed.get(toolCallId));
  const shown = own ?? result;
  return (
    <div className="tool" data-testid="tool-call">
      <code className="tool-call">{`${name}(${JSON.stringify(parameters ?? {})})`}</code>
      {shown !== undefined ? <pre className="tool-result" data-testid="tool-result">{shown}</pre> : null}
    </div>
  );
}

/**
 * The adapter's message when a run fails (RUN_ERROR, or an HTTP error such as
 * 409 RUN_ID_CONFLICT that CopilotKit's runtime turns into one), shown above
 * the chat: CopilotKit itself only logs it to the console.
 */
function readableError(error: Error): string {
  const body = /\{"error":\{.*\}\}/s.exec(error.message);
  if (body !== null) {
    try {
      const { code, message } = JSON.parse(body[0]).error;
      return `${message} (${code})`;
    } catch {
      // not the adapter's JSON body: show the error as it is
    }
  }
  return error.message;
}

export function ErrorBanner(): ReactElement | null {
  const { copilotkit } = useCopilotKit();
  const { agent } = useAgent();
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    const core = copilotkit.subscribe({ onError: (event) => setError(readableError(event.error)) });
    const run = agent.subscribe({ onRunStartedEvent: () => setError(null) });
    return () => {
      core.unsubscribe();
      run.unsubscribe();
    };
  }, [copilotkit, agent]);
  if (error === null) return null;
  return (
    <div className="error" role="alert" data-testid="error">
      {error}
      <button type="button" aria-label="Dismiss" onClick={() => setError(null)}>×</button>
    </div>
  );
}

/** What the person is told for each reason of iac-code.input.skipped.v1 (docs/ui-guide.md). */
const SKIP_REASONS: Record<string, string> = {
  image_url: "send the image itself, not a link",
  provider_file: "the agent cannot read this file handle",
  unsupported_image_type: "use PNG, JPEG, GIF or WebP",
  unsupported_part: "audio, video and documents are not read",
  unsupported_source: "the agent cannot read this kind of source",
};

type SkippedPart = { index: number; type: string; reason: string; mimeType?: string };

/**
 * The attachments the adapter left out of the last message, and why.
 *
 * AG-UI 1.0: a part the runtime cannot use (an image by URL, an SVG, a
 * document) does not fail the message; the adapter sends the rest and says
 * what it left out in a CUSTOM event iac-code.input.skipped.v1 before the
 * reply. The person should know the agent did not see it.
 */
export function SkippedNotice(): ReactElement | null {
  const { agent } = useAgent();
  const [parts, setParts] = useState<SkippedPart[]>([]);
  useEffect(() => {
    const subscription = agent.subscribe({
      onRunStartedEvent: () => setParts([]),
      onCustomEvent: ({ event }) => {
        if (event.name === "iac-code.input.skipped.v1") setParts((event.value as { parts: SkippedPart[] }).parts);
      },
    });
    return () => subscription.unsubscribe();
  }, [agent]);
  if (parts.length === 0) return null;
  return (
    <div className="skipped" role="status" data-testid="skipped">
      {parts.map((part) => (
        <p key={part.index}>
          {`The agent did not get your ${part.mimeType ?? part.type} attachment: ${SKIP_REASONS[part.reason] ?? part.reason}.`}
        </p>
      ))}
    </div>
  );
}

/** The hooks both chats use: the thread in the address, the approval card in the chat, the tool card for every tool. */
export function AdapterHooks(): null {
  useThreadInAddress();
  useStreamedResults();
  useInterrupt({ render: (props) => <ApprovalCard {...(props as unknown as InterruptProps)} /> });
  useDefaultRenderTool({ render: (props) => <ToolCard {...props} /> });
  return null;
}

export function mount(app: ReactElement): void {
  const root = document.getElementById("root");
  if (root === null) throw new Error("the page has no #root");
  createRoot(root).render(app);
}
