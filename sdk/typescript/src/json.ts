/** A JSON value (what a payload, a checkpoint or an intent holds). */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
