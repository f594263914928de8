# SPDX-License-Identifier: BSD-3-Clause
"""netem's grammar, as scripts/virtual-rack honours it on a kernel without sch_netem.

The rack's fallback (a tc BPF program for loss, duplicate and corrupt, tbf for rate, a delay
line for delay and reorder) takes the same arguments as `tc qdisc ... netem`; plan() reads
them into the numbers the BPF program is compiled with, and refuses what the fallback cannot
do with a message that says why. The plumbing (tc, clang, the delay line) stays in bash.
"""

import re

PPM = 1000000
_NUMBER = r"([0-9]+(\.[0-9]*)?|\.[0-9]+)"
_PERCENT = re.compile(r"^" + _NUMBER + r"%?$")
_TIME = re.compile(r"^" + _NUMBER + r"(s|sec|secs|ms|msec|msecs|us|usec|usecs)?$")
_RATE = re.compile(r"^[0-9]+(\.[0-9]+)?[A-Za-z]*$")
_UNIT_US = {"s": 1000000, "sec": 1000000, "secs": 1000000,
            "ms": 1000, "msec": 1000, "msecs": 1000}


class NetemError(ValueError):
    """An argument list the fallback cannot honour; str() is the message for the user."""


def percent_to_ppm(what, value):
    """'1%', '0.5%' or '2' (percent) in parts per million, rounded to nearest."""
    m = _PERCENT.match(value or "")
    if m is None:
        raise NetemError("%s '%s': expected a percentage" % (what, value or ""))
    p = float(m.group(1))
    if p > 100:
        raise NetemError("%s '%s': at most 100%%" % (what, value))
    return int(p * 10000 + 0.5)


def time_to_us(what, value):
    """A netem time ('10ms', '250us', '1.5ms', '1s'; bare: microseconds, as tc reads it) in
    whole microseconds, at most 60 s."""
    m = _TIME.match(value or "")
    if m is None:
        raise NetemError("%s '%s': expected a time such as 10ms or 250us" % (what, value or ""))
    us = float(m.group(1)) * _UNIT_US.get(m.group(3) or "", 1)
    if us > 60000000:
        raise NetemError("%s '%s': at most 60 s" % (what, value))
    return int(us + 0.5)


def _is_number(token):
    return token is not None and re.match(r"^([0-9]|\.[0-9])", token) is not None


def plan(args):
    """The fallback's settings for netem arguments, a dict: loss, dup, corrupt (ppm), ge (the
    Gilbert-Elliott p, r, 1-h, 1-k in ppm, or None), rate (tbf's, or None), delay_us and
    jitter_us (None without delay), reorder (ppm sent at once, or None) and delay_ppm (ppm
    of the frames the delay line holds)."""
    p = {"loss": 0, "dup": 0, "corrupt": 0, "ge": None, "rate": None, "delay_us": None,
         "jitter_us": 0, "reorder": None, "delay_ppm": 0}
    args = list(args)
    i = 0

    def at(k):
        return args[k] if k < len(args) else None

    while i < len(args):
        word = args[i]
        if word in ("loss", "drop") and at(i + 1) == "gemodel":
            gp = percent_to_ppm("loss gemodel p", at(i + 2))
            # netem's defaults: r = 1 - p, 1-h = 1, 1-k = 0.
            ge = [gp, PPM - gp, PPM, 0]
            i += 3
            for k in range(1, 4):
                if not _is_number(at(i)):
                    break
                ge[k] = percent_to_ppm("loss gemodel parameter %d" % (k + 1), at(i))
                i += 1
            if ge[0] <= 0:
                raise NetemError("loss gemodel: p must be above 0%")
            p["ge"] = ge
        elif word in ("loss", "drop"):
            if at(i + 1) == "random":
                i += 1
            p["loss"] = percent_to_ppm("loss", at(i + 1))
            i += 2
        elif word == "duplicate":
            p["dup"] = percent_to_ppm("duplicate", at(i + 1))
            i += 2
        elif word == "corrupt":
            p["corrupt"] = percent_to_ppm("corrupt", at(i + 1))
            i += 2
        elif word == "rate":
            rate = at(i + 1)
            if not rate:
                raise NetemError("netem rate: no rate given")
            if _RATE.match(rate) is None:
                raise NetemError("netem rate '%s': expected a rate such as 100mbit" % rate)
            p["rate"] = rate
            i += 2
        elif word == "delay":
            p["delay_us"] = time_to_us("delay", at(i + 1))
            i += 2
            if _is_number(at(i)):
                p["jitter_us"] = time_to_us("delay jitter", at(i))
                i += 1
                if _is_number(at(i)):
                    raise NetemError("delay correlation needs sch_netem; without it the "
                                     "jitter is uniform and uncorrelated")
        elif word == "reorder":
            p["reorder"] = percent_to_ppm("reorder", at(i + 1))
            i += 2
            if _is_number(at(i)):
                raise NetemError("reorder correlation needs sch_netem")
        else:
            raise NetemError("netem '%s' needs sch_netem, which this kernel lacks; without it "
                             "the rack offers loss, duplicate, corrupt (BPF), delay with jitter "
                             "and reorder (BPF and a delay line) and rate (tbf)" % word)
    if p["reorder"] is not None and p["delay_us"] is None:
        raise NetemError('reorder needs a delay (as with netem): e.g. "delay 2ms reorder 90%"')
    if p["delay_us"] is not None:
        # netem's reorder P%: P% of the frames go at once, the others are delayed.
        p["delay_ppm"] = PPM - (p["reorder"] or 0)
    return p


def shell(p):
    """plan()'s result as shell assignments for virtual-rack (every value checked above)."""
    ge = p["ge"] or ["", "", "", ""]
    pairs = [("loss", p["loss"]), ("dup", p["dup"]), ("corrupt", p["corrupt"]),
             ("rate", p["rate"] or ""),
             ("ge", "-ge%d-%d-%d-%d" % tuple(p["ge"]) if p["ge"] else ""),
             ("ge_p", ge[0]), ("ge_r", ge[1]), ("ge_loss_bad", ge[2]),
             ("ge_loss_good", ge[3]),
             ("delay_us", "" if p["delay_us"] is None else p["delay_us"]),
             ("jitter_us", p["jitter_us"]), ("delay_ppm", p["delay_ppm"])]
    return "\n".join("%s=%s" % kv for kv in pairs)


_RACK_PREFIX = re.compile(r"^r([0-9]+):(.+)$")
_WORKER_PREFIX = re.compile(r"^w([0-9]+):(.+)$")
_DIR_PREFIX = re.compile(r"^(tx|rx|both):(.+)$")


def _rack_prefix(option, spec, racks):
    """'r<Q>:REST' -> ([Q], REST) when the rack has several racks, else (every rack, spec)."""
    m = _RACK_PREFIX.match(spec) if racks > 1 else None
    if m is None:
        return list(range(racks)), spec
    q = int(m.group(1))
    if q >= racks:
        raise NetemError("%s rack '%s': expected an integer in 0..%d" % (option, m.group(1),
                                                                         racks - 1))
    return [q], m.group(2)


def _dir_prefix(rest):
    m = _DIR_PREFIX.match(rest)
    return (m.group(1), m.group(2)) if m else ("both", rest)


def worker_links(specs, workers):
    """--netem "[r<Q>:]w<i>:[tx:|rx:|both:]ARGS" (r<Q>: only with several racks; without it
    every rack) as a list of (rack, worker, direction, args), in the order given. workers is
    the worker count of each rack."""
    links = []
    for spec in specs:
        racks, rest = _rack_prefix("--netem", spec, len(workers))
        m = _WORKER_PREFIX.match(rest)
        if m is None:
            raise NetemError("--netem '%s': expected %sw<i>:[tx:|rx:]ARGS"
                             % (spec, "[r<q>:]" if len(workers) > 1 else ""))
        direction, text = _dir_prefix(m.group(2))
        args = text.split()
        if not args:
            raise NetemError("--netem '%s': no netem arguments" % spec)
        for r in racks:
            w = int(m.group(1))
            if not 1 <= w <= workers[r]:
                raise NetemError("--netem worker '%s': expected an integer in 1..%d"
                                 % (m.group(1), workers[r]))
            links.append((r, w, direction, args))
    return links


def spine_links(specs, racks, rate=None):
    """--spine-netem "[r<Q>:][tx:|rx:|both:]ARGS" per rack's spine link and direction, the
    later spec winning, and --spine-rate's "rate RATE" added to both directions of every link:
    a list of (rack, direction, args) with direction tx or rx, links without arguments left
    out."""
    chosen = {}
    for spec in specs:
        chosen_racks, rest = _rack_prefix("--spine-netem", spec, racks)
        direction, text = _dir_prefix(rest)
        args = text.split()
        if not args:
            raise NetemError("--spine-netem '%s': no netem arguments" % spec)
        for r in chosen_racks:
            for d in ("tx", "rx"):
                if direction in (d, "both"):
                    chosen[(r, d)] = args
    links = []
    for r in range(racks):
        for d in ("tx", "rx"):
            args = list(chosen.get((r, d), []))
            if rate:
                args += ["rate", rate]
            if args:
                links.append((r, d, args))
    return links
