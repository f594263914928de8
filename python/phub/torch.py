# SPDX-License-Identifier: BSD-3-Clause
"""PHub for PyTorch: DistributedOptimizer (the PBox runs the optimizer) and allreduce_hook (a DDP
communication hook that averages gradients on the PBox). See docs/pytorch.md.

    import phub.torch as pt
    pt.init()                                   # PHUB_SERVER, PHUB_JOB, PHUB_NONCE, PHUB_RANK...
    opt = pt.DistributedOptimizer(model, "sgd", lr=0.1, momentum=0.9, weight_decay=1e-4)
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()         # each gradient leaves as backward makes it
        opt.step()                              # waits for what is in flight; new weights in
"""

import os
import time

import torch

import phub

__all__ = ["init", "config", "rank", "world_size", "DistributedOptimizer", "allreduce_hook",
           "AllreduceState"]

_OPTIMIZERS = ("none", "sgd", "momentum", "nesterov", "adam", "adamw")
_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}

_config = None


def _env(name, default=None):
    v = os.environ.get(name)
    return default if v is None or v == "" else v


def init(server=None, job=None, nonce=None, rank=None, world_size=None, port=None, **session):
    """Where the PBox is and who this worker is. Each argument left None comes from the
    environment: PHUB_SERVER (IPv4 literal), PHUB_PORT (default 47000), PHUB_JOB, PHUB_NONCE
    (decimal or 0x hex), PHUB_RANK (else RANK, as torchrun sets), PHUB_WORLD_SIZE (else
    WORLD_SIZE). Other keyword arguments (window_bytes, dead_ms, deterministic, mtu, ...) go to
    every phub.connect() made by this module; PHUB_DETERMINISTIC=1 sets deterministic."""
    global _config
    server = server or _env("PHUB_SERVER")
    job = job or _env("PHUB_JOB")
    nonce = nonce if nonce is not None else _env("PHUB_NONCE")
    rank = rank if rank is not None else _env("PHUB_RANK", _env("RANK"))
    world_size = world_size if world_size is not None else _env("PHUB_WORLD_SIZE",
                                                                _env("WORLD_SIZE"))
    port = port if port is not None else int(_env("PHUB_PORT", "0"))
    missing = [n for n, v in (("server (PHUB_SERVER)", server), ("job (PHUB_JOB)", job),
                              ("nonce (PHUB_NONCE)", nonce), ("rank (PHUB_RANK)", rank),
                              ("world_size (PHUB_WORLD_SIZE)", world_size)) if v is None]
    if missing:
        raise ValueError("phub.torch.init: missing " + ", ".join(missing))
    if isinstance(nonce, str):
        nonce = int(nonce, 0)
    if "deterministic" not in session and _env("PHUB_DETERMINISTIC") == "1":
        session["deterministic"] = True
    _config = dict(server=server, job=job, nonce=int(nonce), rank=int(rank),
                   world_size=int(world_size), port=int(port), session=session)
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


def _connect(job_suffix, keys, rank=None, **kw):
    c = config()
    args = dict(c["session"])
    args.update(kw)
    return phub.connect(c["server"], c["job"] + job_suffix, c["nonce"],
                        c["rank"] if rank is None else rank, c["world_size"], keys,
                        port=c["port"], **args)


class DistributedOptimizer(torch.optim.Optimizer):
    """The PBox runs the optimizer ("sgd", "momentum", "nesterov", "adam", "adamw"), or only
    averages ("none", or a torch.optim.Optimizer to run on the worker after the average).

    params: a torch.nn.Module (its parameters, with forward-order priorities recorded on the
    first forward), or parameters / parameter groups as for any torch optimizer. Each group may
    set lr and weight_decay; they may change at every step (an LR scheduler): the new values
    travel with the next push of each parameter and the PBox applies them to that iteration.
    momentum, betas and eps are the job's, fixed at JOIN. rank overrides init()'s (several
    ranks in one process, as the tests run them); other keyword arguments go to phub.connect().

    Every rank must build the optimizer over the same parameters in the same order. The
    constructor joins the job: it returns once every rank has joined, and leaves rank 0's
    initial weights in the parameters of every rank.
    """

    def __init__(self, params, optimizer="sgd", lr=0.01, momentum=0.0, weight_decay=0.0,
                 betas=(0.9, 0.999), eps=1e-8, job_suffix="", record_completions=False,
                 **session):
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
        for p in self._params:
            if p.device.type != "cpu":
                raise ValueError("phub.torch: parameters must be on the CPU")
        self._key = {p: i for i, p in enumerate(self._params)}
        self._group = {p: g for g in self.param_groups for p in g["params"]}
        # P3: priority = position in forward order. Until the first forward tells us,
        # registration order, which is forward order for most models.
        self._prio = {p: i for i, p in enumerate(self._params)}
        g0 = self.param_groups[0]
        initial = [p.detach().contiguous() for p in self._params]
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
        self._out = {p: torch.empty_like(p, memory_format=torch.contiguous_format)
                     for p in self._params}
        # Every rank starts from rank 0's weights (the initial round's model, or the current
        # one when joining a running job), all pulls in flight at once.
        with torch.no_grad():
            for p in self._params:
                self._session.pull(self._key[p], self._out[p])
            self._session.wait_all()
            for p in self._params:
                p.copy_(self._out[p])
        self._tickets = {}          # param -> ticket in flight this step
        self._sent = {}             # param -> the gradient tensor libphub reads
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
        if self._module is not None:
            for m in self._module.modules():
                self._fwd_hooks.append(m.register_forward_pre_hook(self._on_forward))

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
            self._push(p)
        return hook

    def _push(self, p):
        self._finish_forward_order()
        if p in self._tickets:
            raise RuntimeError("phub.torch: a gradient was produced twice before step() "
                               "(gradient accumulation over several backward passes is not "
                               "supported; call step() after each backward)")
        g = p.grad
        if g is None:
            return
        if not g.is_contiguous():
            g = g.contiguous()
        self._synced = False
        if not self._tickets:
            # The first gradient of this backward.
            self.timing["first_push"] = time.perf_counter()
            if self._record:
                self.completion_order = []
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
        for p in self._params:
            if p not in self._tickets and p.grad is not None:
                self._push(p)
        self._synced = True
        self.timing["backward_end"] = time.perf_counter()
        t0 = time.perf_counter()
        s = self._session
        try:
            for p in sorted(self._tickets, key=lambda q: self._prio[q]):
                s.wait(self._tickets[p])
                if self.kind == "none":
                    p.grad.copy_(self._out[p])
                else:
                    p.copy_(self._out[p])
        finally:
            self.timing["step_wait_s"] = time.perf_counter() - t0
            self._tickets.clear()
            self._sent.clear()

    def step(self, closure=None):
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
        if self.kind != "none":
            for p in self._params:
                self._session.pull(self._key[p], self._out[p])
            self._session.wait_all()
            for p in self._params:
                p.copy_(self._out[p])
        return r

    @property
    def session(self):
        return self._session

    def close(self):
        """Leave the job; the hooks stay but push nothing."""
        for h in self._hooks + self._fwd_hooks:
            h.remove()
        self._hooks, self._fwd_hooks = [], []
        self._session.close()

    def __del__(self):
        try:
            self._session.close()
        except Exception:  # noqa: BLE001
            pass


class AllreduceState:
    """State of allreduce_hook: one PHub session (optimizer "none") whose keys are DDP's buckets,
    and a thread that completes the hook's futures. The same on every rank, one per DDP model.
    Keyword arguments go to phub.connect() (window_bytes, deterministic, ...)."""

    def __init__(self, job_suffix="-ddp", **session):
        self.job_suffix = job_suffix
        self.kw = session
        self.session = None
        self.out = {}
        self.iterations = 0
        self._seen = {}
        self._queue = None
        self._thread = None

    def _start(self, sizes, dtype):
        import queue
        import threading
        self.session = _connect(self.job_suffix, [n for n in sizes], dtype=_DTYPES[dtype],
                                optimizer="none", **self.kw)
        self.out = {i: torch.empty(n, dtype=dtype) for i, n in enumerate(sizes)}
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
                buf.copy_(out)
                fut.set_result(buf)
            except Exception as e:  # noqa: BLE001 - handed to DDP through the future
                fut.set_exception(e)

    def close(self):
        if self._queue is not None:
            self._queue.put(None)
            self._thread.join()
            self._queue = None
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
    fut = torch.futures.Future()
    if index not in state.out or state.out[index].numel() != buf.numel():
        fut.set_exception(RuntimeError(f"phub.torch.allreduce_hook: bucket {index} of "
                                       f"{buf.numel()} elements is not in the layout"))
        return fut
    t = state.session.pushpull(index, buf, state.out[index])
    state._queue.put((t, fut, buf, state.out[index]))
    return fut


def _bootstrap(state, bucket, buf, index):
    """Iterations before the PHub session exists: gloo's allreduce, recording bucket sizes."""
    import torch.distributed as dist
    state._seen[index] = (buf.numel(), buf.dtype)
    buf.div_(dist.get_world_size())
    fut = dist.all_reduce(buf, async_op=True).get_future()
    if bucket.is_last():
        state.iterations += 1
        if state.iterations >= 2:
            seen = [state._seen[i] for i in range(len(state._seen))]
            dtypes = {d for _, d in seen}
            if len(dtypes) != 1 or next(iter(dtypes)) not in _DTYPES:
                raise RuntimeError("phub.torch.allreduce_hook: buckets must share one dtype "
                                   "among fp32, fp16, bf16")
            state._start([n for n, _ in seen], next(iter(dtypes)))
        state._seen = {}
    return fut.then(lambda f: f.value()[0])
