"""Where a ``LeaseFenceService`` keeps its state: the operations table, the payload bucket, the
log-hash secret and (optionally) the service's customer-managed key.

The table and the bucket are created unless you bring your own (``table=``, ``payload_bucket=``);
every grant and environment variable then follows the brought-in resource, and the keys that
encrypt them (``ITable.encryption_key``, ``IBucket.encryption_key``) are granted to the functions.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from leasefence import schema
from leasefence.payloads import KEY_PREFIX as PAYLOAD_KEY_PREFIX

from .nag import acknowledge, finding_resource
from .props import LeaseFenceServiceProps
from .table import LeaseFenceTable, TableSchemaCheck, index_arn


class Storage(Construct):
    """Table, payload bucket, log-hash secret, service key: created or brought in."""

    def __init__(
        self, scope: Construct, construct_id: str, *, props: LeaseFenceServiceProps
    ) -> None:
        super().__init__(scope, construct_id)
        #: The service's customer-managed key (``encryption_key`` or ``create_encryption_key``):
        #: what the service creates is encrypted with it (table, bucket, secret, queues,
        #: schedules, alarm topic). ``None``: AWS-owned / AWS-managed keys.
        self.encryption_key: kms.IKey | None = props.encryption_key
        if props.create_encryption_key:
            self.encryption_key = kms.Key(
                self,
                "Key",
                description="leasefence: table, payload bucket, secret, queues and alarm topic",
                enable_key_rotation=True,
                removal_policy=props.removal_policy,
            )

        # ------------------------------------------------------------------ table
        self.table: dynamodb.ITable
        if props.table is not None:
            self.table = props.table
            self.node.add_validation(TableSchemaCheck(props.table))
        else:
            self.table = LeaseFenceTable(
                self,
                "Table",
                table_name=props.table_name,
                deletion_protection=props.deletion_protection,
                encryption_key=self.encryption_key,
                removal_policy=props.removal_policy,
            )
        self.due_index_arn = index_arn(self.table, schema.DUE_INDEX)
        self.sweep_index_arn = index_arn(self.table, schema.SWEEP_INDEX)
        self.parked_index_arn = index_arn(self.table, schema.PARKED_INDEX)
        self.purge_index_arn = index_arn(self.table, schema.PURGE_INDEX)

        # ------------------------------------------------------------------ payload bucket
        self.payload_bucket: s3.IBucket
        if props.payload_bucket is not None:
            self.payload_bucket = props.payload_bucket
        else:
            self.payload_bucket = self._bucket(props)

        # ------------------------------------------------------------------ log-hash secret
        self.log_hash_key = secretsmanager.Secret(
            self,
            "LogHashKey",
            description="leasefence: HMAC key for keyed hashes of ids in logs and metrics",
            encryption_key=self.encryption_key,
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=64, exclude_punctuation=True, include_space=False
            ),
            removal_policy=props.removal_policy,
        )
        acknowledge(
            self.log_hash_key,
            "AwsSolutions-SMG4",
            "Not a credential: the key pseudonymizes ids in logs. Rotating it would only break "
            "the correlation of log lines across the rotation; it grants no access to anything.",
        )

        #: Every customer-managed key a function needs for the data it touches (once each).
        self.data_keys: tuple[kms.IKey, ...] = _distinct(
            [self.encryption_key, self.table.encryption_key, self.payload_bucket.encryption_key]
        )

    def _bucket(self, props: LeaseFenceServiceProps) -> s3.Bucket:
        access_logs = props.server_access_logs_bucket
        bucket = s3.Bucket(
            self,
            "PayloadBucket",
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            encryption=s3.BucketEncryption.KMS
            if self.encryption_key
            else s3.BucketEncryption.S3_MANAGED,
            encryption_key=self.encryption_key,
            bucket_key_enabled=True if self.encryption_key else None,
            # No age-based expiry: an object's life follows its operation's (the sweeper deletes
            # it payload_retention_days after the operation ended), so a backlog, a long retry
            # delay or a parked operation never loses its input. What stands behind the purge's
            # and the erasure's deletions (mark first, then delete: a failed deletion stays in
            # the purge index until a pass succeeds): a deletion is final within a day even if
            # versioning is turned on (AWS Backup for S3 requires it), never a noncurrent
            # version that keeps an erased payload.
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="abort-incomplete-uploads",
                    enabled=True,
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                ),
                s3.LifecycleRule(
                    id="deletions-are-final",
                    enabled=True,
                    noncurrent_version_expiration=Duration.days(1),
                    expired_object_delete_marker=True,
                ),
            ],
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix="leasefence-payloads/" if access_logs else None,
            removal_policy=props.removal_policy,
        )
        if access_logs is None:
            acknowledge(
                bucket,
                "AwsSolutions-S1",
                "Payload objects are written and read only by the API function, whose every request "
                "is in the API access log and X-Ray, and read by the worker function (when deployed, "
                "in X-Ray); no other principal has access. Pass server_access_logs_bucket to turn "
                "S3 server access logging on.",
            )
        return bucket

    # ---------------------------------------------------------------------- grants

    @property
    def payload_objects_arn(self) -> str:
        """Every payload object: the service writes only under ``leasefence.payloads.KEY_PREFIX``."""
        return self.payload_bucket.arn_for_objects(f"{PAYLOAD_KEY_PREFIX}*")

    def grant_payload_objects(
        self, role: iam.IRole, sid: str, actions: Sequence[str], why: str
    ) -> None:
        """``actions`` on the payload objects, with the cdk-nag acknowledgment of the prefix
        wildcard (object keys are created at run time)."""
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid=sid, actions=list(actions), resources=[self.payload_objects_arn]
            )
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "Payload object keys are created per operation at run time (keyed hashes under "
            f"'{PAYLOAD_KEY_PREFIX}'), so the statement is scoped to that prefix of this one "
            f"bucket ({', '.join(actions)} only): {why}",
            applies_to=[finding_resource(self, self.payload_objects_arn)],
        )

    def grant_table(
        self,
        role: iam.IRole,
        actions: Sequence[str],
        resources: Sequence[str],
        sid: str | None = None,
    ) -> None:
        role.add_to_principal_policy(
            iam.PolicyStatement(sid=sid, actions=list(actions), resources=list(resources))
        )

    def grant_data_keys(self, role: iam.IRole, extra_keys: Sequence[kms.IKey] = ()) -> None:
        """Encrypt/decrypt on :attr:`data_keys` (and ``extra_keys``), acknowledged once."""
        self._grant_keys(role, _distinct([*self.data_keys, *extra_keys]))

    def grant_table_key(self, role: iam.IRole) -> None:
        """Encrypt/decrypt on the table's customer-managed key only (if it has one)."""
        self._grant_keys(role, _distinct([self.table.encryption_key]))

    def _grant_keys(self, role: iam.IRole, keys: Sequence[kms.IKey]) -> None:
        for key in keys:
            key.grant_encrypt_decrypt(role)
        if keys:
            acknowledge(
                role,
                "AwsSolutions-IAM5",
                "Key.grant_encrypt_decrypt on the customer-managed keys of the data this function "
                "touches (the service key and the keys of the brought-in table, bucket or worker "
                "tables; each resource is one key's ARN): DynamoDB, S3 (SSE-KMS) and Secrets "
                "Manager need data-key generation and re-encryption on them.",
                applies_to=["Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*"],
            )


def _distinct(keys: Sequence[kms.IKey | None]) -> tuple[kms.IKey, ...]:
    out: list[kms.IKey] = []
    for key in keys:
        if key is not None and not any(key is k or key.node.path == k.node.path for k in out):
            out.append(key)
    return tuple(out)
