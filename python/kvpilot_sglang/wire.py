"""The sidecar's wire protocol (src/runtime/protocol.rs), standard library only.

A `Session` is one Unix-socket connection: HELLO once (the namespace, and the host pool's memfd
when there is one), then any number of request/reply frames. Sessions are not thread-safe; the
storage backend keeps one per calling thread.
"""

from __future__ import annotations

import socket
import struct
import sys
from array import array
from typing import Iterable, List, Optional, Sequence

VERSION = 1
OP_HELLO, OP_EXISTS, OP_GET, OP_SET, OP_PUT_BYTES, OP_GET_BYTES, OP_CLEAR = 1, 2, 3, 4, 5, 6, 7
STATUS_OK = 0

_U32 = struct.Struct("<I")
_LITTLE = sys.byteorder == "little"


class SidecarError(Exception):
    """The sidecar refused a frame (and closed the connection) or the socket failed."""


def _le(values: array) -> bytes:
    if not _LITTLE:
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def encode_keys(keys: Sequence[bytes]) -> bytes:
    """The frame's keys section: u16 count, u16 lengths, the keys."""
    return struct.pack("<H", len(keys)) + _le(array("H", map(len, keys))) + b"".join(keys)


def leading_hits(byte_map: bytes) -> int:
    """How many keys from the first on are hits in a reply's byte map."""
    first_miss = byte_map.find(b"\x00")
    return len(byte_map) if first_miss < 0 else first_miss


class Session:
    """One connection to the sidecar."""

    def __init__(
        self,
        path: str,
        namespace: bytes,
        pool_fd: Optional[int] = None,
        pool_bytes: int = 0,
        timeout: float = 60.0,
    ):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(path)
            hello = (
                struct.pack("<BHH", OP_HELLO, VERSION, len(namespace))
                + namespace
                + struct.pack("<Q", pool_bytes if pool_fd is not None else 0)
            )
            frame = _U32.pack(len(hello)) + hello
            if pool_fd is not None:
                socket.send_fds(self.sock, [frame], [pool_fd])
            else:
                self.sock.sendall(frame)
            self._reply()
        except BaseException:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()

    # -- framing -------------------------------------------------------------------------------

    def _send(self, parts: List) -> None:
        """Sends the buffers in order; a partial sendmsg continues where it stopped."""
        views = [memoryview(p).cast("B") for p in parts if len(p)]
        while views:
            sent = self.sock.sendmsg(views[:1024])
            while sent:
                if sent >= len(views[0]):
                    sent -= len(views[0])
                    views.pop(0)
                else:
                    views[0] = views[0][sent:]
                    sent = 0

    def _recv_into(self, view: memoryview) -> None:
        while len(view):
            got = self.sock.recv_into(view)
            if got == 0:
                raise SidecarError("the sidecar closed the connection")
            view = view[got:]

    def _recv(self, n: int) -> bytearray:
        buf = bytearray(n)
        self._recv_into(memoryview(buf))
        return buf

    def _reply_header(self) -> int:
        """Reads a reply's length and status; returns the payload length."""
        length = _U32.unpack(self._recv(4))[0]
        if length == 0:
            raise SidecarError("empty reply frame")
        status = self._recv(1)[0]
        if status != STATUS_OK:
            reason = self._recv(length - 1).decode("utf-8", "replace")
            raise SidecarError(f"the sidecar refused the frame: {reason}")
        return length - 1

    def _reply(self) -> bytes:
        return bytes(self._recv(self._reply_header()))

    def _request(self, op: int, body: Iterable) -> bytes:
        parts = [bytes([op]), *body]
        length = sum(len(memoryview(p).cast("B")) for p in parts)
        self._send([_U32.pack(length), *parts])
        return self._reply()

    # -- operations ----------------------------------------------------------------------------

    def exists(self, keys: Sequence[bytes]) -> bytes:
        """One byte per key: 1 when stored."""
        return self._request(OP_EXISTS, [encode_keys(keys)])

    def _regions(self, op: int, keys: Sequence[bytes], per_page: int, offsets: array, lengths: array) -> bytes:
        return self._request(op, [encode_keys(keys), bytes([per_page]), _le(offsets), _le(lengths)])

    def get(self, keys: Sequence[bytes], per_page: int, offsets: array, lengths: array) -> bytes:
        """Copies stored pages into the pool mapping; one byte per key: 1 when copied."""
        return self._regions(OP_GET, keys, per_page, offsets, lengths)

    def set(self, keys: Sequence[bytes], per_page: int, offsets: array, lengths: array) -> bytes:
        """Stores pages from the pool mapping; one byte per key: 1 when stored."""
        return self._regions(OP_SET, keys, per_page, offsets, lengths)

    def put_bytes(self, keys: Sequence[bytes], values: Sequence[Sequence[memoryview]]) -> bytes:
        """Stores each key's value, given as the buffers it concatenates."""
        lengths = array("Q", (sum(len(part) for part in value) for value in values))
        return self._request(OP_PUT_BYTES, [encode_keys(keys), _le(lengths), *(part for value in values for part in value)])

    def get_bytes(self, keys: Sequence[bytes], targets: Sequence[Sequence[memoryview]]) -> List[bool]:
        """Reads each hit straight into its target buffers; a stored value whose length is not
        the targets' total is drained and reported as a miss."""
        body = encode_keys(keys)
        self._send([_U32.pack(1 + len(body)), bytes([OP_GET_BYTES]), body])
        self._reply_header()
        head = self._recv(len(keys) * 9)
        lengths = array("Q")
        lengths.frombytes(bytes(head[len(keys):]))
        if not _LITTLE:
            lengths.byteswap()
        filled = []
        for index, target in enumerate(targets):
            if not head[index]:
                filled.append(False)
                continue
            want = sum(len(part) for part in target)
            if lengths[index] != want:
                self._recv(lengths[index])
                filled.append(False)
                continue
            for part in target:
                self._recv_into(part)
            filled.append(True)
        return filled

    def clear(self) -> None:
        self._request(OP_CLEAR, [])
