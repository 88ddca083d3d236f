export type { paths, components, operations } from "./openapi.js";
export type { JsonValue } from "./json.js";
export * from "./errors.js";
export type { CallBounds } from "./transport.js";
export * from "./client.js";
