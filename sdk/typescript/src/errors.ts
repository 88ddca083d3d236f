/**
 * Typed errors for every non-2xx answer, whoever wrote it: the service (its
 * `{"error": {"code", "message", "details"}}` body, by `error.code`) or API Gateway itself
 * (`{"message": "..."}` from its JWT authorizer, its throttling or a failed integration; or a
 * body that is not JSON), by its status. The same reading as the Python SDK's
 * (`leasefence.answer_errors`): 429 and every 5xx from the gateway are `Unavailable`
 * (retryable), and such errors say `answeredBy === "gateway"`.
 *
 * Codes are an open set: a code this SDK does not know becomes a plain `LeaseFenceError`
 * carrying that code.
 */
import type { components } from "./openapi.js";

/** One field's problem in a 422 answer. */
export type FieldProblem = components["schemas"]["FieldProblem"];

export class LeaseFenceError extends Error {
  /** The service's error code (`stale_fence`, ...), or the one a gateway answer maps to. */
  code: string;
  /** The HTTP status (0: no answer at all). */
  status: number;
  /** Who wrote the answer: the service, or API Gateway in front of it. */
  answeredBy: "service" | "gateway";
  /** Per-field problems (422 only). */
  details: FieldProblem[] | undefined;

  constructor(
    message: string,
    options: {
      code?: string;
      status?: number;
      answeredBy?: "service" | "gateway";
      details?: FieldProblem[];
      cause?: unknown;
    } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code ?? "internal_error";
    this.status = options.status ?? 0;
    this.answeredBy = options.answeredBy ?? "service";
    this.details = options.details;
  }

  /** Whether the same request may succeed later (429, 503, no answer). */
  get retryable(): boolean {
    return false;
  }
}

export class Unauthorized extends LeaseFenceError {}
export class Forbidden extends LeaseFenceError {}
export class InvalidInput extends LeaseFenceError {}
export class PayloadTooLarge extends InvalidInput {}
export class InlinePayloadRequired extends InvalidInput {}
export class UnknownJobType extends InvalidInput {}
export class TooManyJobTypes extends InvalidInput {}
export class NotFound extends LeaseFenceError {}
export class PayloadMissing extends LeaseFenceError {}
export class PayloadConflict extends LeaseFenceError {}
export class PayloadMismatch extends LeaseFenceError {}
/** A newer claim holds the operation: stop working on it, make no further write. */
export class StaleFence extends LeaseFenceError {}
export class InvalidTransition extends LeaseFenceError {}
export class AlreadyAttempted extends InvalidTransition {}
export class TenantErasing extends LeaseFenceError {}
export class VersionConflict extends LeaseFenceError {}
export class MethodNotAllowed extends LeaseFenceError {}
/** Busy, throttled or unreachable: safe to try again (a claim with the same claim token). */
export class Unavailable extends LeaseFenceError {
  override get retryable(): boolean {
    return true;
  }
}

/** Error code -> class. */
export const ERRORS: Readonly<Record<string, new (message: string, options?: ConstructorParameters<typeof LeaseFenceError>[1]) => LeaseFenceError>> = {
  invalid_request: InvalidInput,
  inline_payload_required: InlinePayloadRequired,
  payload_too_large: PayloadTooLarge,
  not_found: NotFound,
  payload_missing: PayloadMissing,
  payload_conflict: PayloadConflict,
  payload_mismatch: PayloadMismatch,
  stale_fence: StaleFence,
  invalid_transition: InvalidTransition,
  unknown_job_type: UnknownJobType,
  already_attempted: AlreadyAttempted,
  tenant_erasing: TenantErasing,
  too_many_job_types: TooManyJobTypes,
  version_conflict: VersionConflict,
  method_not_allowed: MethodNotAllowed,
  unavailable: Unavailable,
  unauthorized: Unauthorized,
  forbidden: Forbidden,
};

/**
 * An answer that is not the service's own (no `error` object) -> the code of the service's
 * answer that means the same to a caller. Any other 5xx is `unavailable`, any other 4xx
 * `invalid_request`.
 */
export const GATEWAY_CODES: Readonly<Record<number, string>> = {
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  413: "payload_too_large",
  429: "unavailable",
};

function challengeDescription(challenge: string | null | undefined): string | undefined {
  return challenge?.match(/error_description="([^"]*)"/)?.[1];
}

function parsed(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return undefined;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * The typed error of a non-2xx answer: by its `error.code` when the service wrote it, else by
 * its status (`GATEWAY_CODES`), with `answeredBy: "gateway"`. `body` is the answer's text, or
 * its JSON already decoded.
 */
export function answerError(
  status: number,
  body: string | unknown,
  headers?: Headers | Record<string, string>,
): LeaseFenceError {
  const decoded = typeof body === "string" ? parsed(body) : body;
  const error = isObject(decoded) ? decoded["error"] : undefined;
  if (isObject(error) && typeof error["code"] === "string") {
    const code = error["code"];
    const message = typeof error["message"] === "string" && error["message"] ? error["message"] : code;
    const details = Array.isArray(error["details"]) ? (error["details"] as FieldProblem[]) : undefined;
    const Class = ERRORS[code] ?? LeaseFenceError;
    return new Class(message, { code, status, answeredBy: "service", ...(details ? { details } : {}) });
  }
  const code = GATEWAY_CODES[status] ?? (status >= 500 ? "unavailable" : "invalid_request");
  const said = isObject(decoded) && decoded["message"] ? String(decoded["message"]) : undefined;
  const text = said ?? (typeof body === "string" ? body.trim().slice(0, 200) : "");
  const challenge =
    headers instanceof Headers
      ? headers.get("www-authenticate")
      : Object.entries(headers ?? {}).find(([name]) => name.toLowerCase() === "www-authenticate")?.[1];
  const why = challengeDescription(challenge);
  const message = `HTTP ${status} from the gateway: ${text || "no body"}` + (why ? ` (${why})` : "");
  const Class = ERRORS[code] ?? LeaseFenceError;
  return new Class(message, { code, status, answeredBy: "gateway" });
}
