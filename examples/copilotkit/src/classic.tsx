// The page with CopilotKit's classic chat (@copilotkit/react-ui).
import { CopilotKit } from "@copilotkit/react-core";
import { CopilotChat } from "@copilotkit/react-ui";
import "@copilotkit/react-ui/styles.css";
import { AdapterHooks, ErrorBanner, PLACEHOLDER, loadThread, mount } from "./shared";
import "./style.css";

const { threadId, properties } = await loadThread();

mount(
  <CopilotKit runtimeUrl="/api/copilotkit" threadId={threadId} properties={properties} showDevConsole={false}>
    <AdapterHooks />
    <ErrorBanner />
    <CopilotChat className="chat" labels={{ placeholder: PLACEHOLDER }} />
  </CopilotKit>,
);
