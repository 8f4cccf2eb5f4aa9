"""Config control: IncrementalAlterConfigs (set, delete) and DescribeConfigs for topics and brokers.

Kafka's ConfigurationControlManager. Alter turns validated operations into
ConfigRecords (only for values that actually change); describe is a read of
an image that any node can answer. Resources: a topic by name (it must
exist), the cluster-wide default broker resource "" (its values are the
defaults of every topic), or one broker by id ("3").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kraftpy.metadata import configs
from kraftpy.metadata.configs import TOPIC_CONFIGS, ConfigResourceType, ConfigSource
from kraftpy.metadata.controller.requests import (
    AlterConfigOpType,
    AlterConfigsResource,
    AlterConfigsResult,
    ConfigEntry,
    ConfigResource,
    ControllerResult,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import ConfigRecord, MetadataRecord
from kraftpy.protocol.errors import ErrorCode, KafkaError


def _check_resource(image: MetadataImage, resource: Any) -> ConfigResource:
    if not isinstance(resource, ConfigResource):
        raise KafkaError(f"Not a config resource: {resource!r:.60}", ErrorCode.INVALID_REQUEST)
    if resource.type == ConfigResourceType.TOPIC:
        if not isinstance(resource.name, str) or image.topic(resource.name) is None:
            raise KafkaError(f"Topic '{resource.name}' does not exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    elif resource.type == ConfigResourceType.BROKER:
        if not isinstance(resource.name, str) or not (resource.name == "" or resource.name.isdecimal()):
            raise KafkaError(
                f"Invalid broker name {resource.name!r}: a broker id, or '' for the cluster-wide default",
                ErrorCode.INVALID_REQUEST,
            )
    else:
        raise KafkaError(f"Unsupported config resource type {resource.type!r}", ErrorCode.INVALID_REQUEST)
    return resource


def _overrides(image: MetadataImage, resource: ConfigResource) -> Mapping[str, Any]:
    return image.configs.get(resource.type, resource.name)


def _defaults_for(image: MetadataImage, resource: ConfigResource) -> Mapping[str, Any] | None:
    """The broker-level values under a resource's own overrides."""
    if resource.type == ConfigResourceType.TOPIC:
        return image.broker_config_overrides("")
    return None if resource.name == "" else image.broker_config_overrides("")


def incremental_alter_configs(image: MetadataImage, request: IncrementalAlterConfigsRequest) -> ControllerResult:
    records: list[MetadataRecord] = []
    results: list[AlterConfigsResult] = []
    seen: set[tuple[int, str]] = set()
    for item in request.resources:
        resource = getattr(item, "resource", None)
        try:
            if not isinstance(item, AlterConfigsResource):
                raise KafkaError(f"Not a resource to alter: {item!r:.60}", ErrorCode.INVALID_REQUEST)
            _check_resource(image, resource)
            key = (int(resource.type), resource.name)
            if key in seen:
                raise KafkaError(f"Resource {resource.name!r} is named more than once", ErrorCode.INVALID_REQUEST)
            seen.add(key)
            new_records = _alter_one(image, item)
        except KafkaError as e:
            results.append(AlterConfigsResult(resource, e))
            continue
        if not request.validate_only:
            records.extend(new_records)
        results.append(AlterConfigsResult(resource))
    return ControllerResult(tuple(records), IncrementalAlterConfigsResponse(tuple(results)))


def _alter_one(image: MetadataImage, item: AlterConfigsResource) -> list[ConfigRecord]:
    resource = item.resource
    current = _overrides(image, resource)
    updated = dict(current)
    changed: dict[str, Any] = {}
    for op in item.ops:
        name = configs.normalize_name(getattr(op, "key", None), resource.type)
        if name in changed:
            raise KafkaError(f"Config {name} is altered more than once in one request", ErrorCode.INVALID_REQUEST)
        if op.op == AlterConfigOpType.SET:
            changed[name] = updated[name] = configs.validate_value(name, op.value)
        elif op.op == AlterConfigOpType.DELETE:
            changed[name] = None
            updated.pop(name, None)
        else:
            raise KafkaError(f"Unsupported config operation {op.op!r} (SET and DELETE are)", ErrorCode.INVALID_REQUEST)
    configs.check_consistency(configs.effective(updated, _defaults_for(image, resource)), changed)
    return [
        ConfigRecord(int(resource.type), resource.name, name, value)
        for name, value in sorted(changed.items())
        if current.get(name) != value or (value is None and name in current)
    ]


def describe_configs(image: MetadataImage, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    """Every (or the asked) config of each resource: value, source, whether it is Kafka's default."""
    results = []
    for resource in request.resources:
        try:
            _check_resource(image, resource)
            names = (
                sorted(TOPIC_CONFIGS)
                if request.keys is None
                else [configs.normalize_name(k, resource.type) for k in request.keys]
            )
            entries = tuple(_entry(image, resource, name) for name in names)
        except KafkaError as e:
            results.append(DescribeConfigsResult(resource, e))
            continue
        results.append(DescribeConfigsResult(resource, None, entries))
    return DescribeConfigsResponse(tuple(results))


def _entry(image: MetadataImage, resource: ConfigResource, name: str) -> ConfigEntry:
    own = _overrides(image, resource)
    definition = TOPIC_CONFIGS[name]
    if name in own:
        source = ConfigSource.TOPIC if resource.type == ConfigResourceType.TOPIC else ConfigSource.BROKER
        value = own[name]
    else:
        value, source = configs.resolve(name, None, _defaults_for(image, resource))
    return ConfigEntry(name, value, source, source == ConfigSource.DEFAULT, str(definition.type), definition.doc)
