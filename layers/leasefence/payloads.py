"""Inline payloads: canonical JSON (RFC 8785), bound to the operation by its SHA-256, kept in
DynamoDB when what is stored is at most :data:`~leasefence.limits.MAX_ITEM_PAYLOAD_BYTES` (text,
or packed: :func:`fits_in_item`, :func:`read_kept`, :func:`read_packed`), in S3 otherwise.

* The hash is ``"sha256:" + hex(sha256(canonical JSON))``, so key order and whitespace never
  change it, and the stored object's bytes hash to exactly the operation's ``payload_hash``.
* The object key is ``payloads/<tenant tag>/<object tag>``: both tags are HMACs under the naming
  secret ``LEASEFENCE_PAYLOAD_KEY_SECRET`` (optional; without it the tags are plain hashes), so
  keys are tenant-scoped, name no raw id, and are a pure function of ``(tenant, operation,
  hash)``. A replay therefore addresses the very same object, and the write is
  ``If-None-Match: *``: an existing object is never overwritten. The naming secret is not the
  log-hash key: rotating that one changes nothing here.
* Reads and deletions use the object the operation item names (``payload_ref``, recorded by the
  engine only for payloads it stored: ``payload_inline``), never a key recomputed with today's
  secret, so changing the naming secret orphans nothing. A client-chosen ``payload_ref`` is never
  flagged inline, so it can never point a read at another tenant's object.
* A payload that is gone (purged after its retention, erased, a missing object, bytes that do
  not match the hash) is :class:`~leasefence.errors.PayloadMissing`, never None. A store that
  refuses access (``AccessDenied``, a KMS key fault, an archived object) is not "gone": it is
  :class:`~leasefence.errors.PayloadAccessDenied`, an :class:`~leasefence.errors.Unavailable`
  (503, the worker neither quarantines nor fails the job), counted as ``PayloadAccessDenied``
  through ``events`` so the misconfiguration is alarmed instead of quarantining jobs in bulk.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from leasefence.errors import (
    InvalidInput,
    LeaseFenceError,
    PayloadAccessDenied,
    PayloadMissing,
    PayloadTooLarge,
    Unavailable,
)
from leasefence.limits import MAX_ITEM_PAYLOAD_BYTES, MAX_PACKED_PAYLOAD_BYTES, MAX_PAYLOAD_BYTES
from leasefence.metrics import Metric

log = logging.getLogger("leasefence.payloads")

KEY_PREFIX = "payloads/"
CONTENT_TYPE = "application/json"

_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
#: The store refused access: a permission, key, storage-class or credentials fault that an
#: operator fixes (the object may well be there). Codes starting ``KMS`` (S3 relays a KMS key's
#: faults as ``KMS.DisabledException``, ``KMS.KMSInvalidStateException``, ...) count too.
_DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "403",
        "AllAccessDisabled",
        "AccountProblem",
        "InvalidObjectState",
        "InvalidAccessKeyId",
        "InvalidToken",
        "ExpiredToken",
        "SignatureDoesNotMatch",
    }
)
#: The metric counted for each refusal (``events``): alarmed by the CDK construct.
ACCESS_DENIED_EVENT = Metric.PAYLOAD_ACCESS_DENIED
_EXISTS_CODES = frozenset({"PreconditionFailed", "412"})
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "ConditionalRequestConflict",
        "503",
        "500",
    }
)


@dataclass(frozen=True)
class CanonicalPayload:
    body: bytes
    hash: str


def canonicalize(value: Any) -> CanonicalPayload:
    """RFC 8785 canonical JSON of ``value`` and its hash; 413 past the size limit, 422 when the
    value is not representable (null, non-finite or unsafe-range numbers, lone surrogates)."""
    import rfc8785

    if value is None:
        raise InvalidInput("payload must be a JSON value other than null")
    try:
        body = rfc8785.dumps(value)
    except RecursionError:
        raise InvalidInput("payload is nested too deeply") from None
    except (rfc8785.CanonicalizationError, ValueError, TypeError) as error:
        raise InvalidInput(
            f"payload cannot be canonicalized as I-JSON (RFC 8785): {type(error).__name__}"
        ) from None
    if len(body) > MAX_PAYLOAD_BYTES:
        raise PayloadTooLarge(
            f"payload canonical JSON is {len(body)} bytes; the limit is {MAX_PAYLOAD_BYTES}"
        )
    return CanonicalPayload(body=body, hash="sha256:" + hashlib.sha256(body).hexdigest())


def fits_in_item(payload: CanonicalPayload, packing: bool = True) -> bool:
    """Whether the payload is kept in DynamoDB (a payload item) rather than S3: its canonical JSON
    is at most :data:`MAX_ITEM_PAYLOAD_BYTES`, or (``packing``: the engine packs payloads) at
    most :data:`MAX_PACKED_PAYLOAD_BYTES` and packs to at most :data:`MAX_ITEM_PAYLOAD_BYTES`.
    A short one is not packed to tell."""
    body = payload.body
    return len(body) <= MAX_ITEM_PAYLOAD_BYTES or fits_packed(body, packed_form(body, packing))


def packed_form(body: bytes, packing: bool) -> bytes | None:
    """What a payload item keeps instead of the text of ``body`` (a canonical JSON): its packed
    bytes when ``packing`` and packing shortens it (:func:`pack`; never past
    :data:`MAX_PACKED_PAYLOAD_BYTES`, what a reader unpacks), else None: the text."""
    return pack(body) if packing and len(body) <= MAX_PACKED_PAYLOAD_BYTES else None


def fits_packed(body: bytes, packed: bytes | None) -> bool:
    """Whether a payload item keeps ``body`` in at most :data:`MAX_ITEM_PAYLOAD_BYTES`: as its
    text, or as ``packed`` (:func:`packed_form`)."""
    return len(body if packed is None else packed) <= MAX_ITEM_PAYLOAD_BYTES


def read_kept(text: str, payload_hash: str) -> bytes:
    """The canonical JSON an operation's item keeps (``payload_json``), checked against the hash
    exactly as an S3 object is: :class:`PayloadMissing` when it does not match."""
    return _checked(text.encode("utf-8", "surrogatepass"), payload_hash)


def _checked(body: bytes, payload_hash: str) -> bytes:
    if "sha256:" + hashlib.sha256(body).hexdigest() != payload_hash:
        raise PayloadMissing("the stored payload does not match its hash")
    return body


#: A payload item keeps a canonical JSON of at least this many bytes packed (raw DEFLATE) when
#: that is shorter; a shorter one always as text. JSON compresses well (repeated keys, a small
#: alphabet: base64 text to about 3/4), and a payload item of at most 1 KB costs one write unit
#: where one of 1 to 2 KB costs two, at its enqueue and again at its expiry's write. Below the
#: threshold the item is well under 1 KB as text, and nothing is worth its CPU time.
PACK_FROM_BYTES = 256
#: DEFLATE's level for packed payloads. Nothing depends on two packings of the same bytes being
#: equal (zlib builds may differ): the hash is checked on the unpacked bytes.
PACK_LEVEL = 9


def pack(body: bytes) -> bytes | None:
    """``body`` (a payload's canonical JSON) packed as a payload item keeps it: raw DEFLATE (no
    header: the hash checks it), or None when it is too short to pack or packs no shorter."""
    if len(body) < PACK_FROM_BYTES:
        return None
    packer = zlib.compressobj(PACK_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    packed = packer.compress(body) + packer.flush()
    return packed if len(packed) < len(body) else None


def read_packed(packed: bytes, payload_hash: str) -> bytes:
    """The canonical JSON a payload item keeps packed (:func:`pack`), checked against the hash
    as :func:`read_kept` checks text: :class:`PayloadMissing` when the bytes do not unpack to it
    (unpacking stops past :data:`MAX_PACKED_PAYLOAD_BYTES`: never more than a kept payload)."""
    unpacker = zlib.decompressobj(-zlib.MAX_WBITS)
    try:
        body = unpacker.decompress(packed, MAX_PACKED_PAYLOAD_BYTES + 1)
    except zlib.error:
        raise PayloadMissing("the stored payload does not unpack") from None
    if len(body) > MAX_PACKED_PAYLOAD_BYTES or not unpacker.eof or unpacker.unused_data:
        raise PayloadMissing("the stored payload does not unpack")
    return _checked(body, payload_hash)


@dataclass(frozen=True)
class StoredPayload:
    ref: str
    hash: str
    key: str
    created: bool


class PayloadStore:
    """Inline payload objects in one bucket. The S3 client is created on first use."""

    def __init__(
        self,
        bucket: str,
        secret: str | bytes | None = None,
        client: Any = None,
        client_factory: Callable[[], Any] | None = None,
        events: Callable[[str, float], None] | None = None,
    ) -> None:
        self.bucket = bucket
        #: Called with ("PayloadAccessDenied", 1) each time the store refuses access.
        self.events = events if events is not None else (lambda _name, _value: None)
        if secret is None:
            # Deterministic but not secret: keys stay stable across processes (replays address
            # the same object) but are guessable by someone who knows the ids (reading still
            # needs the bucket's IAM permissions). LEASEFENCE_PAYLOAD_KEY_SECRET makes them keyed.
            secret = f"leasefence-unkeyed:{bucket}"
        self._secret = secret.encode() if isinstance(secret, str) else secret
        self._client = client
        self._client_factory = client_factory

    @property
    def client(self) -> Any:
        if self._client is None:
            if self._client_factory is None:
                import boto3

                self._client = boto3.client("s3")
            else:
                self._client = self._client_factory()
        return self._client

    # ------------------------------------------------------------------ naming

    def _mac(self, label: str, *parts: str) -> str:
        mac = hmac.new(self._secret, label.encode(), hashlib.sha256)
        for part in parts:
            data = part.encode()
            mac.update(len(data).to_bytes(4, "big"))
            mac.update(data)
        return mac.hexdigest()

    def key_for(self, tenant_id: str, operation_id: str, payload_hash: str) -> str:
        tenant_tag = self._mac("tenant", tenant_id)[:32]
        object_tag = self._mac("object", tenant_id, operation_id, payload_hash)
        return f"{KEY_PREFIX}{tenant_tag}/{object_tag}.json"

    def ref_for(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def tenant_prefix(self, tenant_id: str) -> str:
        return f"{KEY_PREFIX}{self._mac('tenant', tenant_id)[:32]}/"

    def key_of(self, ref: str) -> str:
        """The object key a ``payload_ref`` of this store names (refused for anything else)."""
        prefix = f"s3://{self.bucket}/{KEY_PREFIX}"
        if not ref.startswith(prefix) or ".." in ref:
            raise LeaseFenceError("payload_ref does not name an object of this payload store")
        return ref.removeprefix(f"s3://{self.bucket}/")

    def owns(
        self, tenant_id: str, operation_id: str, payload_hash: str, payload_ref: str | None
    ) -> bool:
        """Whether ``payload_ref`` is the inline payload this store wrote for that identity."""
        if payload_ref is None:
            return False
        expected = self.ref_for(self.key_for(tenant_id, operation_id, payload_hash))
        # As bytes: compare_digest refuses str with non-ASCII characters, and a caller's own
        # payload_ref may have any.
        return hmac.compare_digest(
            payload_ref.encode("utf-8", "surrogatepass"), expected.encode("utf-8")
        )

    # ------------------------------------------------------------------ I/O

    def put(self, tenant_id: str, operation_id: str, payload: CanonicalPayload) -> StoredPayload:
        """Write the object unless it exists (``If-None-Match: *``). Same inputs, same key and
        bytes: a replay finds the object already there and writes nothing."""
        key = self.key_for(tenant_id, operation_id, payload.hash)
        digest = payload.hash.removeprefix("sha256:")
        created = True
        try:
            self.client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=payload.body,
                ContentType=CONTENT_TYPE,
                ChecksumSHA256=base64.b64encode(bytes.fromhex(digest)).decode(),
                IfNoneMatch="*",
            )
        except Exception as error:  # classified below, never swallowed silently
            code = _error_code(error)
            if code in _EXISTS_CODES:
                created = False
            else:
                raise self._translate(error, code) from error
        return StoredPayload(ref=self.ref_for(key), hash=payload.hash, key=key, created=created)

    def read(self, ref: str, payload_hash: str) -> bytes:
        """The stored canonical JSON that ``ref`` names, checked against the hash.
        :class:`PayloadMissing` when the object is gone (404 ``NoSuchKey``) or its bytes do not
        match; never None. :class:`PayloadAccessDenied` when the store refuses access (the
        roles that read payloads may ``s3:ListBucket``, so a missing object is a 404, not a
        403): the payload may well be there, the job must not be quarantined for it."""
        key = self.key_of(ref)
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
            body = response["Body"].read()
        except Exception as error:
            code = _error_code(error)
            if code in _MISSING_CODES:
                raise PayloadMissing("the payload object is gone") from None
            raise self._translate(error, code) from error
        if "sha256:" + hashlib.sha256(body).hexdigest() != payload_hash:
            raise PayloadMissing("the stored payload does not match its hash")
        return body

    def delete(self, ref: str) -> None:
        """Delete the object ``ref`` names (nothing if it is already gone). Raises
        :class:`Unavailable` when S3 could not be reached: the caller retries later."""
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key_of(ref))
        except Exception as error:
            code = _error_code(error)
            if code in _MISSING_CODES:
                return
            raise self._translate(error, code) from error

    def delete_tenant_objects(
        self, tenant_id: str, limit: int, token: str | None
    ) -> tuple[int, str | None]:
        """Delete up to ``limit`` objects under the tenant's prefix (the naming secret of today);
        returns how many and a token to continue, or None when none is left."""
        kwargs: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": self.tenant_prefix(tenant_id),
            "MaxKeys": min(limit, 1000),
        }
        if token:
            kwargs["ContinuationToken"] = token
        try:
            listing = self.client.list_objects_v2(**kwargs)
            objects = [{"Key": o["Key"]} for o in listing.get("Contents", [])]
            if objects:
                self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
                )
        except Exception as error:
            raise self._translate(error, _error_code(error)) from error
        return len(objects), listing.get("NextContinuationToken") if listing.get(
            "IsTruncated"
        ) else None

    def _translate(self, error: Exception, code: str | None) -> Exception:
        """The domain error for a failed S3 call; a refused access is also counted and logged
        (the error code only: keys and ids never reach the log)."""
        if _denied(code):
            self.events(ACCESS_DENIED_EVENT, 1)
            log.error("payload store refused access", extra={"error_type": code})
            return PayloadAccessDenied(
                f"the payload store refused access ({code}): check the bucket policy, the "
                "function's role and the bucket's KMS key; retry once fixed"
            )
        return _translate(error, code)

    def delete_quietly(self, key: str) -> None:
        """Best-effort removal of an object nothing references (an enqueue that lost)."""
        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        except Exception as error:  # noqa: BLE001 - best effort; a lifecycle rule is the backstop
            log.warning("orphan payload not deleted", extra={"error_type": type(error).__name__})


def _error_code(error: Exception) -> str | None:
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        if code:
            return str(code)
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return str(status) if status else None
    return None


def _denied(code: str | None) -> bool:
    return code is not None and (code in _DENIED_CODES or code.startswith("KMS"))


def _translate(error: Exception, code: str | None) -> Exception:
    from botocore.exceptions import BotoCoreError

    if code in _TRANSIENT_CODES or isinstance(error, BotoCoreError):
        return Unavailable("payload store busy or unreachable, retry")
    return LeaseFenceError(f"payload store error {code or type(error).__name__}")
