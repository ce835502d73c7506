#!/usr/bin/env python3
"""The server CPU one slowly sent command costs: kv_server against
redis-server, in the same run.

One `MGET` with ARGS one-byte keys (`*N\\r\\n` then `$1\\r\\nk\\r\\n` per key:
about 7 MB for a million) is sent in CHUNK-byte writes, each its own
`sendall`, and the whole reply (ARGS nulls, no key exists) is read back.
The figure is the server process's CPU time over that command: utime +
stime from /proc/PID/stat (ticks of 1/CLK_TCK s) read after a PING
answered before the command and after the command's reply.

    scripts/kv_slow_command.py                        # 1M keys, 2 KiB writes
    scripts/kv_slow_command.py --args 250000 500000 1000000 --runs 3
    scripts/kv_slow_command.py --no-redis             # kv_server only

kv_server is `$CARGO_TARGET_DIR/release/examples/kv_server` (built with
`cargo build --release --example kv_server` when missing), run with
`--threads 2`; redis-server, when it is on PATH (Debian's `redis-server`),
runs on 127.0.0.1 with `--save "" --appendonly no` on a free port. Both
listen on 127.0.0.1 only; each run is bounded by socket timeouts and the
servers are killed at the end.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")
TIMEOUT = 300.0  # seconds any one socket call may wait


def cpu_seconds(pid):
    """utime + stime of `pid`, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # The command name (field 2) may hold spaces: count from after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect(port, deadline):
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def read_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        got = s.recv(min(1 << 20, n - len(buf)))
        if not got:
            raise RuntimeError(f"server closed after {len(buf)} of {n} bytes")
        buf += got
    return bytes(buf)


def one_run(pid, port, nargs, chunk):
    """The server's CPU seconds for one MGET of `nargs` keys."""
    s = connect(port, time.monotonic() + 10)
    try:
        s.sendall(b"PING\r\n")
        assert read_exact(s, 7) == b"+PONG\r\n"
        keys = b"abcdefghijklmnopqrstuvwxyz"
        cmd = bytearray(b"*%d\r\n$4\r\nMGET\r\n" % (nargs + 1))
        for i in range(nargs):
            cmd += b"$1\r\n" + keys[i % 26 : i % 26 + 1] + b"\r\n"
        want = b"*%d\r\n" % nargs + b"$-1\r\n" * nargs
        before = cpu_seconds(pid)
        view = memoryview(cmd)
        for at in range(0, len(cmd), chunk):
            s.sendall(view[at : at + chunk])
        got = read_exact(s, len(want))
        after = cpu_seconds(pid)
        if got != want:
            raise RuntimeError("unexpected reply to MGET")
        return after - before, len(cmd)
    finally:
        s.close()


def start(argv, port):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    connect(port, time.monotonic() + 10).close()
    return proc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--args", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--chunk", type=int, default=2048)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-redis", action="store_true")
    opts = ap.parse_args()

    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    kv = os.path.join(target, "release", "examples", "kv_server")
    if not os.path.exists(kv):
        subprocess.run(
            ["cargo", "build", "--release", "--example", "kv_server"], cwd=ROOT, check=True
        )
    servers = []
    kv_port = free_port()
    kv_argv = [kv, "--addr", f"127.0.0.1:{kv_port}", "--threads", str(opts.threads)]
    kv_argv += ["--idle-timeout", "600"]
    servers.append(("kv_server", start(kv_argv, kv_port), kv_port))
    redis = shutil.which("redis-server")
    if redis and not opts.no_redis:
        port = free_port()
        argv = [redis, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "no"]
        servers.append(("redis-server", start(argv, port), port))
    elif not opts.no_redis:
        print("redis-server not found: kv_server only", file=sys.stderr)
    try:
        print(f"MGET in {opts.chunk}-byte writes; server CPU seconds (utime + stime)")
        print("| keys | command bytes | server | CPU s per run |")
        print("| ---: | ---: | --- | --- |")
        for nargs in opts.args:
            for name, proc, port in servers:
                runs = [one_run(proc.pid, port, nargs, opts.chunk) for _ in range(opts.runs)]
                cpu = ", ".join(f"{c:.2f}" for c, _ in runs)
                print(f"| {nargs:,} | {runs[0][1]:,} | {name} | {cpu} |", flush=True)
    finally:
        for _, proc, _ in servers:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
