// An SQS consumer on Powertools' batch utility whose record handler is fenced: each refund is an
// operation, its id the body's refund_id, its write to a class-B table fenced (docs/sdk-typescript.md).
// tsc checks this file with the tests: the wrapper is a record handler as processPartialResponse types it.
import { BatchProcessor, EventType, processPartialResponse } from "@aws-lambda-powertools/batch";
import type { Context, SQSEvent, SQSRecord } from "aws-lambda";
import { FencedTable, LeaseFenceClient, fenced, type Job } from "@leasefence/sdk";

type Refund = { refund_id: string; account: string; cents: number };
const client = new LeaseFenceClient({ baseUrl: process.env["LEASEFENCE_BASE_URL"] ?? "http://127.0.0.1:8765", token: process.env["LEASEFENCE_TOKEN"] ?? "" });
const refunds = new FencedTable({ tableName: "refunds" });
const account = (job: Job<Refund>) => ({ account: job.payload.account });

const recordHandler = fenced(
  async (_record: SQSRecord, job: Job<Refund>) => {
    await refunds.write(job, account(job), { last_refund: job.operationId }, { append: { refunds: [job.operationId] } });
    return "refunded"; // the operation's outcome code, and the record's result
  },
  {
    client,
    tenantId: "acme",
    jobType: "refund",
    targetClass: "B",
    operationId: (record) => (JSON.parse(record.body) as Refund).refund_id, // default: record.messageId
    onClaim: (job) => refunds.raiseFence(job, account(job)),
  },
);

const processor = new BatchProcessor(EventType.SQS);
export const handler = async (event: SQSEvent, context: Context) => processPartialResponse(event, recordHandler, processor, { context });
