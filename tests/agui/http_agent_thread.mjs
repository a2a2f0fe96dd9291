// Three runs of one thread through the real HttpAgent (@ag-ui/client 1.0.0) against a server.
// Usage: node http_agent_thread.mjs CLIENT_DIR URL USER THREAD_ID
// Between runs the client edits the plan (renames a step, then adds one) with setState and
// adds a user message. stdout: JSON {state, messages, runs: [{state, events}], errors}, the
// agent's final state and messages, and per run the state after it and every event it saw.
import { createRequire } from "node:module";
import { join, resolve } from "node:path";

const [clientDir, url, user, threadId] = process.argv.slice(2);
const require = createRequire(join(resolve(clientDir), "package.json"));
const { HttpAgent } = require("@ag-ui/client");

const agent = new HttpAgent({ url, headers: { "X-User": user }, threadId, initialState: {} });
const runs = [];
const errors = [];

async function run(number, text) {
  agent.addMessage({ id: `user-${number}`, role: "user", content: text });
  const events = [];
  await agent.runAgent(
    { runId: `run-${number}` },
    {
      onEvent: ({ event }) => {
        events.push(event);
      },
      onRunFailed: ({ error }) => {
        errors.push(String(error));
      },
    },
  );
  runs.push({ state: structuredClone(agent.state), events });
}

await run(1, "write the notes, tag the release, announce it");
const renamed = agent.state.steps.map((step, index) =>
  index === 1 ? { ...step, title: "tag v1.0" } : step,
);
agent.setState({ ...agent.state, steps: renamed });
await run(2, "next");
agent.setState({ ...agent.state, steps: [...agent.state.steps, { title: "celebrate", status: "todo" }] });
await run(3, "next");

process.stdout.write(
  JSON.stringify({ state: agent.state, messages: agent.messages, runs, errors }),
);
