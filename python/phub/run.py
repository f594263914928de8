# SPDX-License-Identifier: BSD-3-Clause
"""python3 -m phub.run: torchrun, made to start on Debian 12's torch 1.13 with Python 3.11.

    PHUB_SERVER=10.0.0.1 python3 -m phub.run --nnodes 2 --nproc_per_node 2 --node_rank 0 \\
        --master_addr 10.0.0.101 --master_port 29500 train.py ARGS...

Takes torchrun's arguments and runs torchrun (torch.distributed.run). Debian 12's torchrun
fails before any worker starts with "'NoneType' object has no attribute 'get'": torch 1.13
turns the --redirects and --tee values into its Std flag by iterating the flag class, and Python
3.11 no longer yields the zero flag (NONE, the default "0") nor the combined ALL ("3") in that
iteration, so the default becomes None. Where that is the case, this replaces the parsing with
one that takes every documented value; elsewhere (a fixed torch) torchrun runs untouched.
"""

import re
import sys


def _std_parser_broken(std):
    try:
        return std.from_str("0") is None
    except Exception:  # noqa: BLE001 - a parser that raises is not the one patched here
        return False


def _fix_std_parsing():
    """Make torch's Std.from_str take "0".."3" and "i:v,..." again; True when it was broken."""
    from torch.distributed.elastic.multiprocessing import api

    std = api.Std
    if not _std_parser_broken(std):
        return False

    def from_str(cls, vm):
        if re.fullmatch(r"[0-3]", vm):
            return cls(int(vm))
        if re.fullmatch(r"(\d+:[0-3],)*\d+:[0-3]", vm):
            return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
        raise ValueError(f"{vm} does not match: <[0-3]> or <(\\d:[0-3],)*\\d:[0-3]>")

    std.from_str = classmethod(from_str)
    return True


def main(argv=None):
    _fix_std_parsing()
    from torch.distributed.run import main as torchrun_main
    sys.argv[0] = "python3 -m phub.run"
    return torchrun_main(argv)


if __name__ == "__main__":
    sys.exit(main())
