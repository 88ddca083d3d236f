"""An SQS consumer moved from Powertools idempotency (``before``) to leasefence (``after``)."""
