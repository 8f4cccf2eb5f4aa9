"""Consumer groups on the broker: the group coordinator (sans-I/O) and `__consumer_offsets` records.

`GroupCoordinator` is the one object a broker shell drives (see coordinator.py
for how); `records` defines what it writes to `__consumer_offsets` and
`loader` rebuilds groups from it.
"""

from kraftpy.broker.groups.actions import Action, Append, Respond
from kraftpy.broker.groups.config import GroupCoordinatorConfig
from kraftpy.broker.groups.coordinator import GroupCoordinator
from kraftpy.broker.groups.group import GroupMetadata, GroupState, MemberMetadata
from kraftpy.broker.groups.records import GroupRecordError, partition_for
from kraftpy.broker.groups.requests import GROUP_APIS
from kraftpy.broker.groups.runtime import PartitionStatus

__all__ = [
    "GROUP_APIS",
    "Action",
    "Append",
    "GroupCoordinator",
    "GroupCoordinatorConfig",
    "GroupMetadata",
    "GroupRecordError",
    "GroupState",
    "MemberMetadata",
    "PartitionStatus",
    "Respond",
    "partition_for",
]
