// The page with CopilotKit's v2 chat (@copilotkit/react-core/v2).
import { CopilotChat, CopilotKit } from "@copilotkit/react-core/v2";
import "@copilotkit/react-core/v2/styles.css";
import { AdapterHooks, ErrorBanner, PLACEHOLDER, SkippedNotice, loadThread, mount } from "./shared";
import "./style.css";

const { threadId, properties } = await loadThread();

mount(
  <CopilotKit runtimeUrl="/api/copilotkit" properties={properties} showDevConsole={false}>
    <AdapterHooks />
    <ErrorBanner />
    <SkippedNotice />
    {/* Images go inline (CopilotKit reads the file); the adapter takes PNG, JPEG, GIF and WebP. */}
    <CopilotChat
      className="chat"
      threadId={threadId}
      labels={{ chatInputPlaceholder: PLACEHOLDER }}
      attachments={{ enabled: true, accept: "image/*" }}
    />
  </CopilotKit>,
);
