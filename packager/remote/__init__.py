"""Real boards over SSH: sessions (ssh.py) with a host-key policy (hostkeys.py), quoted
remote commands (shell.py), bundle transfer with sha256 skipping and an atomic completion
marker (transfer.py), deploy/run/bench on one device (device_ops.py), local and remote
targets behind one interface (target.py) and the pool of devices (pool.py).

Every failure a user can act on is a ``RemoteError`` (a ``PackagerError``: exit code 2)
whose message names the board, the device and what to do.
"""
