# SPDX-License-Identifier: BSD-3-Clause
"""libphub.so.0 through ctypes: finding the library and the C declarations of phub.h."""

import ctypes
import os

# Element types (enum phub_dtype) and their sizes in bytes.
DTYPES = {"fp32": 0, "fp16": 1, "bf16": 2}
DTYPE_SIZE = {0: 4, 1: 2, 2: 2}

PRIORITY_DEFAULT = -1
CONNECT_F_CSUM = 0x1
CONNECT_F_DETERMINISTIC = 0x2
CONNECT_F_ELASTIC = 0x4
CONNECT_F_NO_OFFLOAD = 0x8
CONNECT_F_AUTH = 0x10


# phub.h grows its structs at the end only, and a zero field means its default: each struct
# below ends with zeroed spare bytes, so that a newer libphub.so.0 reads its new fields as 0
# (connect) or writes them into the spare room (stats, info) instead of past the object.
_SPARE = ("_spare", ctypes.c_uint8 * 256)


class Key(ctypes.Structure):
    _fields_ = [("key_id", ctypes.c_uint32), ("n_elems", ctypes.c_uint32)]


class ConnectParams(ctypes.Structure):
    _fields_ = [
        ("server", ctypes.c_char_p),
        ("server_port", ctypes.c_uint16),
        ("bind_addr", ctypes.c_char_p),
        ("job", ctypes.c_char_p),
        ("nonce", ctypes.c_uint64),
        ("rank", ctypes.c_uint16),
        ("world_size", ctypes.c_uint16),
        ("dtype", ctypes.c_int),
        ("optimizer", ctypes.c_char_p),
        ("lr", ctypes.c_float),
        ("momentum", ctypes.c_float),
        ("weight_decay", ctypes.c_float),
        ("beta1", ctypes.c_float),
        ("beta2", ctypes.c_float),
        ("eps", ctypes.c_float),
        ("keys", ctypes.POINTER(Key)),
        ("n_keys", ctypes.c_uint32),
        ("initial", ctypes.POINTER(ctypes.c_void_p)),
        ("chunk_bytes", ctypes.c_uint32),
        ("mtu", ctypes.c_uint32),
        ("window_bytes", ctypes.c_uint32),
        ("rto_min_ms", ctypes.c_uint32),
        ("rto_max_ms", ctypes.c_uint32),
        ("dead_ms", ctypes.c_uint32),
        ("connect_timeout_ms", ctypes.c_uint32),
        ("flags", ctypes.c_uint),
        ("progress", ctypes.c_void_p),      # phub_connect()'s callback: not used from Python
        ("progress_arg", ctypes.c_void_p),
        ("key", ctypes.c_char_p),           # auth: the job's key, 64 hex digits; None: PHUB_KEY
        _SPARE,
    ]


class Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "tx_datagrams", "tx_bytes", "rx_datagrams", "rx_bytes", "pushes", "retransmits",
        "pulls", "acks", "models", "replays", "rx_dropped", "tx_errors", "pings",
        "ops_completed")] + [(n, ctypes.c_uint32) for n in (
            "srtt_us", "rttvar_us", "rto_us", "window_bytes", "inflight_bytes")] + [
        ("reconnects", ctypes.c_uint64), ("rollbacks", ctypes.c_uint64)] + [
            (n, ctypes.c_uint64) for n in (
                "tx_csum", "rx_csum", "join_acks", "initial_acks", "initial_models",
                "pulls_early", "world_size", "world_changes", "tx_gso_sends", "tx_gso_refused",
                "rx_gro_batches", "rx_gro_refused", "rx_auth_failed")] + [_SPARE]


class WorldChange(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_uint16), ("joined", ctypes.c_uint8),
                ("iteration", ctypes.c_uint32)]


class Info(ctypes.Structure):
    _fields_ = [
        ("job_id", ctypes.c_uint32),
        ("rank", ctypes.c_uint16),
        ("world_size", ctypes.c_uint16),
        ("dtype", ctypes.c_int),
        ("chunk_bytes", ctypes.c_uint32),
        ("segment_elems", ctypes.c_uint32),
        ("n_keys", ctypes.c_uint32),
        ("n_chunks", ctypes.c_uint32),
        ("n_segments", ctypes.c_uint64),
        ("n_elems", ctypes.c_uint64),
        ("n_endpoints", ctypes.c_uint32),
        ("first_iteration", ctypes.c_uint32),
        _SPARE,
    ]


class KeyHyper(ctypes.Structure):
    _fields_ = [("lr", ctypes.c_float), ("weight_decay", ctypes.c_float)]


DONE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)


def _candidates():
    """Where libphub.so.0 may be, most specific first."""
    env = os.environ.get("PHUB_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.environ.get("PHUB_BUILD_DIR")
    if build:
        yield os.path.join(build, "lib", "client", "libphub.so.0")
    # Imported from the source tree (python/phub): the usual build directory beside it.
    yield os.path.join(here, "..", "..", "build", "lib", "client", "libphub.so.0")
    # Installed: the dynamic linker's search path (ld.so.cache, as ldconfig wrote it).
    yield "libphub.so.0"
    # meson install's default prefix, when ldconfig has not been run since.
    for d in ("/usr/local/lib/x86_64-linux-gnu", "/usr/local/lib/aarch64-linux-gnu",
              "/usr/local/lib64", "/usr/local/lib"):
        yield os.path.join(d, "libphub.so.0")


def load():
    """The loaded library with its prototypes declared; OSError naming every place tried."""
    tried = []
    lib = None
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (absent)")
            continue
        try:
            lib = ctypes.CDLL(path, use_errno=True)
            break
        except OSError as e:
            tried.append(f"{path} ({e})")
    if lib is None:
        raise OSError("libphub.so.0 not found; set PHUB_LIBRARY or PHUB_BUILD_DIR; tried: " +
                      "; ".join(tried))
    vp = ctypes.c_void_p
    lib.phub_connect.restype = vp
    lib.phub_connect.argtypes = [ctypes.POINTER(ConnectParams), ctypes.c_char_p, ctypes.c_size_t]
    for name in ("phub_pushpull",):
        getattr(lib, name).restype = ctypes.c_int
        getattr(lib, name).argtypes = [vp, ctypes.c_uint32, vp, vp, ctypes.c_int, DONE_FN, vp]
    lib.phub_push.restype = ctypes.c_int
    lib.phub_push.argtypes = [vp, ctypes.c_uint32, vp, ctypes.c_int, DONE_FN, vp]
    lib.phub_pull.restype = ctypes.c_int
    lib.phub_pull.argtypes = [vp, ctypes.c_uint32, vp, ctypes.c_int, DONE_FN, vp]
    lib.phub_wait.restype = ctypes.c_int
    lib.phub_wait.argtypes = [vp, ctypes.c_int, ctypes.c_int]
    lib.phub_wait_all.restype = ctypes.c_int
    lib.phub_wait_all.argtypes = [vp, ctypes.c_int]
    lib.phub_resume.restype = ctypes.c_int
    lib.phub_resume.argtypes = [vp, ctypes.POINTER(ctypes.c_uint32)]
    lib.phub_last_error.restype = ctypes.c_char_p
    lib.phub_last_error.argtypes = [vp]
    lib.phub_stats.restype = ctypes.c_int
    lib.phub_stats.argtypes = [vp, ctypes.POINTER(Stats)]
    lib.phub_info.restype = ctypes.c_int
    lib.phub_info.argtypes = [vp, ctypes.POINTER(Info)]
    lib.phub_close.restype = None
    lib.phub_close.argtypes = [vp]
    if hasattr(lib, "phub_world_size"):
        lib.phub_world_size.restype = ctypes.c_uint16
        lib.phub_world_size.argtypes = [vp]
        lib.phub_rank_removed.restype = ctypes.c_int
        lib.phub_rank_removed.argtypes = [vp, ctypes.c_uint16, ctypes.POINTER(ctypes.c_uint32)]
        lib.phub_world_change.restype = ctypes.c_int
        lib.phub_world_change.argtypes = [vp, ctypes.c_uint32, ctypes.POINTER(WorldChange)]
    if hasattr(lib, "phub_set_key_hyper"):
        lib.phub_set_key_hyper.restype = ctypes.c_int
        lib.phub_set_key_hyper.argtypes = [vp, ctypes.c_uint32, ctypes.POINTER(KeyHyper)]
    return lib
