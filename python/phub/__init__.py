# SPDX-License-Identifier: BSD-3-Clause
"""phub: PHub's worker library (libphub.so.0) for Python, through ctypes.

    import phub
    with phub.connect("10.0.0.1", job="resnet", nonce=0x1234, rank=0, world_size=4,
                      keys=[100000, 1000], optimizer="sgd", lr=0.1) as s:
        t = s.pushpull(0, grad, out)      # any contiguous buffer: numpy, torch (CPU), bytearray
        s.wait(t)

Every libphub failure is raised as a PhubError (or a subclass) whose str() is libphub's one-line
reason and whose errno is libphub's. Every wait is bounded: by its timeout, and in any case by the
session's dead_ms (the PBox silent) after which libphub fails the session. phub.torch holds the
PyTorch integration (DistributedOptimizer, allreduce_hook).
"""

import ctypes
import errno as _errno
import os
import threading

from . import _lib

__all__ = ["connect", "Session", "PhubError", "PhubTimeoutError", "PhubConnectionError",
           "PhubAuthError", "PhubStaleError", "PRIORITY_DEFAULT", "DTYPES"]

PRIORITY_DEFAULT = _lib.PRIORITY_DEFAULT
DTYPES = tuple(_lib.DTYPES)

_LIB = None
_LIB_LOCK = threading.Lock()


def library():
    """The loaded libphub (ctypes.CDLL), loaded on first use."""
    global _LIB
    with _LIB_LOCK:
        if _LIB is None:
            _LIB = _lib.load()
        return _LIB


class PhubError(OSError):
    """A libphub call failed. errno is libphub's (positive) errno, str() its one-line reason."""

    def __init__(self, err, reason):
        super().__init__(err, reason)
        self.reason = reason

    def __str__(self):
        return self.reason


class PhubTimeoutError(PhubError, TimeoutError):
    """ETIMEDOUT: the PBox did not answer the JOIN, not every rank came, or a wait timed out."""


class PhubConnectionError(PhubError, ConnectionError):
    """ECONNRESET (the PBox fell silent for dead_ms) or EIO (the PBox sent an ERROR, e.g. a
    worker timeout, or came back without the job)."""


class PhubAuthError(PhubError, PermissionError):
    """EACCES: the job exists with another nonce."""


class PhubStaleError(PhubError):
    """ESTALE: the PBox restarted from an older checkpoint; Session.resume() then go back."""


_CLASSES = {
    _errno.ETIMEDOUT: PhubTimeoutError,
    _errno.ECONNRESET: PhubConnectionError,
    _errno.EIO: PhubConnectionError,
    _errno.EACCES: PhubAuthError,
    _errno.ESTALE: PhubStaleError,
}


def _error(err, reason):
    err = abs(err)
    if not reason:
        reason = os.strerror(err)
    return _CLASSES.get(err, PhubError)(err, reason)


def _address(obj, nbytes, writable, dtype_code):
    """(address, object kept alive) of a contiguous buffer of exactly nbytes."""
    if hasattr(obj, "data_ptr") and hasattr(obj, "element_size"):  # a torch tensor
        if obj.device.type != "cpu":
            raise ValueError("phub: tensors must be on the CPU")
        if not obj.is_contiguous():
            raise ValueError("phub: tensors must be contiguous")
        size = obj.numel() * obj.element_size()
        import torch
        want = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16}[dtype_code]
        if obj.dtype != want:
            raise ValueError(f"phub: tensor of {obj.dtype}, the job's dtype is {want}")
        addr = obj.data_ptr()
    elif hasattr(obj, "__array_interface__"):  # numpy
        ai = obj.__array_interface__
        if not obj.flags["C_CONTIGUOUS"]:
            raise ValueError("phub: arrays must be C-contiguous")
        if writable and ai["data"][1]:
            raise ValueError("phub: the output array is read-only")
        size = obj.nbytes
        addr = ai["data"][0]
    else:
        mv = memoryview(obj)
        if not mv.contiguous:
            raise ValueError("phub: buffers must be contiguous")
        size = mv.nbytes
        if writable and mv.readonly:
            raise ValueError("phub: the output buffer is read-only")
        if mv.readonly:  # bytes: a private copy, kept alive with the ticket
            obj = bytearray(mv)
            mv = memoryview(obj)
        addr = ctypes.addressof((ctypes.c_char * size).from_buffer(mv)) if size else 0
    if size != nbytes:
        raise ValueError(f"phub: buffer of {size} bytes, the key needs {nbytes}")
    return addr, obj


class Session:
    """One libphub session (phub_connect); use connect() to make one."""

    def __init__(self, server, job, nonce, rank, world_size, keys, *, port=0, bind=None,
                 dtype="fp32", optimizer="sgd", lr=0.0, momentum=0.0, weight_decay=0.0,
                 betas=(0.0, 0.0), eps=0.0, initial=None, chunk_bytes=0, mtu=0,
                 window_bytes=0, rto_min_ms=0, rto_max_ms=0, dead_ms=0, connect_timeout_ms=0,
                 deterministic=False, checksum=False, elastic=False, auth=None, key=None):
        self._lib = library()
        self._h = None
        if dtype not in _lib.DTYPES:
            raise ValueError(f"phub: dtype must be one of {DTYPES}")
        if isinstance(keys, dict):
            keys = list(keys.items())
        else:
            keys = [k if isinstance(k, tuple) else (i, k) for i, k in enumerate(keys)]
        self.dtype = dtype
        self._dtype_code = _lib.DTYPES[dtype]
        self._esize = _lib.DTYPE_SIZE[self._dtype_code]
        self.keys = {int(kid): int(n) for kid, n in keys}
        self.rank = rank
        self.world_size = world_size
        n = len(keys)
        karr = (_lib.Key * max(n, 1))(*[_lib.Key(int(kid), int(ne)) for kid, ne in keys])
        p = _lib.ConnectParams()
        p.server = server.encode()
        p.server_port = port
        p.bind_addr = bind.encode() if bind else None
        p.job = job.encode()
        p.nonce = nonce
        p.rank = rank
        p.world_size = world_size
        p.dtype = self._dtype_code
        p.optimizer = optimizer.encode()
        p.lr, p.momentum, p.weight_decay = lr, momentum, weight_decay
        p.beta1, p.beta2 = betas
        p.eps = eps
        p.keys = karr
        p.n_keys = n
        keep = []
        if initial is not None:
            ptrs = (ctypes.c_void_p * max(n, 1))()
            for i, ((kid, ne), buf) in enumerate(zip(keys, initial)):
                if buf is not None:
                    addr, obj = _address(buf, ne * self._esize, False, self._dtype_code)
                    ptrs[i] = addr
                    keep.append(obj)
            p.initial = ptrs
        p.chunk_bytes, p.mtu, p.window_bytes = chunk_bytes, mtu, window_bytes
        p.rto_min_ms, p.rto_max_ms, p.dead_ms = rto_min_ms, rto_max_ms, dead_ms
        p.connect_timeout_ms = connect_timeout_ms
        p.flags = ((_lib.CONNECT_F_DETERMINISTIC if deterministic else 0) |
                   (_lib.CONNECT_F_CSUM if checksum else 0) |
                   (_lib.CONNECT_F_ELASTIC if elastic else 0) |
                   # An authenticated session (jobs[].auth "required"); None: PHUB_AUTH=1.
                   (_lib.CONNECT_F_AUTH if (os.environ.get("PHUB_AUTH") == "1"
                                            if auth is None else auth) else 0))
        # auth: the job's 256-bit key (jobs[].key) as 64 hex digits; None: PHUB_KEY, if set.
        if key is not None:
            if isinstance(key, (bytes, bytearray)) and len(key) == 32:
                key = bytes(key).hex()
            p.key = key.encode() if isinstance(key, str) else bytes(key)
        err = ctypes.create_string_buffer(256)
        # ctypes drops the GIL for the call: the JOIN and the initial round (a barrier over
        # every rank, bounded by connect_timeout_ms) do not stall the interpreter's threads.
        h = self._lib.phub_connect(ctypes.byref(p), err, len(err))
        if not h:
            raise _error(ctypes.get_errno() or _errno.EIO, err.value.decode(errors="replace"))
        self._h = h
        self._lock = threading.Lock()
        self._pending = {}          # ticket -> buffers libphub reads or writes until it completes
        self._callbacks = {}        # cookie -> python callable
        self._cookie = 0
        self._tramp = _lib.DONE_FN(self._on_done)

    # ---- internals ----

    def _check_open(self):
        if self._h is None:
            raise PhubError(_errno.EBADF, "phub: the session is closed")

    def _reason(self, rc):
        msg = self._lib.phub_last_error(self._h) if self._h else b""
        return (msg or b"").decode(errors="replace") or os.strerror(-rc)

    def _on_done(self, arg, ticket, status):
        # Runs on libphub's progress thread: keep it short.
        cb = self._callbacks.pop(arg or 0, None)
        if cb is not None:
            try:
                cb(ticket, status)
            except Exception:  # noqa: BLE001 - an exception must not cross into C
                pass

    def _submit(self, fn, key, bufs, priority, callback):
        self._check_open()
        if key not in self.keys:
            raise KeyError(f"phub: unknown key {key}")
        args = []
        keep = []
        nbytes = self.keys[key] * self._esize
        for buf, writable in bufs:
            if buf is None:
                args.append(None)
                continue
            addr, obj = _address(buf, nbytes, writable, self._dtype_code)
            args.append(addr)
            keep.append(obj)
        cookie = None
        cb = _lib.DONE_FN()
        if callback is not None:
            with self._lock:
                self._cookie += 1
                cookie = self._cookie
                self._callbacks[cookie] = callback
            cb = self._tramp
        rc = fn(self._h, key, *args, priority, cb, cookie)
        if rc < 0:
            if cookie is not None:
                self._callbacks.pop(cookie, None)
            raise _error(rc, self._reason(rc) if rc not in (-_errno.EINVAL, -_errno.ENOENT)
                         else f"phub: bad argument for key {key} ({os.strerror(-rc)})")
        with self._lock:
            self._pending[rc] = keep
        return rc

    # ---- the API ----

    def pushpull(self, key, grad, out=None, priority=PRIORITY_DEFAULT, callback=None):
        """Push key's gradient for its next iteration; out (may be grad) gets that iteration's
        model. Buffers must stay untouched until the ticket completes. Returns the ticket.
        callback(ticket, status), if given, runs on libphub's thread when it completes."""
        return self._submit(self._lib.phub_pushpull, key, [(grad, False), (out, True)],
                            priority, callback)

    def push(self, key, grad, priority=PRIORITY_DEFAULT, callback=None):
        """Push the gradient alone; the ticket completes when every segment is acknowledged."""
        return self._submit(self._lib.phub_push, key, [(grad, False)], priority, callback)

    def pull(self, key, out, priority=PRIORITY_DEFAULT, callback=None):
        """The model of the key's latest pushed iteration into out."""
        return self._submit(self._lib.phub_pull, key, [(out, True)], priority, callback)

    def _wait_loop(self, call, timeout):
        # Short waits in a loop so that Ctrl-C (signals) reach Python between them.
        step = 200
        left = None if timeout is None else int(timeout * 1000)
        while True:
            ms = step if left is None else min(step, max(left, 0))
            rc = call(ms)
            if rc != -_errno.ETIMEDOUT:
                return rc
            if left is not None:
                left -= ms
                if left <= 0:
                    return rc

    def wait(self, ticket, timeout=None):
        """Wait for a ticket (timeout in seconds, None: until libphub decides). Raises
        PhubTimeoutError when the timeout passed first (the ticket is still pending)."""
        self._check_open()
        rc = self._wait_loop(lambda ms: self._lib.phub_wait(self._h, ticket, ms), timeout)
        if rc == -_errno.ETIMEDOUT:
            raise _error(rc, f"phub: ticket {ticket} not complete within {timeout} s")
        with self._lock:
            self._pending.pop(ticket, None)
        if rc < 0:
            raise _error(rc, self._reason(rc) if rc != -_errno.EINVAL else
                         f"phub: no such ticket {ticket}")

    def wait_all(self, timeout=None):
        """Wait until nothing is pending (same errors as wait())."""
        self._check_open()
        rc = self._wait_loop(lambda ms: self._lib.phub_wait_all(self._h, ms), timeout)
        if rc == -_errno.ETIMEDOUT:
            raise _error(rc, f"phub: work still pending after {timeout} s")
        if rc in (0, -_errno.ESTALE) or rc < 0:
            with self._lock:
                self._pending.clear()
        if rc < 0:
            raise _error(rc, self._reason(rc))

    def pending(self):
        """Tickets submitted and not yet waited for."""
        with self._lock:
            return len(self._pending)

    def resume(self):
        """After PhubStaleError: accept the rollback; returns the iteration of the next push."""
        self._check_open()
        it = ctypes.c_uint32()
        rc = self._lib.phub_resume(self._h, ctypes.byref(it))
        if rc < 0:
            raise _error(rc, self._reason(rc) if rc != -_errno.EINVAL
                         else "phub: no rollback pending")
        with self._lock:
            self._pending.clear()
        return it.value

    def set_key_hyper(self, key, lr, weight_decay=0.0):
        """The key's lr and weight decay for its next pushes (docs/protocol.md, HYPER)."""
        self._check_open()
        if not hasattr(self._lib, "phub_set_key_hyper"):
            raise PhubError(_errno.ENOSYS, "phub: this libphub has no phub_set_key_hyper")
        hy = _lib.KeyHyper(lr, weight_decay)
        rc = self._lib.phub_set_key_hyper(self._h, key, ctypes.byref(hy))
        if rc < 0:
            raise _error(rc, self._reason(rc) if rc not in (-_errno.EINVAL, -_errno.ENOENT,
                                                            -_errno.EMSGSIZE)
                         else f"phub: set_key_hyper({key}): {os.strerror(-rc)}")

    def stats(self):
        self._check_open()
        st = _lib.Stats()
        self._lib.phub_stats(self._h, ctypes.byref(st))
        return {n: getattr(st, n) for n, _ in _lib.Stats._fields_ if n != "_spare"}

    def info(self):
        self._check_open()
        inf = _lib.Info()
        self._lib.phub_info(self._h, ctypes.byref(inf))
        return {n: getattr(inf, n) for n, _ in _lib.Info._fields_ if n != "_spare"}

    def live_ranks(self):
        """The ranks still in the job (phub_world_size): fewer than world_size once an
        elastic job removed one that died."""
        self._check_open()
        return self._lib.phub_world_size(self._h)

    def rank_removed(self, rank):
        """None while rank is in the job, else the first iteration without it
        (phub_rank_removed)."""
        self._check_open()
        it = ctypes.c_uint32()
        rc = self._lib.phub_rank_removed(self._h, rank, ctypes.byref(it))
        if rc < 0:
            raise ValueError(f"phub: rank_removed({rank}): no such rank")
        return it.value if rc == 1 else None

    def world_changes(self):
        """The membership changes taken so far, in order (phub_world_change): a list of
        (rank, joined, iteration); joined False: out from iteration on, True: back in."""
        self._check_open()
        out, c, i = [], _lib.WorldChange(), 0
        while self._lib.phub_world_change(self._h, i, ctypes.byref(c)) == 0:
            out.append((c.rank, bool(c.joined), c.iteration))
            i += 1
        return out

    def last_error(self):
        return self._reason(0) if self._h else ""

    def close(self):
        """Cancel what is pending, LEAVE (at most 0.5 s), free. Idempotent."""
        h, self._h = self._h, None
        if h:
            self._lib.phub_close(h)
            with self._lock:
                self._pending.clear()
                self._callbacks.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


def connect(server, job, nonce, rank, world_size, keys, **kw):
    """Join the job (phub_connect): returns a Session once every rank joined and the initial
    model is agreed. keys: a list of element counts (key ids 0..n-1), of (key_id, n_elems)
    pairs, or a dict. Keyword arguments: port, bind, dtype ("fp32", "fp16", "bf16"), optimizer
    ("none", "sgd", "momentum", "nesterov", "adam", "adamw"), lr, momentum, weight_decay, betas,
    eps, initial (a list of buffers, one per key; rank 0's win), chunk_bytes, mtu, window_bytes,
    rto_min_ms, rto_max_ms, dead_ms, connect_timeout_ms, deterministic, checksum, elastic,
    auth (True for a job declared with "auth": "required"; None: the environment's
    PHUB_AUTH=1)."""
    return Session(server, job, nonce, rank, world_size, keys, **kw)
