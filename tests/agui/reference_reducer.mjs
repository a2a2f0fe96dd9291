// The reference AG-UI reducer (@ag-ui/client 1.0.0) as an oracle for StateMirror.
// Usage: node reference_reducer.mjs CLIENT_DIR replay|bench
//   replay: stdin is a JSON array of {state, messages, events}; stdout is a JSON array of
//           {state, messages, error, warnings, patchWarnings}, one per stream, after the client's own pipeline
//           (enforceEvents, then defaultApplyEvents) consumed the stream.
//   bench:  stdin lines are JSON commands: {"load": {state, events}} keeps a stream,
//           {"round": n} replays it n times and answers {"seconds": [...]} (one per replay).
import { createRequire } from "node:module";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";

process.env.SUPPRESS_TRANSFORMATION_WARNINGS = "1";
const [clientDir, mode] = process.argv.slice(2);
const require = createRequire(join(resolve(clientDir), "package.json"));
const { defaultApplyEvents, enforceEvents } = require("@ag-ui/client");
const { from, lastValueFrom, toArray } = require("rxjs");

async function replay({ state, messages = [], events }, { enforce = true, recover = true } = {}) {
  const input = { threadId: "t", runId: "r", state, messages, tools: [], context: [] };
  const agent = { messages };
  let current = { state, messages };
  let error = null;
  let warnings = 0;
  let patchWarnings = 0;
  const warn = console.warn;
  console.warn = (message) => {
    warnings += 1;
    if (String(message).startsWith("Failed to apply state patch")) patchWarnings += 1;
  };
  try {
    const source = enforce ? from(events).pipe(enforceEvents()) : from(events);
    const mutations = await lastValueFrom(
      defaultApplyEvents(input, source, agent, []).pipe(toArray()),
    );
    for (const mutation of mutations) {
      if (mutation.state !== undefined) current.state = mutation.state;
      if (mutation.messages !== undefined) current.messages = mutation.messages;
    }
  } catch (exc) {
    error = String(exc).slice(0, 300);
    // What was applied before the failure: replay the events before the one that failed.
    if (recover) current = await appliedBefore({ state, messages, events });
  } finally {
    console.warn = warn;
  }
  if (error !== null && recover) ({ warnings, patchWarnings } = current);
  const { messages: finalMessages } = current;
  const finalState = circular(current.state) ? "<circular>" : (current.state ?? null);
  return { state: finalState, messages: finalMessages, error, warnings, patchWarnings };
}

function circular(value) {
  try {
    JSON.stringify(value);
    return false;
  } catch {
    return true;
  }
}

async function appliedBefore(stream) {
  // The longest prefix of the stream that the pipeline accepts, and its result.
  for (let end = stream.events.length - 1; end >= 0; end -= 1) {
    const prefix = { ...stream, events: stream.events.slice(0, end) };
    const result = await replay(prefix, { recover: false });
    if (result.error === null) return result;
  }
  return { state: stream.state, messages: stream.messages, warnings: 0, patchWarnings: 0 };
}

async function readAll() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

if (mode === "replay") {
  const results = [];
  for (const stream of await readAll()) results.push(await replay(stream));
  process.stdout.write(JSON.stringify(results));
} else if (mode === "bench") {
  let stream = null;
  for await (const line of createInterface({ input: process.stdin })) {
    const command = JSON.parse(line);
    if (command.load) {
      stream = command.load;
      await replay(stream, { enforce: false }); // warm-up
      process.stdout.write(JSON.stringify({ loaded: true }) + "\n");
    } else {
      const seconds = [];
      for (let i = 0; i < command.round; i += 1) {
        const start = process.hrtime.bigint();
        await replay(stream, { enforce: command.enforce ?? false });
        seconds.push(Number(process.hrtime.bigint() - start) / 1e9);
      }
      process.stdout.write(JSON.stringify({ seconds }) + "\n");
    }
  }
} else {
  process.stderr.write("usage: node reference_reducer.mjs CLIENT_DIR replay|bench\n");
  process.exit(2);
}
