"""The errors of the remote layer, by what the caller can do about them."""

from __future__ import annotations

from ..errors import PackagerError


class RemoteError(PackagerError):
    """A remote operation failed in a way the user can act on (exit code 2)."""


class DeviceLost(RemoteError):
    """The device cannot be reached or dropped the connection: a pool retries the job on
    another device."""


class HostKeyRefused(RemoteError):
    """The device's host key is unknown or changed: never retried, never trusted silently."""


class RemoteTimeout(RemoteError):
    """A remote command outlived its timeout and was killed with its process group."""
