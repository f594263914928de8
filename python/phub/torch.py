# SPDX-License-Identifier: BSD-3-Clause
"""PHub for PyTorch: DistributedOptimizer (the PBox runs the optimizer) and allreduce_hook (a DDP
communication hook that averages gradients on the PBox). See docs/pytorch.md.

    import phub.torch as pt
    pt.init()                                   # PHUB_SERVER, and torchrun's RANK, WORLD_SIZE...
    opt = pt.DistributedOptimizer(model, "sgd", lr=0.1, momentum=0.9, weight_decay=1e-4)
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()         # each gradient leaves as backward makes it
        opt.step()                              # waits for what is in flight; new weights in
"""

import contextlib
import errno
import hashlib
import os
import queue
import threading
import time

import torch

import phub

__all__ = ["init", "config", "rank", "world_size", "local_rank", "local_world_size",
           "DistributedOptimizer", "allreduce_hook", "AllreduceState"]

_OPTIMIZERS = ("none", "sgd", "momentum", "nesterov", "adam", "adamw")
_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}

_config = None


def _env(name, default=None):
    v = os.environ.get(name)
    return default if v is None or v == "" else v


def _pick(arg, *names):
    """(value, where it came from): the argument, else the first variable of names set."""
    if arg is not None:
        return arg, "argument"
    for n in names:
        v = _env(n)
        if v is not None:
            return v, n
    return None, None


def _launcher_job():
    """A job name and nonce every rank of one torchrun launch agrees on, from what torchrun
    sets: its rendezvous id when the user gave one (--rdzv_id), else the rendezvous point
    MASTER_ADDR:MASTER_PORT, which no two running launches share. None without torchrun."""
    run_id = _env("TORCHELASTIC_RUN_ID")
    where = None
    if run_id is not None and run_id != "none":
        where = run_id
    elif _env("MASTER_ADDR") is not None and _env("MASTER_PORT") is not None:
        where = f"{_env('MASTER_ADDR')}:{_env('MASTER_PORT')}"
    if where is None:
        return None, None
    name = "torchrun-" + "".join(c if c.isalnum() or c in "._:-" else "-" for c in where)
    name = name[:63]
    digest = hashlib.sha256(("phub " + name).encode()).digest()
    return name, int.from_bytes(digest[:8], "big") | 1


def init(server=None, job=None, nonce=None, rank=None, world_size=None, port=None, **session):
    """Where the PBox is and who this worker is. Each argument left None comes from the
    environment, which torchrun (or python3 -m phub.run) sets for every process it starts:

    server      PHUB_SERVER (the PBox's IPv4 address; the one variable torchrun cannot know)
    port        PHUB_PORT (default 47000)
    rank        PHUB_RANK, else RANK
    world_size  PHUB_WORLD_SIZE, else WORLD_SIZE
    job         PHUB_JOB, else one named after the torchrun launch (TORCHELASTIC_RUN_ID, else
                MASTER_ADDR:MASTER_PORT); a job declared in the PBox's config (jobs[].name)
                needs PHUB_JOB
    nonce       PHUB_NONCE (decimal or 0x hex), else one derived from that launch's name (not
                a secret: set PHUB_NONCE to keep others out; a declared job needs jobs[].nonce)

    LOCAL_RANK and LOCAL_WORLD_SIZE are kept for local_rank() and local_world_size(). Other
    keyword arguments (window_bytes, dead_ms, deterministic, mtu, ...) go to every
    phub.connect() made by this module; PHUB_DETERMINISTIC=1 sets deterministic."""
    global _config
    server, server_from = _pick(server, "PHUB_SERVER")
    rank, rank_from = _pick(rank, "PHUB_RANK", "RANK")
    world_size, world_from = _pick(world_size, "PHUB_WORLD_SIZE", "WORLD_SIZE")
    job, job_from = _pick(job, "PHUB_JOB")
    nonce, nonce_from = _pick(nonce, "PHUB_NONCE")
    port = port if port is not None else int(_env("PHUB_PORT", "0"))
    if job is None or nonce is None:
        auto_job, auto_nonce = _launcher_job()
        if job is None and auto_job is not None:
            job, job_from = auto_job, "the torchrun launch"
        if nonce is None and auto_nonce is not None and job == auto_job:
            nonce, nonce_from = auto_nonce, "the torchrun launch"
    missing = [n for n, v in (("server (PHUB_SERVER)", server), ("job (PHUB_JOB)", job),
                              ("nonce (PHUB_NONCE)", nonce),
                              ("rank (PHUB_RANK or RANK)", rank),
                              ("world_size (PHUB_WORLD_SIZE or WORLD_SIZE)", world_size))
               if v is None]
    if missing:
        raise ValueError("phub.torch.init: missing " + ", ".join(missing) +
                         " (torchrun sets RANK and WORLD_SIZE; PHUB_SERVER names the PBox)")
    if isinstance(nonce, str):
        try:
            nonce = int(nonce, 0)
        except ValueError:
            raise ValueError(f"phub.torch.init: nonce {nonce!r} from {nonce_from} is not a "
                             "decimal or 0x hex number") from None
    try:
        rank, world_size = int(rank), int(world_size)
    except ValueError:
        raise ValueError(f"phub.torch.init: rank {rank!r} ({rank_from}) and world size "
                         f"{world_size!r} ({world_from}) must be integers") from None
    if not 0 <= rank < world_size:
        raise ValueError(f"phub.torch.init: rank {rank} ({rank_from}) is not below the world "
                         f"size {world_size} ({world_from})")
    if "deterministic" not in session and _env("PHUB_DETERMINISTIC") == "1":
        session["deterministic"] = True
    _config = dict(server=server, job=job, nonce=int(nonce), rank=rank,
                   world_size=world_size, port=int(port), session=session,
                   local_rank=int(_env("LOCAL_RANK", "0")),
                   local_world_size=int(_env("LOCAL_WORLD_SIZE", "1")),
                   sources=dict(server=server_from, job=job_from, nonce=nonce_from,
                                rank=rank_from, world_size=world_from))
    return dict(_config)


def config():
    """What init() set; raises when it has not been called."""
    if _config is None:
        raise RuntimeError("phub.torch: call phub.torch.init() first")
    return _config


def rank():
    return config()["rank"]


def world_size():
    return config()["world_size"]


def local_rank():
    """This process's rank on its host (LOCAL_RANK, as torchrun sets; 0 without it)."""
    return config()["local_rank"]


def local_world_size():
    """Processes of the job on this host (LOCAL_WORLD_SIZE; 1 without it)."""
    return config()["local_world_size"]


def _refusal(e, job):
    """The PBox's refusal of a JOIN with where each value it checks came from: the PBox names
    its config key (jobs[i].workers), this names the variable the worker took."""
    c = config()
    src = c["sources"]
    told = (f"phub.torch: the PBox refused to join job {job!r}: {e}\n"
            f"  this worker: job {job!r} from {src['job']}, rank {c['rank']} from "
            f"{src['rank']}, world size {c['world_size']} from {src['world_size']}, "
            f"nonce from {src['nonce']}.\n"
            "  A job declared in the PBox's config is joined with its jobs[].name (PHUB_JOB), "
            "jobs[].nonce (PHUB_NONCE) and jobs[].workers ranks (WORLD_SIZE: nodes x "
            "processes per node); see docs/pytorch.md, 'Jobs and the PBox's config'.")
    return type(e)(e.errno, told)


def _connect(job_suffix, keys, rank=None, **kw):
    c = config()
    args = dict(c["session"])
    args.update(kw)
    job = c["job"] + job_suffix
    try:
        return phub.connect(c["server"], job, c["nonce"],
                            c["rank"] if rank is None else rank, c["world_size"], keys,
                            port=c["port"], **args)
    except phub.PhubError as e:
        # An ERROR answering the JOIN (libphub: "PBox ... refused rank R of job 'J': ...").
        if e.errno in (errno.EACCES, errno.EBUSY, errno.ENOMEM, errno.EPROTO) and \
                "refused" in str(e):
            raise _refusal(e, job) from e
        raise


class _NoStream:
    """The CPU's stand-in for a CUDA stream and a CUDA event, under forced staging: a copy
    between CPU tensors is complete when copy_() returns, so there is nothing to order or wait
    for."""

    def wait_event(self, _event):
        pass

    def wait_stream(self, _stream):
        pass

    def record(self, _stream=None):
        pass

    def synchronize(self):
        pass


class _Device:
    """The lowest level of staging, the only place that differs between devices: streams,
    events and host buffers. CUDA: torch.cuda streams and events, pinned host buffers and
    asynchronous copies. Any other device: synchronous copies into ordinary host buffers,
    with no-op streams and events; on the CPU (forced staging) the code above it runs exactly
    as on a GPU."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.non_blocking = self.cuda

    def stream(self):
        return torch.cuda.Stream(self.device) if self.cuda else _NoStream()

    def event(self, blocking=False):
        # blocking: a thread that waits for it sleeps instead of spinning on a core.
        return torch.cuda.Event(blocking=blocking) if self.cuda else _NoStream()

    def current_stream(self):
        return torch.cuda.current_stream(self.device) if self.cuda else _NoStream()

    def use(self, stream):
        return torch.cuda.stream(stream) if self.cuda else contextlib.nullcontext()

    def host_buffer(self, shape, dtype):
        return torch.empty(shape, dtype=dtype, pin_memory=self.cuda)

    def keep_alive(self, tensor, stream):
        # The caching allocator must not hand the tensor's memory to the compute stream
        # while the side stream still reads it (zero_grad(set_to_none=True) frees .grad).
        if self.cuda:
            tensor.record_stream(stream)

    def future(self):
        return torch.futures.Future(devices=[self.device]) if self.cuda else \
            torch.futures.Future()


class _Staging:
    """Tensors of a device other than the CPU through host buffers, which libphub reads and
    writes. to_host() copies a gradient on a side stream once the work queued so far on the
    current stream (the backward that made it) is done, so that the copy runs while backward
    goes on; a thread waits for each copy's event and then runs what was to follow it (the
    push), in the order of the copies. to_device() copies results back on another stream,
    and fence() makes the current stream (the next forward) wait for them."""

    def __init__(self, device, name):
        self.dev = _Device(device)
        self.d2h = self.dev.stream()
        self.h2d = self.dev.stream()
        self._queue = queue.Queue()
        self._error = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def to_host(self, src, dst, then):
        ready = self.dev.event()
        ready.record(self.dev.current_stream())
        self.d2h.wait_event(ready)
        with self.dev.use(self.d2h):
            dst.copy_(src, non_blocking=self.dev.non_blocking)
            done = self.dev.event(blocking=True)
            done.record(self.d2h)
        self.dev.keep_alive(src, self.d2h)
        self._queue.put((done, then))

    def _run(self):
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                done, then = item
                if self._error is None:
                    done.synchronize()          # drops the GIL on CUDA
                    then()
            except BaseException as e:  # noqa: BLE001 - raised again by drain()
                self._error = e
            finally:
                self._queue.task_done()

    def drain(self):
        """Wait until every copy is done and what followed it ran; raise what it raised."""
        self._queue.join()
        e, self._error = self._error, None
        if e is not None:
            raise e

    def begin_to_device(self):
        # Backward may still read the parameters about to be overwritten.
        self.h2d.wait_stream(self.dev.current_stream())

    def to_device(self, src, dst):
        with self.dev.use(self.h2d):
            dst.copy_(src, non_blocking=self.dev.non_blocking)

    def fence(self):
        self.dev.current_stream().wait_stream(self.h2d)

    def close(self):
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None


def _staging_wanted(device, staging, what):
    """Whether tensors on device go through host buffers: always off the CPU; on the CPU
    when forced (staging=True or PHUB_FORCE_STAGING=1, to run a GPU's code path without one)."""
    if staging is None:
        return device.type != "cpu" or _env("PHUB_FORCE_STAGING") == "1"
    if not staging and device.type != "cpu":
        raise ValueError(f"phub.torch: {what} on {device} need staging (staging=False is for "
                         "CPU tensors)")
    return bool(staging)


def _fp16_autocast():
    return (torch.is_autocast_enabled() and torch.get_autocast_gpu_dtype() == torch.float16) or \
        (torch.is_autocast_cpu_enabled() and torch.get_autocast_cpu_dtype() == torch.float16)


_FP16_REFUSED = ("phub.torch: fp16 mixed precision (autocast to float16, GradScaler) is not "
                 "supported: each gradient leaves for the PBox during backward, still "
                 "multiplied by the loss scale, and a step whose sum is not finite cannot be "
                 "skipped on the PBox. Use torch.autocast(..., dtype=torch.bfloat16) without a "
                 "GradScaler (docs/pytorch.md, mixed precision)")


class DistributedOptimizer(torch.optim.Optimizer):
    """The PBox runs the optimizer ("sgd", "momentum", "nesterov", "adam", "adamw"), or only
    averages ("none", or a torch.optim.Optimizer to run on the worker after the average).

    params: a torch.nn.Module (its parameters, with forward-order priorities recorded on the
    first forward), or parameters / parameter groups as for any torch optimizer. Each group may
    set lr and weight_decay; they may change at every step (an LR scheduler): the new values
    travel with the next push of each parameter and the PBox applies them to that iteration.
    momentum, betas and eps are the job's, fixed at JOIN. rank overrides init()'s (several
    ranks in one process, as the tests run them); other keyword arguments go to phub.connect().

    backward_passes_per_step=K: gradients accumulate in .grad over K backward passes and leave
    during the K-th (divide the loss by K for the mean, as in any PyTorch accumulation);
    no_sync() is the same for the passes made inside it. Parameters on a GPU (any device but
    the CPU) go through host buffers (staging); staging=True, or PHUB_FORCE_STAGING=1, takes
    that path with CPU parameters too. fp16 autocast and GradScaler are refused.

    Every rank must build the optimizer over the same parameters in the same order. The
    constructor joins the job: it returns once every rank has joined, and leaves rank 0's
    initial weights in the parameters of every rank.
    """

    def __init__(self, params, optimizer="sgd", lr=0.01, momentum=0.0, weight_decay=0.0,
                 betas=(0.9, 0.999), eps=1e-8, job_suffix="", record_completions=False,
                 backward_passes_per_step=1, staging=None, **session):
        self._module = params if isinstance(params, torch.nn.Module) else None
        if self._module is not None:
            params = self._module.parameters()
        self._local = None
        if isinstance(optimizer, torch.optim.Optimizer):
            self._local = optimizer
            optimizer = "none"
        if optimizer not in _OPTIMIZERS:
            raise ValueError(f"phub.torch: optimizer must be one of {_OPTIMIZERS} or a "
                             "torch.optim.Optimizer")
        self.kind = optimizer
        defaults = dict(lr=lr, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self._params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        if not self._params:
            raise ValueError("phub.torch: no parameter requires a gradient")
        dtypes = {p.dtype for p in self._params}
        if len(dtypes) != 1 or next(iter(dtypes)) not in _DTYPES:
            raise ValueError(f"phub.torch: every parameter must have one dtype among "
                             f"fp32, fp16, bf16 (found {sorted(map(str, dtypes))})")
        self.dtype = _DTYPES[next(iter(dtypes))]
        devices = {p.device for p in self._params}
        if len(devices) != 1:
            raise ValueError(f"phub.torch: every parameter must be on one device (found "
                             f"{sorted(map(str, devices))})")
        self.device = next(iter(devices))
        if int(backward_passes_per_step) < 1:
            raise ValueError("phub.torch: backward_passes_per_step must be 1 or more")
        self.backward_passes_per_step = int(backward_passes_per_step)
        self._staging = None
        if _staging_wanted(self.device, staging, "parameters"):
            self._staging = _Staging(self.device, "phub-stage")
        self._key = {p: i for i, p in enumerate(self._params)}
        self._group = {p: g for g in self.param_groups for p in g["params"]}
        # P3: priority = position in forward order. Until the first forward tells us,
        # registration order, which is forward order for most models.
        self._prio = {p: i for i, p in enumerate(self._params)}
        g0 = self.param_groups[0]
        initial = [p.detach().cpu().contiguous() for p in self._params]
        self._session = _connect(job_suffix, [p.numel() for p in self._params],
                                 dtype=self.dtype, optimizer=self.kind,
                                 lr=g0["lr"] if self.kind != "none" else 0.0,
                                 momentum=momentum if self.kind in ("momentum", "nesterov")
                                 else 0.0,
                                 weight_decay=g0["weight_decay"] if self.kind != "none" else 0.0,
                                 betas=betas if self.kind in ("adam", "adamw") else (0.0, 0.0),
                                 eps=eps if self.kind in ("adam", "adamw") else 0.0,
                                 initial=initial, **session)
        self._join_hyper = (float(g0["lr"]), float(g0["weight_decay"]))
        self._sent_hyper = {p: self._join_hyper for p in self._params}
        # What libphub writes the models (or mean gradients) into. Staged: one host buffer per
        # parameter, which carries the gradient out and the model back (pushpull in place).
        if self._staging is not None:
            self._out = {p: self._staging.dev.host_buffer(p.shape, p.dtype) for p in self._params}
        else:
            self._out = {p: torch.empty_like(p, memory_format=torch.contiguous_format)
                         for p in self._params}
        # Every rank starts from rank 0's weights (the initial round's model, or the current
        # one when joining a running job), all pulls in flight at once.
        self._pull_all()
        self._tickets = {}          # param -> ticket in flight this step
        self._sent = {}             # param -> the gradient tensor libphub reads
        self._queued = set()        # params whose gradient left (or is on its way) this step
        self._passes = {}           # param -> backward passes since the last step
        self._no_sync = False
        self.push_order = []        # params in the order their gradients left (this backward)
        # With record_completions, the params in the order their models came back (tests,
        # diagnostics: the callback takes the GIL on libphub's thread, which costs time).
        self.completion_order = []
        self._record = record_completions
        self.timing = {"backward_end": None, "first_push": None, "step_wait_s": 0.0}
        self._hooks = []
        self._grad_accs = []
        for p in self._params:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self._hooks.append(acc.register_hook(self._make_hook(p)))
            self._grad_accs.append(acc)
        self._fwd_hooks = []
        self._fwd_seen = []
        self._fwd_ids = set()
        self._synced = False
        self._amp_hook = None
        if self._module is not None:
            for m in self._module.modules():
                self._fwd_hooks.append(m.register_forward_pre_hook(self._on_forward))
            self._amp_hook = self._module.register_forward_pre_hook(self._check_amp)

    # GradScaler.step(opt) calls opt.step(grad_scaler=scaler), where it is refused.
    _step_supports_amp_scaling = True

    def _check_amp(self, _module, _inputs):
        # Before the forward whose gradients would leave scaled, not after.
        if _fp16_autocast():
            raise RuntimeError(_FP16_REFUSED)

    # ---- priorities ----

    def _on_forward(self, module, _inputs):
        # Forward pre-hooks run as modules are entered: their own parameters in forward order.
        for p in module.parameters(recurse=False):
            if p in self._key and id(p) not in self._fwd_ids:
                self._fwd_ids.add(id(p))
                self._fwd_seen.append(p)

    def _finish_forward_order(self):
        # At the first gradient the first forward is over: priorities from what it saw, then
        # the parameters it did not use in registration order; the pre-hooks go.
        if not self._fwd_hooks:
            return
        for h in self._fwd_hooks:
            h.remove()
        self._fwd_hooks = []
        rest = [p for p in self._params if id(p) not in self._fwd_ids]
        for i, p in enumerate(self._fwd_seen + rest):
            self._prio[p] = i

    def key_of(self, p):
        """The PHub key of parameter p (its index among the optimizer's parameters)."""
        return self._key[p]

    def priority(self, p):
        """The P3 priority of parameter p: its position in forward order (0 first)."""
        return self._prio[p]

    # ---- the data path ----

    def _make_hook(self, p):
        def hook(*_unused):
            self._on_grad(p)
        return hook

    def _on_grad(self, p):
        # AccumulateGrad has added this backward's gradient into p.grad.
        self._finish_forward_order()
        if p.grad is None:
            return
        self._synced = False
        n = self._passes.get(p, 0) + 1
        self._passes[p] = n
        if self._no_sync or n < self.backward_passes_per_step:
            return
        self._send(p)

    def _send(self, p):
        if p in self._queued:
            raise RuntimeError(f"phub.torch: more backward passes than backward_passes_per_step="
                               f"{self.backward_passes_per_step} before step() (a gradient "
                               "left already; call step() after the K-th backward)")
        g = p.grad
        if not g.is_contiguous():
            g = g.contiguous()
        if not self._queued:
            # The first gradient of this step.
            self.timing["first_push"] = time.perf_counter()
            if self._record:
                self.completion_order = []
        self._queued.add(p)
        if self._staging is None:
            self._push(p, g)
        else:
            # The copy to the host runs on a side stream while backward goes on; the staging
            # thread pushes the key once its copy is done.
            h = self._out[p]
            self._staging.to_host(g, h, lambda p=p, h=h: self._push(p, h))

    def _push(self, p, g):
        s = self._session
        key = self._key[p]
        if self.kind != "none":
            group = self._group[p]
            hyper = (float(group["lr"]), float(group["weight_decay"]))
            if hyper != self._sent_hyper[p]:
                s.set_key_hyper(key, hyper[0], hyper[1])
                self._sent_hyper[p] = hyper
        self._sent[p] = g
        cb = None
        if self._record:
            def cb(_ticket, status, p=p):
                if status == 0:
                    self.completion_order.append(p)
        self._tickets[p] = s.pushpull(key, g, self._out[p], priority=self._prio[p],
                                      callback=cb)
        self.push_order.append(p)

    @torch.no_grad()
    def synchronize(self):
        """Push the gradients no hook pushed (set by hand), then wait for every model (or mean
        gradient) in flight and put it in place: weights into the parameters, or with "none"
        the mean gradient into .grad. Called by step()."""
        st = self._staging
        t0 = None
        try:
            for p in self._params:
                if p not in self._queued and p.grad is not None:
                    self._send(p)
            self._synced = True
            self.timing["backward_end"] = time.perf_counter()
            t0 = time.perf_counter()
            if st is not None:
                st.drain()
                st.begin_to_device()
            s = self._session
            for p in sorted(self._tickets, key=lambda q: self._prio[q]):
                s.wait(self._tickets[p])
                dst = p.grad if self.kind == "none" else p
                if st is None:
                    dst.copy_(self._out[p])
                else:
                    st.to_device(self._out[p], dst)
        finally:
            if st is not None:
                st.fence()
            if t0 is not None:
                self.timing["step_wait_s"] = time.perf_counter() - t0
            self._tickets.clear()
            self._sent.clear()
            self._queued.clear()
            self._passes.clear()

    @torch.no_grad()
    def _pull_all(self):
        for p in self._params:
            self._session.pull(self._key[p], self._out[p])
        self._session.wait_all()
        if self._staging is None:
            for p in self._params:
                p.copy_(self._out[p])
        else:
            self._staging.begin_to_device()
            for p in self._params:
                self._staging.to_device(self._out[p], p)
            self._staging.fence()

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate their gradients in .grad and push nothing; the
        first backward after it (or step()) pushes the sum, as with DDP's no_sync()."""
        prev, self._no_sync = self._no_sync, True
        try:
            yield
        finally:
            self._no_sync = prev

    def step(self, closure=None, grad_scaler=None):
        if grad_scaler is not None:
            raise RuntimeError(_FP16_REFUSED)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # A synchronize() of the caller's (to clip the mean gradient before a local
        # optimizer, say) already did the work of this step.
        if not self._synced:
            self.synchronize()
        self.push_order_last = list(self.push_order)
        self.push_order = []
        if self._local is not None:
            self._local.step()
        return loss

    def zero_grad(self, set_to_none=False):
        if self._local is not None:
            self._local.zero_grad(set_to_none=set_to_none)
        super().zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def resume(self):
        """After step() raised phub.PhubStaleError (the PBox restarted from a checkpoint older
        than what this worker had seen): accept the rollback, put the checkpoint's weights in
        the parameters (PBox-side optimizers) and return the iteration the next step pushes.
        The caller goes back to that iteration's batch. Every rank does the same."""
        r = self._session.resume()
        self._tickets.clear()
        self._sent.clear()
        self._queued.clear()
        self._passes.clear()
        if self.kind != "none":
            self._pull_all()
        return r

    @property
    def session(self):
        return self._session

    def close(self):
        """Leave the job; the hooks stay but push nothing."""
        for h in self._hooks + self._fwd_hooks + ([self._amp_hook] if self._amp_hook else []):
            h.remove()
        self._hooks, self._fwd_hooks, self._amp_hook = [], [], None
        if self._staging is not None:
            self._staging.close()
        self._session.close()

    def __del__(self):
        try:
            if self._staging is not None:
                self._staging.close()
            self._session.close()
        except Exception:  # noqa: BLE001
            pass


class AllreduceState:
    """State of allreduce_hook: one PHub session (optimizer "none") whose keys are DDP's buckets,
    and a thread that completes the hook's futures. The same on every rank, one per DDP model.
    Buckets on a GPU go through host buffers (staging, as DistributedOptimizer's; staging=True
    or PHUB_FORCE_STAGING=1 forces it on the CPU). Keyword arguments go to phub.connect()
    (window_bytes, deterministic, ...)."""

    def __init__(self, job_suffix="-ddp", staging=None, **session):
        self.job_suffix = job_suffix
        self.staging = staging
        self._stage = None
        self.kw = session
        self.session = None
        self.out = {}
        self.iterations = 0
        self._seen = {}
        self._queue = None
        self._thread = None

    def _start(self, sizes, dtype, device):
        if _staging_wanted(device, self.staging, "DDP buckets"):
            self._stage = _Staging(device, "phub-ddp-stage")
        self.session = _connect(self.job_suffix, [n for n in sizes], dtype=_DTYPES[dtype],
                                optimizer="none", **self.kw)
        # Staged: the host buffer carries the bucket out and its mean back (pushpull in place).
        self.out = {i: self._stage.dev.host_buffer(n, dtype)
                    if self._stage is not None else torch.empty(n, dtype=dtype)
                    for i, n in enumerate(sizes)}
        self._queue = queue.Queue()
        self._thread = threading.Thread(target=self._complete, name="phub-ddp", daemon=True)
        self._thread.start()

    def _complete(self):
        # Waits tickets in submission order (libphub waits drop the GIL) and completes each
        # future here, so that DDP's callbacks never run on libphub's progress thread.
        while True:
            item = self._queue.get()
            if item is None:
                return
            ticket, fut, buf, out = item
            try:
                self.session.wait(ticket)
                if self._stage is None:
                    buf.copy_(out)
                    fut.set_result(buf)
                else:
                    # The future records the copy stream's work: DDP's stream waits for it.
                    # Nothing else touches the bucket until the future completes.
                    st = self._stage
                    with st.dev.use(st.h2d):
                        st.to_device(out, buf)
                        fut.set_result(buf)
            except Exception as e:  # noqa: BLE001 - handed to DDP through the future
                fut.set_exception(e)

    def _push_staged(self, index, fut, buf):
        # On the staging thread, once the bucket's copy to the host is done.
        out = self.out[index]
        try:
            t = self.session.pushpull(index, out, out)
        except Exception as e:  # noqa: BLE001 - handed to DDP through the future
            fut.set_exception(e)
            return
        self._queue.put((t, fut, buf, out))

    def close(self):
        if self._queue is not None:
            self._queue.put(None)
            self._thread.join()
            self._queue = None
        if self._stage is not None:
            self._stage.close()
            self._stage = None
        if self.session is not None:
            self.session.close()
            self.session = None


def allreduce_hook(state, bucket):
    """DDP communication hook: average the bucket's gradients on the PBox (optimizer "none").

        dist.init_process_group("gloo", ...)        # DDP needs one; PHub carries the gradients
        ddp = DistributedDataParallel(model)
        state = phub.torch.AllreduceState()
        ddp.register_comm_hook(state, phub.torch.allreduce_hook)

    DDP rebuilds its buckets after its first iteration, so the first two backward passes
    average through the process group while the hook records the bucket sizes; from the third
    on, one PHub key per bucket carries them. Returns a torch.futures.Future that completes
    with the mean in the bucket's buffer."""
    buf = bucket.buffer()
    index = bucket.index()
    if state.session is None:
        return _bootstrap(state, bucket, buf, index)
    fut = torch.futures.Future() if state._stage is None else state._stage.dev.future()
    if index not in state.out or state.out[index].numel() != buf.numel():
        fut.set_exception(RuntimeError(f"phub.torch.allreduce_hook: bucket {index} of "
                                       f"{buf.numel()} elements is not in the layout"))
        return fut
    if state._stage is not None:
        state._stage.to_host(buf, state.out[index],
                             lambda: state._push_staged(index, fut, buf))
        return fut
    t = state.session.pushpull(index, buf, state.out[index])
    state._queue.put((t, fut, buf, state.out[index]))
    return fut


def _bootstrap(state, bucket, buf, index):
    """Iterations before the PHub session exists: gloo's allreduce, recording bucket sizes."""
    import torch.distributed as dist
    state._seen[index] = (buf.numel(), buf.dtype, buf.device)
    buf.div_(dist.get_world_size())
    fut = dist.all_reduce(buf, async_op=True).get_future()
    if bucket.is_last():
        state.iterations += 1
        if state.iterations >= 2:
            seen = [state._seen[i] for i in range(len(state._seen))]
            dtypes = {d for _, d, _ in seen}
            if len(dtypes) != 1 or next(iter(dtypes)) not in _DTYPES:
                raise RuntimeError("phub.torch.allreduce_hook: buckets must share one dtype "
                                   "among fp32, fp16, bf16")
            devices = {v for _, _, v in seen}
            if len(devices) != 1:
                raise RuntimeError("phub.torch.allreduce_hook: buckets must be on one device")
            state._start([n for n, _, _ in seen], next(iter(dtypes)), next(iter(devices)))
        state._seen = {}
    return fut.then(lambda f: f.value()[0])
