"""The linearizable registers: writes and compare-and-set decided by the active controller.

A write is a RegisterValueRecord committed through the metadata quorum like any other record, so the
controller's serial decisions order the writes. A cas compares against the controller's latest image
(which includes records not yet committed, as every controller decision does); its answer, like
every answer, waits until everything before it commits (deferred.py), so a cas that fails failed
against a committed value. Reads are the shell's: Raft's read index, then the committed image
(metadata/shell/controller_component.py; docs/metadata.md "Linearizable reads").
"""

from __future__ import annotations

from kraftpy.metadata.controller.requests import ControllerResult, RegisterWriteRequest, RegisterWriteResponse
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import RegisterValueRecord
from kraftpy.protocol.errors import ErrorCode, KafkaError


def write_register(image: MetadataImage, request: RegisterWriteRequest) -> ControllerResult:
    """Set `request.key`; with `request.cas`, only while it holds `request.expected` (None: never written)."""
    current = image.registers.get(request.key)
    if request.cas and current != request.expected:
        raise KafkaError(
            f"register {request.key!r} holds {current}, not {request.expected}", ErrorCode.INVALID_UPDATE_VERSION
        )
    return ControllerResult((RegisterValueRecord(request.key, request.value),), RegisterWriteResponse(current))
