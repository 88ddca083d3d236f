/**
 * Class B: fenced writes to a DynamoDB table with the AWS SDK v3, with the same item layout and
 * guard as the Python SDK's `FencedTable` (`leasefence.targets.fenced_table`, whose docstring
 * has the whole argument), so Python and TypeScript writers of one table agree:
 *
 * - `lf_fence_<40 hex digits of the operation's identity digest>`: per operation that wrote the
 *   item, a number `F.T`: `F` the highest fence of that operation that wrote it, `T` (13 digits)
 *   that holder's claim time in ms, as the engine states it (`claimed_at`).
 * - `lf_horizon`: the latest claim time of any entry pruned from the item (only rises).
 *
 * Every write is one conditional `UpdateItem` (never read-compare-write) under
 * `entry < F + 1 OR (no entry AND (no horizon OR horizon < claim time))`, plus the caller's own
 * guard. A refusal that shows a higher fence (or a horizon that covers this claim) puts the job in
 * lost-ownership mode (its signal aborts) and throws `LostOwnership`. A new holder calls
 * `raiseFence` right after its claim (`onClaim`), so a stale holder is refused even before the
 * new holder's first write. After a write, an item holding `maxEntries` (N) entries, or N/4 older
 * than `pruneAgeMs`, has its oldest entries removed in one more conditional write that raises the
 * horizon to cover them.
 */
import {
  ConditionalCheckFailedException,
  DynamoDBClient,
  GetItemCommand,
  UpdateItemCommand,
  type AttributeValue,
  type DynamoDBClientConfig,
} from "@aws-sdk/client-dynamodb";
import { convertToAttr, marshall, unmarshall, type NativeAttributeValue } from "@aws-sdk/util-dynamodb";

import { LeaseFenceError } from "./errors.js";
import { identityDigest } from "./identity.js";
import { LostOwnership } from "./outcomes.js";

export const ENTRY_PREFIX = "lf_fence_";
export const HORIZON = "lf_horizon";
const TIME_DIGITS = 13;
/** Entries removed by one prune at most. */
export const MAX_PRUNE_BATCH = 100;
export const DEFAULT_MAX_ENTRIES = 64;
export const DEFAULT_PRUNE_AGE_MS = 24 * 3600 * 1000;
const REFUSED = "class B target write refused:";

/** The claim's stated claim time disagrees with its lease, or lies too far ahead: nothing is written. */
export class InconsistentClaim extends LostOwnership {
  override name = "InconsistentClaim";
}

/** The item no longer keeps this operation's entry and its horizon is not older than this claim. */
export class HorizonRefused extends LostOwnership {
  override name = "HorizonRefused";
}

/** The caller's own guard (not the fence) refused the write. */
export class TargetRefused extends LeaseFenceError {
  constructor(message: string) {
    super(message, { code: "target_refused" });
  }
}

/** What a fenced write needs of a job (the worker's `Job` has it). */
export interface FencedJob {
  readonly tenantId: string;
  readonly operationId: string;
  readonly fence: number;
  readonly claim: { claimed_at?: string | null; lease_ms: number; lease_expires_at: string };
  guard(): void;
  lose(reason: string): void;
}

export interface FenceState {
  /** Per entry name: the fence and the claim time (null: an entry of an earlier version). */
  entries: Map<string, { fence: number; time: number | null }>;
  horizon: number | null;
}

export type Key = Record<string, NativeAttributeValue>;

export interface FencedTableOptions {
  tableName: string;
  /** Your client; else one made from `clientConfig`. */
  client?: DynamoDBClient;
  clientConfig?: DynamoDBClientConfig;
  maxEntries?: number;
  pruneAgeMs?: number;
  /** Refuse claims stated more than this ahead of `clock` (default off). */
  maxClaimSkewMs?: number;
  /** Now, in ms (which entries are older than the prune age). */
  clock?: () => number;
  /** Counters, named as the Python SDK's metrics (`StaleTargetWritesRejected`, ...). */
  events?: (name: string, value: number) => void;
}

export function fenceAttribute(tenantId: string, operationId: string): string {
  return ENTRY_PREFIX + identityDigest(tenantId, operationId).slice(0, 40);
}

/** The claim time (ms) as the engine states it; for a claim that states none, `lease_expires_at - lease_ms`. */
export function claimedAtMs(claim: FencedJob["claim"], fence: number): number {
  const derived = Date.parse(claim.lease_expires_at) - claim.lease_ms;
  if (claim.claimed_at === undefined || claim.claimed_at === null) return derived;
  const stated = Date.parse(claim.claimed_at);
  if (stated !== derived) {
    throw new InconsistentClaim(
      `claim of fence ${fence} is inconsistent: claimed at ${stated} with a lease of ${claim.lease_ms} ms, ` +
        `but its lease expires at ${Date.parse(claim.lease_expires_at)} (a lease other than the one granted?)`,
    );
  }
  return stated;
}

/** `fence + claimTime * 10**-13`, exactly, as a DynamoDB number. */
export function entryValue(fence: number, claimTime: number): string {
  if (!(claimTime > 0 && claimTime < 10 ** TIME_DIGITS)) throw new RangeError(`claim time ${claimTime} is not a 13-digit ms time`);
  if (!Number.isSafeInteger(fence) || fence < 0) throw new RangeError("fences are non-negative integers");
  return `${fence}.${String(claimTime).padStart(TIME_DIGITS, "0")}`;
}

/** A DynamoDB number's integer and fraction digits (exponent notation too). */
function digits(number: string): [string, string] {
  const [mantissa = "0", exponent = "0"] = number.trim().toLowerCase().split("e");
  const negative = mantissa.startsWith("-");
  const [whole = "", fraction = ""] = mantissa.replace(/^[-+]/, "").split(".");
  const shift = Number(exponent);
  const all = whole + fraction;
  let point = whole.length + shift;
  const padded = point < 0 ? "0".repeat(-point) + all : point > all.length ? all + "0".repeat(point - all.length) : all;
  point = Math.max(point, 0);
  return [(negative ? "-" : "") + (padded.slice(0, point) || "0"), padded.slice(point)];
}

/** `(fence, claim time)` of an entry; the time is null for an entry from an earlier version. */
export function parseEntry(number: string): { fence: number; time: number | null } {
  const [whole, fraction] = digits(number);
  const time = Number(fraction.padEnd(TIME_DIGITS, "0").slice(0, TIME_DIGITS));
  return { fence: Number(whole), time: time || null };
}

/** The fence bookkeeping of a wire-format item. Anything under the prefix that is not a number is left alone. */
export function stateOf(item: Record<string, AttributeValue> | undefined): FenceState {
  const entries = new Map<string, { fence: number; time: number | null }>();
  for (const [name, value] of Object.entries(item ?? {})) {
    if (name.startsWith(ENTRY_PREFIX) && value.N !== undefined) entries.set(name, parseEntry(value.N));
  }
  const horizon = item?.[HORIZON]?.N;
  return { entries, horizon: horizon === undefined ? null : Number(digits(horizon)[0]) };
}

class Refused extends Error {
  constructor(readonly item: Record<string, AttributeValue> | undefined) {
    super("condition failed");
  }
}

export interface WriteOptions {
  /** A guard of your own, ANDed with the fence's (e.g. `#s = :paid`). */
  condition?: string;
  names?: Record<string, string>;
  conditionValues?: Record<string, NativeAttributeValue>;
  /** Lists to append to (created when absent). */
  append?: Record<string, NativeAttributeValue[]>;
}

export class FencedTable {
  readonly client: DynamoDBClient;
  readonly tableName: string;
  private readonly maxEntries: number;
  private readonly pruneAgeMs: number;
  private readonly maxClaimSkewMs: number | undefined;
  private readonly clock: () => number;
  private readonly events: (name: string, value: number) => void;

  constructor(options: FencedTableOptions) {
    if (options.maxClaimSkewMs !== undefined && options.maxClaimSkewMs < 0) throw new RangeError("maxClaimSkewMs must not be negative");
    if ((options.maxEntries ?? DEFAULT_MAX_ENTRIES) < 2) throw new RangeError("maxEntries must be at least 2");
    if ((options.pruneAgeMs ?? DEFAULT_PRUNE_AGE_MS) <= 0) throw new RangeError("pruneAgeMs must be positive");
    this.client = options.client ?? new DynamoDBClient(options.clientConfig ?? {});
    this.tableName = options.tableName;
    this.maxEntries = options.maxEntries ?? DEFAULT_MAX_ENTRIES;
    this.pruneAgeMs = options.pruneAgeMs ?? DEFAULT_PRUNE_AGE_MS;
    this.maxClaimSkewMs = options.maxClaimSkewMs;
    this.clock = options.clock ?? Date.now;
    this.events = options.events ?? (() => {});
  }

  /** Make the target refuse every lower fence of this operation from now on (call it in `onClaim`). */
  async raiseFence(job: FencedJob, key: Key): Promise<void> {
    const attr = fenceAttribute(job.tenantId, job.operationId);
    const item = await this.update(job, key, "SET #lf = :e", { "#lf": attr }, { ":e": { N: this.entry(job) } });
    await this.maybePrune(key, item, attr);
  }

  /** Set `values` (and append to the lists in `append`) on the item under this job's fence, plus your own guard. */
  async write(job: FencedJob, key: Key, values: Record<string, NativeAttributeValue>, options: WriteOptions = {}): Promise<void> {
    job.guard();
    const attr = fenceAttribute(job.tenantId, job.operationId);
    const names: Record<string, string> = { "#lf": attr, ...options.names };
    const attrs: Record<string, AttributeValue> = { ":e": { N: this.entry(job) } };
    for (const [name, value] of Object.entries(options.conditionValues ?? {})) attrs[name] = convertToAttr(value);
    const sets = ["#lf = :e"];
    Object.entries(values).forEach(([name, value], i) => {
      names[`#v${i}`] = name;
      attrs[`:v${i}`] = convertToAttr(value);
      sets.push(`#v${i} = :v${i}`);
    });
    Object.entries(options.append ?? {}).forEach(([name, items], i) => {
      names[`#a${i}`] = name;
      attrs[`:a${i}`] = convertToAttr(items);
      attrs[":empty"] = { L: [] };
      sets.push(`#a${i} = list_append(if_not_exists(#a${i}, :empty), :a${i})`);
    });
    const item = await this.update(job, key, "SET " + sets.join(", "), names, attrs, options.condition);
    await this.maybePrune(key, item, attr);
  }

  /** The item, read consistently (fence entries as numbers: `fenceState` is exact). */
  async read(key: Key): Promise<Record<string, unknown> | undefined> {
    const out = await this.client.send(new GetItemCommand({ TableName: this.tableName, Key: marshall(key), ConsistentRead: true }));
    return out.Item ? unmarshall(out.Item) : undefined;
  }

  /** The item's fence entries and horizon, read consistently. */
  async fenceState(key: Key): Promise<FenceState> {
    const out = await this.client.send(new GetItemCommand({ TableName: this.tableName, Key: marshall(key), ConsistentRead: true }));
    return stateOf(out.Item);
  }

  // ------------------------------------------------------------ the fenced write

  private claimTime(job: FencedJob): number {
    try {
      const time = claimedAtMs(job.claim, job.fence);
      if (this.maxClaimSkewMs !== undefined && time > this.clock() + this.maxClaimSkewMs) {
        throw new InconsistentClaim(`claim of fence ${job.fence} states a claim time ${time} more than ${this.maxClaimSkewMs} ms ahead of this target's clock`);
      }
      return time;
    } catch (error) {
      if (error instanceof InconsistentClaim) {
        this.events("InconsistentClaimsRefused", 1);
        job.lose(`${REFUSED} ${error.message}`);
      }
      throw error;
    }
  }

  private entry(job: FencedJob): string {
    return entryValue(job.fence, this.claimTime(job));
  }

  /** One conditional write under the fence; the item as it is after it. */
  private async update(
    job: FencedJob,
    key: Key,
    update: string,
    names: Record<string, string>,
    values: Record<string, AttributeValue>,
    business?: string,
  ): Promise<Record<string, AttributeValue> | undefined> {
    job.guard();
    const claimTime = this.claimTime(job);
    const fenceOk = "(#lf < :fnext OR (attribute_not_exists(#lf) AND (attribute_not_exists(#hz) OR #hz < :claimed)))";
    try {
      const out = await this.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: marshall(key),
          UpdateExpression: update,
          ConditionExpression: business ? `${fenceOk} AND (${business})` : fenceOk,
          ExpressionAttributeNames: { ...names, "#hz": HORIZON },
          ExpressionAttributeValues: { ...values, ":fnext": { N: String(job.fence + 1) }, ":claimed": { N: String(claimTime) } },
          ReturnValues: "ALL_NEW",
          ReturnValuesOnConditionCheckFailure: "ALL_OLD",
        }),
      );
      return out.Attributes;
    } catch (error) {
      if (!(error instanceof Refused)) throw error;
      const state = stateOf(error.item);
      const seen = state.entries.get(names["#lf"]!);
      if (seen !== undefined && seen.fence > job.fence) {
        this.events("StaleTargetWritesRejected", 1);
        job.lose(`${REFUSED} it has seen fence ${seen.fence}`);
        throw new LostOwnership(`target refused fence ${job.fence}: it has seen ${seen.fence}`);
      }
      if (seen === undefined && state.horizon !== null && state.horizon >= claimTime) {
        this.events("TargetHorizonRefusals", 1);
        const reason =
          `target refused fence ${job.fence}: it no longer keeps this operation's fence entry and its horizon ` +
          `(${state.horizon}) is not older than this claim (${claimTime}): a stale holder, or a claim older than what the item remembers`;
        job.lose(`${REFUSED} ${reason}`);
        throw new HorizonRefused(reason);
      }
      throw new TargetRefused("the target's own condition was not met");
    }
  }

  // ------------------------------------------------------------ pruning

  /** After a write: too many (or too old) entries -> remove the oldest, pinned to their values. Never throws for a refusal. */
  private async maybePrune(key: Key, item: Record<string, AttributeValue> | undefined, keep: string): Promise<void> {
    if (item === undefined) return;
    const state = stateOf(item);
    const now = this.clock();
    const victims = this.victims(state, keep, now);
    if (victims.length === 0) return;
    const times = victims.map(([, entry]) => entry.time).filter((time): time is number => time !== null);
    let horizon = times.length ? Math.max(...times) : now;
    if (times.length < victims.length) horizon = Math.max(horizon, now); // unknown claim times: the pruner's clock bounds them
    if (state.horizon !== null) horizon = Math.max(horizon, state.horizon);
    const names: Record<string, string> = { "#hz": HORIZON };
    const values: Record<string, AttributeValue> = { ":h": { N: String(horizon) } };
    const pins = victims.map(([name], i) => {
      names[`#p${i}`] = name;
      values[`:p${i}`] = item[name]!;
      return `#p${i} = :p${i}`;
    });
    try {
      await this.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: marshall(key),
          UpdateExpression: `REMOVE ${victims.map((_, i) => `#p${i}`).join(", ")} SET #hz = :h`,
          ConditionExpression: `${pins.join(" AND ")} AND (attribute_not_exists(#hz) OR #hz <= :h)`,
          ExpressionAttributeNames: names,
          ExpressionAttributeValues: values,
          ReturnValues: "NONE",
        }),
      );
    } catch (error) {
      this.events(error instanceof Refused ? "TargetPrunesRefused" : "TargetPrunesFailed", 1);
      return; // the write itself succeeded: prune next time
    }
    this.events("TargetPrunes", 1);
    this.events("TargetEntriesPruned", victims.length);
  }

  /** The entries to remove: oldest claim first (unknown time first), never `keep`. */
  private victims(state: FenceState, keep: string, now: number): [string, { fence: number; time: number | null }][] {
    const oldestFirst = [...state.entries].filter(([name]) => name !== keep);
    oldestFirst.sort(([a, x], [b, y]) => {
      const known = Number(x.time !== null) - Number(y.time !== null);
      return known || (x.time ?? 0) - (y.time ?? 0) || (a < b ? -1 : a > b ? 1 : 0);
    });
    const cutoff = now - this.pruneAgeMs;
    const expired = oldestFirst.filter(([, entry]) => entry.time === null || entry.time <= cutoff).length;
    let count = 0;
    if (state.entries.size >= this.maxEntries) count = Math.max(state.entries.size - Math.floor(this.maxEntries / 2), expired);
    else if (expired >= Math.max(1, Math.floor(this.maxEntries / 4))) count = expired;
    return oldestFirst.slice(0, Math.min(count, MAX_PRUNE_BATCH));
  }

  private async send(command: UpdateItemCommand) {
    try {
      return await this.client.send(command);
    } catch (error) {
      if (error instanceof ConditionalCheckFailedException) throw new Refused(error.Item);
      throw error;
    }
  }
}
