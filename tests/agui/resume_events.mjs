// Reconnect to a run's events through the real @ag-ui/client 1.0.0 HTTP pipeline
// (runHttpRequest, then transformHttpEventStream: the client's own SSE parsing).
// Usage: node resume_events.mjs CLIENT_DIR URL USER LAST_EVENT_ID
// stdout: JSON {events, error}: every event the client decoded, in order.
import { createRequire } from "node:module";
import { join, resolve } from "node:path";

const [clientDir, url, user, lastEventId] = process.argv.slice(2);
const require = createRequire(join(resolve(clientDir), "package.json"));
const { runHttpRequest, transformHttpEventStream } = require("@ag-ui/client");

const headers = { "X-User": user, "Last-Event-ID": lastEventId, Accept: "text/event-stream" };
const events = [];
let error = null;
await new Promise((done) => {
  transformHttpEventStream(runHttpRequest(() => fetch(url, { headers }))).subscribe({
    next: (event) => events.push(event),
    error: (failure) => {
      error = String(failure);
      done();
    },
    complete: done,
  });
});
process.stdout.write(JSON.stringify({ events, error }));
