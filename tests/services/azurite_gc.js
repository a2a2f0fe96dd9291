// Preloaded into Azurite by azurite.sh (`node -r`): its blob GC's next sweep comes a day after
// the first. A sweep removes every extent written since the last one, one indexed delete at a
// time; ten minutes of this suite's traffic made a sweep that held the server's event loop
// for minutes, and every request in that window timed out. The test server keeps everything
// in memory and is stopped after the run, so there is nothing to reclaim.
const path = require("path");
const constants = path.join(path.dirname(process.argv[1]), "utils", "constants.js");
require(constants).DEFAULT_GC_INTERVAL_MS = 24 * 60 * 60 * 1000;
