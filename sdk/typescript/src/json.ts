/** A JSON value (what a payload, a checkpoint or an intent holds). */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
/** A payload: any JSON value but null (the service answers 422 to a null payload). */
export type Payload = Exclude<JsonValue, null>;
