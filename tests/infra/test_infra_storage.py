"""Storage (``storage.py``): the payload bucket and the log-hash key."""

from __future__ import annotations

from tests.support.infra import denies_insecure_transport, getatt, logical_id, props, resources


def test_payload_bucket(variant) -> None:
    name, stack, svc, tpl = variant
    lid = logical_id(stack, svc.payload_bucket)
    bucket = props(tpl, lid)
    assert bucket["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True,
        "IgnorePublicAcls": True, "RestrictPublicBuckets": True,
    }
    rule, final = bucket["LifecycleConfiguration"]["Rules"]
    assert rule["Status"] == final["Status"] == "Enabled"
    # No age-based expiry: a payload lives as long as its operation (issue 11, case 2); the
    # sweeper deletes it payload_retention_days after the end.
    assert "ExpirationInDays" not in rule and rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    # Behind the purge and the erasure (issue 32): a deletion is final even with versioning on,
    # and still no current object ever expires by age.
    assert final["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}
    assert final["ExpiredObjectDeleteMarker"] is True and "ExpirationInDays" not in final
    assert svc.props.payload_retention_days == (30 if name == "default" else 7)
    (enc,) = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    if name == "default":
        assert enc["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
        assert "LoggingConfiguration" not in bucket  # acknowledged in cdk-nag instead
    else:
        assert enc["ServerSideEncryptionByDefault"] == {
            "SSEAlgorithm": "aws:kms", "KMSMasterKeyID": getatt(logical_id(stack, svc.encryption_key))
        }
        assert enc["BucketKeyEnabled"] is True
        assert bucket["LoggingConfiguration"] == {
            "DestinationBucketName": "leasefence-test-access-logs",
            "LogFilePrefix": "leasefence-payloads/",
        }
    (policy,) = [p["Properties"] for p in resources(tpl, "AWS::S3::BucketPolicy").values()
                 if p["Properties"]["Bucket"] == {"Ref": lid}]
    assert denies_insecure_transport(policy)


def test_log_hash_key_is_generated_secret(variant) -> None:
    _, stack, svc, tpl = variant
    secret = props(tpl, logical_id(stack, svc.storage.log_hash_key))
    assert secret["GenerateSecretString"]["PasswordLength"] == 64
    assert "SecretString" not in secret
