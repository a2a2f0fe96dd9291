// The demo page: a plan the agent advances and the user edits, over the real @ag-ui/client.
// Runs stream over POST /; the thread service restores a thread after a reload; a run a
// reload interrupted resumes from the last event id this tab saw (kept in sessionStorage).
import { HttpAgent } from "./ag-ui-client.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const user = params.get("user");
const threadId = params.get("thread") || crypto.randomUUID();
const headers = { "X-User": user ?? "" };
const runKey = `agui-demo-run:${user}:${threadId}`; // this tab's run under way, if any
const threadUrl = `/threads/${encodeURIComponent(threadId)}`;

let agent = null;
let eventIds = []; // the SSE ids of the current stream's events, in order
let applied = 0; // events of the current stream the client has taken
let streaming = "Streaming"; // or "Resumed": what the status line calls the current run

function show(status) { $("status").textContent = status; }

function fail(message) {
  $("error").textContent = message;
  $("error").hidden = false;
}

function pageUrl(thread) {
  return `?${new URLSearchParams({ user, thread })}`;
}

// Reads the `id:` lines of an SSE response as it passes to the client, unchanged.
function tapIds(response) {
  if (!response.ok || !response.body) return response;
  const decoder = new TextDecoder();
  let rest = "";
  const tap = new TransformStream({
    transform(chunk, controller) {
      rest += decoder.decode(chunk, { stream: true });
      const lines = rest.split(/\r\n|\r|\n/);
      rest = lines.pop();
      for (const line of lines) {
        if (line.startsWith("id:")) eventIds.push(Number(line.slice(3).trim()));
      }
      controller.enqueue(chunk);
    },
  });
  return new Response(response.body.pipeThrough(tap), response);
}

// `body` with one SSE frame in front (a resumed stream starts mid-run; the client wants
// RUN_STARTED first).
function withFrame(frame, body) {
  const reader = body.getReader();
  return new ReadableStream({
    start(controller) { controller.enqueue(new TextEncoder().encode(frame)); },
    async pull(controller) {
      const { done, value } = await reader.read();
      if (done) controller.close(); else controller.enqueue(value);
    },
    cancel(reason) { return reader.cancel(reason); },
  });
}

const subscriber = {
  // Called before each event applies, with the state and messages after the one before:
  // that is the checkpoint a reload resumes from.
  onEvent({ state, messages }) {
    applied += 1;
    const saved = JSON.parse(sessionStorage.getItem(runKey) || "null");
    if (saved && applied >= 2) {
      saved.lastEventId = eventIds[applied - 2];
      saved.state = state;
      saved.messages = messages;
      sessionStorage.setItem(runKey, JSON.stringify(saved));
      show(`${streaming} run ${saved.runId.slice(0, 8)}… (event ${saved.lastEventId + 1})`);
    }
  },
  onStateChanged() { renderSteps(); },
  onMessagesChanged() { renderMessages(); },
  onRunFinishedEvent() { sessionStorage.removeItem(runKey); },
  onRunErrorEvent({ event }) {
    sessionStorage.removeItem(runKey);
    fail(`The run failed: ${event.message}`);
  },
};

async function follow(start) {
  applied = 0;
  for (const form of document.forms) form.querySelector("button").disabled = true;
  try {
    await start();
    show("Idle: the plan is saved on the server.");
  } catch (error) {
    fail(`The run did not complete: ${error.message}`);
    show("Idle.");
  } finally {
    for (const form of document.forms) form.querySelector("button").disabled = false;
    renderSteps();
    renderMessages();
    listThreads();
  }
}

async function send(text) {
  const runId = crypto.randomUUID();
  agent.addMessage({ id: crypto.randomUUID(), role: "user", content: text });
  renderMessages();
  sessionStorage.setItem(runKey, JSON.stringify({ runId }));
  eventIds = [];
  streaming = "Streaming";
  agent.fetch = async (url, init) => tapIds(await fetch(url, init));
  show("Sending…");
  await follow(() => agent.runAgent({ runId }));
}

// Resumes this tab's run: the events after the last one it applied, then the live tail.
async function resume(saved) {
  const after = saved.lastEventId ?? 0;
  if (after > 0) {
    agent.setState(saved.state);
    agent.setMessages(saved.messages);
  }
  eventIds = after > 0 ? [after] : [];
  streaming = "Resumed";
  const url = `${threadUrl}/runs/${encodeURIComponent(saved.runId)}/events`;
  agent.fetch = async () => {
    const response = await fetch(url, {
      headers: { ...headers, "Last-Event-ID": String(after), Accept: "text/event-stream" },
    });
    if (!response.ok || after === 0) return tapIds(response);
    const started = { type: "RUN_STARTED", threadId, runId: saved.runId };
    return tapIds(new Response(withFrame(`data: ${JSON.stringify(started)}\n\n`, response.body), response));
  };
  show(`Resuming run ${saved.runId.slice(0, 8)}… after event ${after}`);
  await follow(() => agent.runAgent({ runId: saved.runId }));
  if (sessionStorage.getItem(runKey)) { // gone from the server's log: the stored thread
    sessionStorage.removeItem(runKey);
    await restore();
  }
}

// The thread as the server stored it; false when this user may not open it.
async function restore() {
  const response = await fetch(threadUrl, { headers });
  if (response.status === 404) return true; // a new thread: the first run creates it
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    fail(`Cannot open this thread (${response.status}): ${body.detail ?? response.statusText}`);
    return false;
  }
  const thread = await response.json();
  agent.setState(thread.state ?? {});
  agent.setMessages(thread.messages ?? []);
  $("title").textContent = thread.title || "Untitled thread";
  renderSteps();
  renderMessages();
  return true;
}

async function listThreads() {
  const response = await fetch("/threads?limit=20", { headers });
  if (!response.ok) return;
  const { threads } = await response.json();
  const list = $("threads");
  list.replaceChildren();
  for (const thread of threads) {
    const item = document.createElement("li");
    item.className = thread.threadId === threadId ? "current" : "";
    if (thread.threadId === threadId) $("title").textContent = thread.title || "Untitled thread";
    const link = document.createElement("a");
    link.href = pageUrl(thread.threadId);
    link.textContent = thread.title || "Untitled thread";
    const when = document.createElement("small");
    when.textContent = thread.updatedAt ? new Date(thread.updatedAt).toLocaleString() : "";
    item.append(link, when);
    list.append(item);
  }
}

function editSteps(change) {
  const steps = structuredClone(agent.state.steps ?? []);
  change(steps);
  agent.setState({ ...agent.state, steps });
  renderSteps();
}

function renderSteps() {
  const list = $("steps");
  list.replaceChildren();
  (agent.state.steps ?? []).forEach((step, index) => {
    const item = document.createElement("li");
    item.className = `status-${step.status}`;
    const title = document.createElement("input");
    title.className = "title";
    title.value = step.title;
    title.addEventListener("change", () => editSteps((steps) => { steps[index].title = title.value; }));
    const status = document.createElement("select");
    status.className = "status";
    for (const value of ["todo", "doing", "done"]) status.add(new Option(value, value, false, value === step.status));
    status.addEventListener("change", () => editSteps((steps) => { steps[index].status = status.value; }));
    item.append(title, " ", status);
    list.append(item);
  });
}

function renderMessages() {
  const list = $("messages");
  list.replaceChildren();
  for (const message of agent.messages) {
    if (message.role !== "user" && message.role !== "assistant") continue;
    const item = document.createElement("li");
    item.className = message.role;
    const who = document.createElement("b");
    who.textContent = message.role === "user" ? user : "agent";
    item.append(who, String(message.content ?? ""));
    list.append(item);
  }
}

async function main() {
  if (!user) {
    $("login").hidden = false;
    $("login").addEventListener("submit", (event) => {
      event.preventDefault();
      location.search = `?${new URLSearchParams({ user: event.target.user.value })}`;
    });
    return;
  }
  if (!params.get("thread")) history.replaceState(null, "", pageUrl(threadId));
  $("app").hidden = false;
  $("who").textContent = `signed in as ${user}`;
  agent = new HttpAgent({ url: "/", headers, threadId });
  agent.subscribe(subscriber);
  $("new-thread").addEventListener("click", () => { location.search = pageUrl(crypto.randomUUID()); });
  $("add-step").addEventListener("submit", (event) => {
    event.preventDefault();
    const title = event.target.title.value.trim();
    if (title) editSteps((steps) => steps.push({ title, status: "todo" }));
    event.target.reset();
  });
  $("ask").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = event.target.text.value.trim();
    event.target.reset();
    if (text) send(text);
  });
  listThreads();
  if (!(await restore())) {
    for (const form of document.forms) form.querySelector("button").disabled = true;
    show("");
    return;
  }
  const saved = JSON.parse(sessionStorage.getItem(runKey) || "null");
  if (saved) await resume(saved);
  else show("Idle.");
}

main();
