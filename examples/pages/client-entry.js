// What the demo page takes from @ag-ui/client; build.sh bundles it for the browser.
export { HttpAgent } from "@ag-ui/client";
