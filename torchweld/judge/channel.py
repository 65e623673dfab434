"""The one channel between the judge's trusted process and the candidate's: pickled messages whose tensors
cross by shared memory, never as copies.

CPU tensors go as file descriptors of their shared-memory storage (torch's `file_descriptor` strategy), passed
over the Unix socket itself (SCM_RIGHTS); CUDA tensors go as CUDA IPC handles (torch.multiprocessing's own
reduction). So a state dict or a GB input set costs a handle, and a tensor sent twice arrives as the same
storage while the receiver still holds it (an input cache keyed by address still sees one address).
"""
from __future__ import annotations

import os
import socket
import struct
import threading
from multiprocessing import context
from multiprocessing.reduction import ForkingPickler

import torch.multiprocessing  # noqa: F401 - registers torch's tensor and storage reductions with ForkingPickler

_HEADER = struct.Struct("!QI")  # body bytes, file descriptors
_FDS_PER_MESSAGE = 200  # SCM_RIGHTS carries at most 253 per message
_inbox = threading.local()


class ChannelClosed(Exception):
    """The other process closed the channel (it exited or was killed)."""


class _SentFd:
    """A descriptor travelling beside the message; `detach()` on arrival gives the received one."""

    def __init__(self, index: int):
        self.index = index

    def __reduce__(self):
        return _SentFd, (self.index,)

    def detach(self) -> int:
        fds = _inbox.fds
        fd, fds[self.index] = fds[self.index], None  # NOTE: torch's rebuild closes it once it is mapped
        return fd


class _Collector:
    """Stands in for multiprocessing's spawning Popen while pickling, so `DupFd` collects descriptors."""

    def __init__(self):
        self.fds: list[int] = []

    def duplicate_for_child(self, fd: int) -> int:
        self.fds.append(os.dup(fd))
        return len(self.fds) - 1

    def DupFd(self, index: int) -> _SentFd:  # noqa: N802 - the name multiprocessing calls
        return _SentFd(index)


class Channel:
    """Messages over a connected Unix stream socket; one sender and one receiver per side."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    @classmethod
    def from_fd(cls, fd: int) -> "Channel":
        return cls(socket.socket(fileno=fd))

    def send(self, obj) -> None:
        col = _Collector()
        prev = getattr(context._tls, "spawning_popen", None)
        context.set_spawning_popen(col)
        try:
            body = ForkingPickler.dumps(obj)
        finally:
            context.set_spawning_popen(prev)
        try:
            self.sock.sendall(_HEADER.pack(len(body), len(col.fds)))
            for i in range(0, len(col.fds), _FDS_PER_MESSAGE):
                socket.send_fds(self.sock, [b"f"], col.fds[i:i + _FDS_PER_MESSAGE])
            self.sock.sendall(body)
        except OSError as e:
            raise ChannelClosed(str(e)) from e
        finally:
            for fd in col.fds:
                os.close(fd)

    def _exact(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            try:
                b = self.sock.recv(min(n - got, 1 << 20))
            except OSError as e:
                raise ChannelClosed(str(e)) from e
            if not b:
                raise ChannelClosed("the other side closed the channel")
            chunks.append(b)
            got += len(b)
        return b"".join(chunks)

    def recv(self):
        size, nfds = _HEADER.unpack(self._exact(_HEADER.size))
        fds: list[int | None] = []
        while len(fds) < nfds:
            try:
                _, got, _, _ = socket.recv_fds(self.sock, 1, min(_FDS_PER_MESSAGE, nfds - len(fds)))
            except OSError as e:
                raise ChannelClosed(str(e)) from e
            if not got:
                raise ChannelClosed("the other side closed the channel")
            fds += got
        body = self._exact(size)
        _inbox.fds = fds
        try:
            return ForkingPickler.loads(body)
        finally:
            for fd in fds:
                if fd is not None:
                    os.close(fd)
            _inbox.fds = []

    def close(self) -> None:
        self.sock.close()
