"""``hccl-run``: torchrun's launcher, plus rank tables (``--rank_table`` / ``RANK_TABLE_FILE``).

Without a rank table, ``hccl-run ARGS`` is ``pycann-run -m torch.distributed.run ARGS`` (every
torchrun flag works as torchrun documents it; in the workers, as in every worker of hccl-run,
``import torch_npu`` and ``import acl`` are pycann's, as under pycann-run). With one, this host's server in the table
(``--server_id``, else the server whose ``server_id`` / ``host_ip`` is one of this host's
addresses, else the only server) decides what runs here: one process per device listed for it,
each with torchrun's variables (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) and CANN's (``RANK_ID``, ``RANK_SIZE``,
``DEVICE_ID``, ``RANK_TABLE_FILE``). Rank 0's host (the table's ``host_ip`` or ``server_id``,
or ``--master_addr``) hosts the rendezvous; every other host runs the same command and joins.
If a worker fails, the others are stopped and the launcher exits with the first failure's code.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

from pycann import config
from pycann.hccl.errors import HcclError
from pycann.hccl.ranktable import RankTable, load_rank_table

USAGE = "hccl-run [torchrun options] [--rank_table FILE [--server_id ID]] script.py|-m module [args...]"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hccl-run", usage=USAGE, add_help=True,
                                description="torchrun with HCCL rank tables (docs/hccl.md)")
    a = p.add_argument
    a("--rank_table", "--rank-table", dest="rank_table", default=config.launcher_env().get("RANK_TABLE_FILE"))
    a("--server_id", "--server-id", dest="server_id", default=config.launcher_env().get("SERVER_ID"))
    a("--nproc_per_node", "--nproc-per-node", dest="nproc_per_node", default=None)
    a("--nnodes", dest="nnodes", default=None)
    a("--node_rank", "--node-rank", dest="node_rank", type=int, default=None)
    a("--master_addr", "--master-addr", dest="master_addr", default=None)
    a("--master_port", "--master-port", dest="master_port", type=int, default=29500)
    a("-m", "--module", dest="module", action="store_true")
    a("--no_python", "--no-python", dest="no_python", action="store_true")
    a("--standalone", action="store_true")
    return p


def _local_addresses() -> set[str]:
    names = {socket.gethostname(), socket.getfqdn(), "localhost"}
    addrs = set(names) | {"127.0.0.1"}
    for n in names:
        try:
            addrs |= set(socket.gethostbyname_ex(n)[2])
        except OSError:
            pass
    if_ip = config.launcher_env().get("HCCL_IF_IP")
    if if_ip:
        addrs.add(if_ip)
    return addrs


def _bindable(addr: str) -> bool:
    """True if ``addr`` is an address of this host (a socket can bind to it)."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET) as s:
            s.bind((addr, 0))
        return True
    except (OSError, UnicodeError):
        return False


def pick_server(table: RankTable, server_id: str | None) -> str:
    """This host's ``server_id`` in ``table``. Raises ``HcclError``."""
    if server_id:
        if server_id not in table.servers:
            raise HcclError(*_para(f"--server_id {server_id!r} is not in {table.source} "
                                   f"(servers: {', '.join(table.servers)})"))
        return server_id
    local = _local_addresses()

    def here(addr: str | None) -> bool:
        return bool(addr) and (addr in local or _bindable(str(addr)))
    mine = [s for s in table.servers if here(s) or any(here(r.host_ip) for r in table.ranks_on(s))]
    if len(mine) == 1:
        return mine[0]
    if len(table.servers) == 1:
        return table.servers[0]
    raise HcclError(*_para(f"cannot tell which server of {table.source} this host is ({', '.join(table.servers)}); "
                           "pass --server_id"))


def _para(msg: str) -> tuple:
    from pycann.hccl.constants import HcclResult

    return (HcclResult.HCCL_E_PARA, msg)


def worker_envs(table: RankTable, server: str, master_addr: str | None, master_port: int) -> list[dict[str, str]]:
    """The environment of each local worker of ``server`` (ranks in the table's order)."""
    ranks = table.ranks_on(server)
    servers = table.servers
    addr = master_addr or table.master_address(config.launcher_env().get("HCCL_IF_IP"))
    envs = []
    for local, e in enumerate(ranks):
        envs.append({
            "RANK": str(e.rank_id), "LOCAL_RANK": str(local), "WORLD_SIZE": str(table.rank_size),
            "LOCAL_WORLD_SIZE": str(len(ranks)), "GROUP_RANK": str(servers.index(server)),
            "NODE_RANK": str(servers.index(server)), "MASTER_ADDR": addr, "MASTER_PORT": str(master_port),
            "RANK_ID": str(e.rank_id), "RANK_SIZE": str(table.rank_size), "DEVICE_ID": str(e.device_id),
            "RANK_TABLE_FILE": os.path.abspath(table.source), "SERVER_ID": server,
        })
    return envs


def _run_table(ns: argparse.Namespace, rest: list[str]) -> int:
    table = load_rank_table(ns.rank_table)
    server = pick_server(table, ns.server_id)
    envs = worker_envs(table, server, ns.master_addr, ns.master_port)
    if ns.nproc_per_node not in (None, "auto") and int(ns.nproc_per_node) != len(envs):
        raise HcclError(*_para(f"--nproc_per_node={ns.nproc_per_node} but {table.source} lists {len(envs)} devices "
                               f"on server {server}"))
    if not rest:
        raise HcclError(*_para("no script to run"))
    cmd = rest if ns.no_python else [sys.executable, *(["-m"] if ns.module else []), *rest]
    procs = [subprocess.Popen(cmd, env={**config.environment(), **e}) for e in envs]
    first_bad = 0
    try:
        while procs:
            for p in list(procs):
                rc = p.poll()
                if rc is None:
                    continue
                procs.remove(p)
                if rc != 0 and first_bad == 0:
                    first_bad = rc
                    print(f"hccl-run: worker pid {p.pid} exited with {rc}; stopping the others", file=sys.stderr)
                    for q in procs:
                        q.send_signal(signal.SIGTERM)
            time.sleep(0.05)
    except KeyboardInterrupt:
        for q in procs:
            q.send_signal(signal.SIGINT)
        return 130
    return first_bad if first_bad >= 0 else 128 - first_bad


_VALUE_FLAGS = {
    "--rank_table", "--rank-table", "--server_id", "--server-id", "--nproc_per_node", "--nproc-per-node",
    "--nnodes", "--node_rank", "--node-rank", "--master_addr", "--master-addr", "--master_port", "--master-port",
    "--rdzv_backend", "--rdzv-backend", "--rdzv_endpoint", "--rdzv-endpoint", "--rdzv_id", "--rdzv-id",
    "--rdzv_conf", "--rdzv-conf", "--max_restarts", "--max-restarts", "--monitor_interval", "--monitor-interval",
    "--start_method", "--start-method", "--role", "--log_dir", "--log-dir", "-r", "--redirects", "-t", "--tee",
    "--local_addr", "--local-addr", "--logs_specs", "--logs-specs", "--local-ranks-filter", "--local_ranks_filter",
}


def split_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(launcher options, the script and its arguments): options stop at the first word that is
    neither an option nor an option's value, as torchrun parses them."""
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-"):
            break
        i += 2 if a in _VALUE_FLAGS else 1
    return list(args[:i]), list(args[i:])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the launcher; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    opts, script = split_args(args)
    ns, unknown = _parser().parse_known_args(opts)
    rest = script
    if ns.rank_table and unknown:
        print(f"hccl-run: with a rank table these torchrun options are ignored: {' '.join(unknown)}",
              file=sys.stderr)
    from pycann.tools.run import shims_for_children

    # the workers are pycann apps, as under `pycann-run -m torch.distributed.run`: `import torch_npu`
    # (and acl, torchair, amct_onnx) resolves to pycann in them
    if ns.rank_table:
        try:
            with shims_for_children():
                return _run_table(ns, rest)
        except HcclError as e:
            print(f"hccl-run: {e}", file=sys.stderr)
            return 2
    from torch.distributed import run as torchrun

    with shims_for_children():
        torchrun.main(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
