"""ECMP: the hash the switch's action selector computes, so the controller predicts each flow's path.

The P4 program's ``ecmp`` table (p4src/include/forwarding.p4) is an indirect table whose action
selector hashes the 5-tuple with ``HashAlgorithm.crc16`` and picks a member of the group:
BMv2 (``bm_sim/action_profile.cpp``, ``GroupMgr::get_from_hash``) takes member
``hash % group size`` in ascending member-handle order, and its CRC-16 (``bm_sim/calculations.cpp``,
``struct crc16``) is CRC-16/ARC: polynomial 0x8005, initial value 0, input and output reflected,
no final XOR. The hash input is the selector fields in the table's key order, each in network
byte order at its width (all whole bytes, so no bit packing):
``src_addr`` (32) ``dst_addr`` (32) ``protocol`` (8) ``l4_src_port`` (16) ``l4_dst_port`` (16).

The controller writes a group's members in ascending port order on a clean switch, so member
handle order is port order and :func:`select` returns the port BMv2 forwards to
(``ptf_tests``: ``EcmpPredictionTest`` checks it on BMv2). BMv2 reuses the smallest free
member handle, so on a switch whose members were deleted and re-created in another order the
prediction can break; :meth:`safs.core.scheduler.Scheduler.reinstall` starts from a clean
switch. SAFS flows get their entropy from the UDP source port, one per dependency
(``safs.hosts.safs``: ``1024 + dep_id % 64000``).
"""

from __future__ import annotations

from collections.abc import Sequence


def _table() -> list[int]:
    out = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1  # 0xA001 = 0x8005 reflected
        out.append(crc)
    return out


_CRC16_TABLE = _table()


def crc16(data: bytes) -> int:
    """CRC-16/ARC of ``data`` (BMv2's ``crc16``); ``crc16(b"123456789") == 0xBB3D``."""
    crc = 0
    for b in data:
        crc = (crc >> 8) ^ _CRC16_TABLE[(crc ^ b) & 0xFF]
    return crc


def flow_hash(src_addr: int, dst_addr: int, protocol: int, l4_src_port: int, l4_dst_port: int) -> int:
    """The selector's 16-bit hash of one packet's 5-tuple (IPv4 addresses as ints; ports 0 for
    packets that are neither TCP nor UDP, as the parser leaves them)."""
    data = (src_addr.to_bytes(4, "big") + dst_addr.to_bytes(4, "big") + bytes((protocol,))
            + l4_src_port.to_bytes(2, "big") + l4_dst_port.to_bytes(2, "big"))
    return crc16(data)


def select(members: Sequence[int], hash_value: int) -> int:
    """The member an action selector picks for ``hash_value`` from ``members`` (ascending
    handle order, here ascending ports). Raises IndexError for an empty group."""
    if not members:
        raise IndexError("empty ECMP group")
    return members[hash_value % len(members)]
