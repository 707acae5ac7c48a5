// Stands in for @ag-ui/proto in the browser bundle. The example speaks
// text/event-stream only (HttpAgent asks for it with Accept), so the protobuf
// decoder (~100 KB minified) is left out; a server answering protobuf gets a
// clear error instead of a silently wrong decode.
export const AGUI_MEDIA_TYPE = "application/vnd.ag-ui.event+proto";

export class AGUIUnknownEventTypeError extends Error {}

export function decode() {
  throw new Error("this bundle of @ag-ui/client leaves the protobuf transport out; use text/event-stream");
}

export function encode() {
  throw new Error("this bundle of @ag-ui/client leaves the protobuf transport out; use text/event-stream");
}
