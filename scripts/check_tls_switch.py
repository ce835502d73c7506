#!/usr/bin/env python3
"""Finds thread-local accesses in functions that can switch the task out.

A task can switch out inside `gofer::coroutine::switch::suspend` (or
`switch_direct`, its direct switch into the next task) and resume
on another OS thread. The compiler assumes a function runs on one thread
from entry to return: if a function's own body computes a thread-local
address (x86_64: an operand through `%fs:`, or a call to `__tls_get_addr`;
aarch64: `mrs xN, tpidr_el0`) and the same body calls something that can
switch, the compiler may reuse the first thread's address after the switch.
gofer's rule is that every thread-local access on such a path sits in a
separate `#[inline(never)]` function that never switches itself.

For each binary given, this script disassembles it with `objdump`, splits
the listing into functions, builds the direct call graph, takes the set of
functions that can reach `suspend` or `switch_direct` (transitively), and reports those among
them whose own body touches TLS. A function counts as gofer's when its
demangled path is in gofer (`gofer::...`, `<gofer::T>::...`,
`<gofer::T as Trait>::...`, `<T as gofer::Trait>::...`, closures inside
them) or when it is one of the unmangled symbols gofer's sources define
(`#[no_mangle]` / `#[export_name]`: the hooked libc calls). Other functions
(std or third-party code, generic ones maybe instantiated with gofer's
types) are listed apart, for information.

Exit status: 1 if any gofer function breaks the rule, 0 if none does,
2 on a usage error or a binary without `suspend`.

What counts as a call edge:
  - a direct `call`/`jmp`/conditional jump (x86_64), `bl`/`b`/`b.cond`/
    `cbz`/`tbz` (aarch64) to an address in another function: tail calls
    count;
  - x86_64 `call *slot(%rip)` / `jmp *slot(%rip)` where the slot is in
    `.got` / `.got.plt`: resolved through the slot's dynamic relocation (or
    the slot's contents in a binary without one).

Limits:
  - Indirect calls are not followed: calls through a register or memory
    (`call *%rax`, `call *0x18(%rax)`), vtables (`dyn Trait`), function
    pointers (the runtime's `TaskVTable`, an `Entry`'s `run`, closures
    passed as `&dyn FnMut`) and aarch64 `blr`. A function that reaches a
    switch only through such a call is not checked.
  - The check sees the code of the binaries it is given, as they were
    compiled: another profile, feature set or compiler may inline
    differently.
  - `%fs:0x28` and `%fs:0x30` (the stack-protector canary and glibc's
    pointer guard) are not counted: their values are the same on every
    thread.
  - Any TLS access in the body counts, whether or not it is actually used
    across the call that switches.
  - Paths are those of the static call graph: a call counts as reaching a
    switch if some path from it does, whatever its arguments. With the
    `hooks` feature every call to `write`, `close`, ... goes to a hook that
    can park, even where the runtime only writes to its own eventfd or to
    stderr (which the hooks pass to libc). Two kinds of calls are not
    followed, to keep such paths out: calls into functions that end the
    process (`NO_RETURN_DEFAULT`: control never returns to their caller) and
    the calls listed in `SKIP_EDGES_DEFAULT`, each with its reason.

Usage:
  scripts/check_tls_switch.py [-v] [--src DIR] [--switch NAME]
                              [--no-return NAME] [--skip-edge CALLER=CALLEE]
                              BINARY...
"""

import argparse
import bisect
import collections
import os
import re
import subprocess
import sys

# The functions a task switches out through: to its Processer loop, or
# straight into the next task (the direct switch, `runtime/processer/direct.rs`).
SWITCH_DEFAULT = (
    "gofer::coroutine::switch::suspend",
    "gofer::coroutine::switch::switch_direct",
)

# Functions that end the process: whatever they call, control never comes
# back to their caller, so a switch inside them cannot hand a stale address
# to it. Calls into them are not followed (they are still checked
# themselves). Names without compiler suffixes; a trailing "::" matches the
# generic instances of a function.
NO_RETURN_DEFAULT = (
    # Not the end of the process, but the start of a panic: from there on
    # the hooks never switch the task (futex.rs `parks_task`, offload.rs
    # `offloads`: std keeps its panic state per thread), so the panic
    # machinery's futex waits and file reads block the thread.
    "std::panicking::panic_with_hook",
    "gofer::sys::fatal::fatal",
    "gofer::sys::fatal::abort_with",
    "std::process::abort",
    "std::process::exit",
    "abort",
    "exit",
    "_exit",
)

# Calls known not to switch whatever the call graph says, as (caller,
# callee, why). Names without compiler suffixes.
SKIP_EDGES_DEFAULT = (
    # With the hooks, `syscall` parks a task only for a futex wait; these
    # callers only wake.
    ("std::sys::pal::unix::futex::futex_wake", "syscall",
     "a futex wake never waits"),
    ("core::ptr::drop_in_place::<std::sync::poison::mutex::MutexGuard<alloc::vec::Vec<u8>>>",
     "syscall", "unlocking a std Mutex only wakes"),
    ("<std::sys::sync::rwlock::futex::RwLock>::wake_writer_or_readers", "syscall",
     "unlocking a std RwLock only wakes"),
    ("std::sys::random::linux::getrandom", "close",
     "std's /dev/urandom fallback closes a regular file, which the hooks pass to libc"),
    ("crossbeam_epoch::default::default_collector",
     "crossbeam_epoch::sync::once_lock::OnceLock<T>::initialize",
     "crossbeam's collector is made once per process; SchedulerBuilder::build "
     "makes it (a steal) before any task runs, so the Once never waits then"),
)

# objdump -d listing lines.
FUNC_RE = re.compile(r"^([0-9a-f]+) <(.*)>:$")
INSN_RE = re.compile(r"^\s*([0-9a-f]+):\s+(.*)$")
# A branch operand naming its target: "b4500 <name>" (x86_64) or
# "x0, #3, 4005d0 <name>" (aarch64).
DIRECT_TARGET_RE = re.compile(r"(?:^|[\s,])([0-9a-f]+) <")
# x86_64 RIP-relative memory operand with objdump's computed address.
RIP_SLOT_RE = re.compile(r"^\*(?:0x[0-9a-f]+|-0x[0-9a-f]+)?\(%rip\).*#\s*([0-9a-f]+)")

X86_PREFIXES = {
    "bnd", "notrack", "lock", "rep", "repz", "repe", "repnz", "repne",
    "data16", "data32", "addr32", "cs", "ds", "es", "ss", "fs", "gs",
}
X86_BRANCHES = re.compile(r"^(call|callq|jmp|jmpq|j[a-z]{1,4}|loop[a-z]*)$")
A64_BRANCHES = re.compile(r"^(bl|b|b\.[a-z]+|cbn?z|tbn?z)$")

# Thread-pointer reads.
X86_TLS_RE = re.compile(r"%fs:")
X86_TLS_BENIGN_RE = re.compile(r"%fs:0x(28|30)\b(?!\()")
A64_TLS_RE = re.compile(r"\bmrs\s+x\d+,\s*tpidr_el0\b")
TLS_FUNCS = ("__tls_get_addr", "___tls_get_addr", "__tls_get_addr_opt")

# Crate disambiguators in v0 demangling: core[c1f1a4ba060b9bfa]::...
DISAMBIG_RE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\[[0-9a-f]{1,16}\]")
LLVM_SUFFIX_RE = re.compile(r"(\.llvm\.\d+|\.cold(\.\d+)?|\.part\.\d+|\.isra\.\d+|\.constprop\.\d+)+$")


def run(cmd):
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, check=False)
    except FileNotFoundError:
        sys.exit("check_tls_switch: %s not found (binutils)" % cmd[0])
    if r.returncode != 0:
        sys.exit("check_tls_switch: %s failed:\n%s" % (" ".join(cmd), r.stderr))
    return r.stdout


def normalize(name):
    """Demangled name without v0 crate disambiguators."""
    return DISAMBIG_RE.sub(r"\1", name)


def base_name(name):
    """Name without compiler suffixes (.llvm.N, .cold) and symbol versions."""
    name = name.split("@", 1)[0]
    return LLVM_SUFFIX_RE.sub("", name)


def split_qualified(name):
    """For "<A as B>::rest" returns (A, B); "<A>::rest" gives (A, None);
    any other name gives (None, None)."""
    if not name.startswith("<"):
        return None, None
    depth = 0
    i = 0
    split_at = None
    while i < len(name):
        c = name[i]
        if c == "-" and name.startswith("->", i):
            i += 2
            continue
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
            if depth == 0:
                inner = name[1:i]
                if split_at is None:
                    return inner, None
                return name[1:split_at], name[split_at + 4:i]
        elif depth == 1 and name.startswith(" as ", i) and split_at is None:
            split_at = i
        i += 1
    return None, None


def is_no_return(name, no_return):
    name = base_name(name)
    for n in no_return:
        if name == n or name.startswith(n + "::<") or name.startswith(n + "<"):
            return True
    return False


def strip_type_prefix(ty):
    for p in ("&mut ", "&", "*const ", "*mut ", "dyn ", "["):
        while ty.startswith(p):
            ty = ty[len(p):]
    return ty


def is_gofer_name(name, exported):
    if name.startswith("gofer::"):
        return True
    self_ty, trait = split_qualified(name)
    if self_ty is not None:
        if strip_type_prefix(self_ty).startswith("gofer::"):
            return True
        if trait is not None and strip_type_prefix(trait).startswith("gofer::"):
            return True
        return False
    return base_name(name) in exported


def exported_names(src):
    """Unmangled symbols gofer's sources define: #[no_mangle] functions and
    #[export_name = "..."] items."""
    names = set()
    if not src or not os.path.isdir(src):
        return names
    attr_fn = re.compile(
        r"#\[\s*(?:unsafe\s*\(\s*)?no_mangle\s*\)?\s*\]"
        r"(?:\s*#\[[^\]]*\]|\s*///[^\n]*|\s*//[^\n]*)*"
        r"\s*(?:pub(?:\s*\([^)]*\))?\s+)?(?:unsafe\s+)?(?:extern\s+\"[^\"]*\"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)")
    export = re.compile(r"#\[\s*(?:unsafe\s*\(\s*)?export_name\s*=\s*\"([^\"]+)\"")
    for root, _dirs, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            names.update(attr_fn.findall(text))
            names.update(export.findall(text))
    return names


class Func:
    __slots__ = ("addr", "name", "insns", "calls", "tls")

    def __init__(self, addr, name):
        self.addr = addr
        self.name = name
        self.insns = []   # (addr, text)
        self.calls = []   # (target Func or external name, insn addr, insn text)
        self.tls = []     # (insn addr, insn text)


def read_sections(path):
    """[(name, vma, size, file offset)] from objdump -h."""
    out = run(["objdump", "-h", "-w", path])
    secs = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[0].isdigit():
            try:
                secs.append((parts[1], int(parts[3], 16), int(parts[2], 16), int(parts[5], 16)))
            except ValueError:
                pass
    return secs


def read_dynrelocs(path):
    """GOT slot address -> ("addr", int) or ("sym", name)."""
    r = subprocess.run(["objdump", "-R", "-w", path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, check=False)
    relocs = {}
    if r.returncode != 0:   # not a dynamic binary
        return relocs
    for line in r.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) != 3 or not re.match(r"^[0-9a-f]+$", parts[0]):
            continue
        off = int(parts[0], 16)
        typ, val = parts[1], parts[2].strip()
        if typ.endswith(("_RELATIVE", "_IRELATIVE")):
            m = re.search(r"\*ABS\*\+0x([0-9a-f]+)", val)
            if m:
                relocs[off] = ("addr", int(m.group(1), 16))
        elif typ.endswith(("_GLOB_DAT", "_JUMP_SLOT", "_64")):
            sym = re.split(r"[+\s]", val, 1)[0]
            relocs[off] = ("sym", sym)
    return relocs


def detect_arch(path):
    out = run(["objdump", "-f", path])
    if "aarch64" in out:
        return "aarch64"
    if "x86-64" in out:
        return "x86_64"
    sys.exit("check_tls_switch: %s: unsupported architecture:\n%s" % (path, out))


def parse(path, arch):
    out = run(["objdump", "-d", "--no-show-raw-insn", "-C", "-w", path])
    funcs = []
    cur = None
    for line in out.splitlines():
        m = FUNC_RE.match(line)
        if m:
            cur = Func(int(m.group(1), 16), normalize(m.group(2)))
            funcs.append(cur)
            continue
        if cur is None:
            continue
        m = INSN_RE.match(line)
        if m:
            cur.insns.append((int(m.group(1), 16), m.group(2).rstrip()))
    funcs.sort(key=lambda f: f.addr)
    return funcs


def split_insn(text, arch):
    parts = text.split(None, 1)
    if arch == "x86_64":
        while parts and (parts[0] in X86_PREFIXES or parts[0].startswith("rex")):
            parts = parts[1].split(None, 1) if len(parts) > 1 else []
    if not parts:
        return "", ""
    return parts[0], (parts[1] if len(parts) > 1 else "")


class Binary:
    def __init__(self, path, exported):
        self.path = path
        self.arch = detect_arch(path)
        self.funcs = parse(path, self.arch)
        self.starts = [f.addr for f in self.funcs]
        self.by_name = {}
        for f in self.funcs:
            self.by_name.setdefault(base_name(f.name), f)
        self.sections = read_sections(path)
        self.got = [s for s in self.sections if s[0] in (".got", ".got.plt")]
        self.relocs = read_dynrelocs(path)
        self.exported = exported
        self.unresolved_slots = 0
        self.analyse()

    def func_at(self, addr):
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0:
            return None
        f = self.funcs[i]
        end = self.funcs[i + 1].addr if i + 1 < len(self.funcs) else None
        if end is not None and addr >= end:
            return None
        return f

    def plt_alias(self, f):
        """`name@plt` stub -> the function `name` if the binary defines it."""
        if f is not None and f.name.endswith("@plt"):
            target = self.by_name.get(base_name(f.name))
            if target is not None and not target.name.endswith("@plt"):
                return target
        return f

    def slot_value(self, slot):
        if slot in self.relocs:
            return self.relocs[slot]
        for name, vma, size, off in self.got:
            if vma <= slot < vma + size:
                with open(self.path, "rb") as fh:
                    fh.seek(off + slot - vma)
                    word = fh.read(8)
                if len(word) == 8:
                    return ("addr", int.from_bytes(word, "little"))
        return None

    def in_got(self, slot):
        return any(vma <= slot < vma + size for _n, vma, size, _o in self.got)

    def resolve_slot(self, slot):
        if not self.in_got(slot):
            return None
        v = self.slot_value(slot)
        if v is None:
            self.unresolved_slots += 1
            return None
        kind, val = v
        if kind == "addr":
            if val == 0:
                return None
            f = self.func_at(val)
            return self.plt_alias(f) if f is not None and f.addr == val else None
        sym = base_name(val)
        return self.by_name.get(sym, sym)

    def analyse(self):
        x86 = self.arch == "x86_64"
        for f in self.funcs:
            for addr, text in f.insns:
                mnem, ops = split_insn(text, self.arch)
                if x86:
                    if X86_TLS_RE.search(text) and not X86_TLS_BENIGN_RE.search(text):
                        f.tls.append((addr, text))
                    elif mnem == "rdfsbase":
                        f.tls.append((addr, text))
                    is_branch = X86_BRANCHES.match(mnem) is not None
                else:
                    if A64_TLS_RE.search(text):
                        f.tls.append((addr, text))
                    is_branch = A64_BRANCHES.match(mnem) is not None
                if not is_branch:
                    continue
                target = None
                if x86 and ops.startswith("*"):
                    m = RIP_SLOT_RE.match(ops)
                    if m:
                        target = self.resolve_slot(int(m.group(1), 16))
                else:
                    m = DIRECT_TARGET_RE.search(ops)
                    if m:
                        taddr = int(m.group(1), 16)
                        t = self.func_at(taddr)
                        if t is not None and t is not f:
                            target = self.plt_alias(t)
                if target is None or target is f:
                    continue
                tname = target if isinstance(target, str) else target.name
                if base_name(tname) in TLS_FUNCS:
                    f.tls.append((addr, text))
                f.calls.append((target, addr, text))

    def check(self, switch_names, no_return, skip_edges):
        switches = [f for f in self.funcs if base_name(f.name) in switch_names]
        if not switches:
            return None
        skip = {(a, b): why for a, b, why in skip_edges}
        self.skipped = {}
        callers = collections.defaultdict(list)
        for f in self.funcs:
            for target, addr, text in f.calls:
                if isinstance(target, str) or is_no_return(target.name, no_return):
                    continue
                edge = (base_name(f.name), base_name(target.name))
                if edge in skip:
                    self.skipped[edge] = skip[edge]
                    continue
                callers[target.addr].append((f, addr, text))
        # Breadth-first from the switch over reversed edges: `nxt[f]` is the
        # next hop on a shortest path from f to the switch.
        nxt = {}
        reach = {}
        queue = collections.deque()
        for s in switches:
            reach[s.addr] = s
            nxt[s.addr] = None
            queue.append(s)
        while queue:
            g = queue.popleft()
            for caller, addr, text in callers[g.addr]:
                if caller.addr not in reach:
                    reach[caller.addr] = caller
                    nxt[caller.addr] = (g, addr, text)
                    queue.append(caller)
        violations = [f for f in reach.values() if f.tls]
        violations.sort(key=lambda f: f.name)
        return reach, nxt, violations

    def path_to_switch(self, f, nxt):
        path = [f]
        seen = {f.addr}
        while nxt.get(f.addr) is not None:
            f = nxt[f.addr][0]
            if f.addr in seen:
                break
            seen.add(f.addr)
            path.append(f)
        return path


def short(name, width=160):
    return name if len(name) <= width else name[:width - 3] + "..."


def report(b, switch_names, no_return, skip_edges, verbose):
    res = b.check(switch_names, no_return, skip_edges)
    if res is None:
        print("%s: no function named %s: not a gofer binary, or stripped"
              % (b.path, " or ".join(switch_names)))
        return None
    reach, nxt, violations = res
    gofer = [f for f in violations if is_gofer_name(f.name, b.exported)]
    other = [f for f in violations if not is_gofer_name(f.name, b.exported)]

    def show(f):
        addr, text = f.tls[0]
        more = "" if len(f.tls) == 1 else " (+%d more)" % (len(f.tls) - 1)
        print("  %s  [%#x]" % (short(f.name), f.addr))
        print("    TLS:  %x: %s%s" % (addr, text, more))
        path = b.path_to_switch(f, nxt)
        print("    path: " + "\n       -> ".join(short(p.name, 120) for p in path))

    print("== %s" % b.path)
    if gofer:
        print("gofer functions that reach a switch and touch TLS in their own body:")
        for f in gofer:
            show(f)
    if other:
        print("other crates (information only; generic code may be instantiated with gofer's closures):")
        for f in other:
            tag = "  (gofer types in its name)" if "gofer::" in f.name else ""
            if verbose:
                show(f)
                if tag:
                    print("   " + tag)
            else:
                print("  %s  [%#x]%s" % (short(f.name), f.addr, tag))
                addr, text = f.tls[0]
                print("    TLS:  %x: %s" % (addr, text))
    for (caller, callee), why in sorted(b.skipped.items()):
        print("not followed: %s -> %s (%s)" % (caller, callee, why))
    print("%s: %d functions reach a switch, %d touch TLS directly: %d in gofer, %d in other crates"
          % (os.path.basename(b.path), len(reach), len(violations), len(gofer), len(other)))
    return len(gofer)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(
        description="Report functions that can switch a task out and touch TLS in their own body.")
    ap.add_argument("binaries", nargs="+", metavar="BINARY")
    ap.add_argument("--src", default=os.path.join(here, "..", "src"),
                    help="gofer's sources, for its unmangled symbols (default: %(default)s)")
    ap.add_argument("--switch", action="append", default=[], metavar="NAME",
                    help="a function a switch-out goes through (repeatable; default: "
                         + ", ".join(SWITCH_DEFAULT) + ")")
    ap.add_argument("--no-return", action="append", default=[], metavar="NAME",
                    help="one more function that ends the process (calls into it are not "
                         "followed); built in: " + ", ".join(NO_RETURN_DEFAULT))
    ap.add_argument("--skip-edge", action="append", default=[], metavar="CALLER=CALLEE",
                    help="one more call known not to switch (demangled names without hashes)")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="also print a path to the switch for other crates' functions")
    args = ap.parse_args()

    exported = exported_names(args.src)
    if not exported:
        print("check_tls_switch: warning: no #[no_mangle] functions found under %s: "
              "the hooks' unmangled symbols will count as other crates'" % args.src,
              file=sys.stderr)
    no_return = NO_RETURN_DEFAULT + tuple(args.no_return)
    skip_edges = list(SKIP_EDGES_DEFAULT)
    for e in args.skip_edge:
        caller, sep, callee = e.partition("=")
        if not sep:
            ap.error("--skip-edge wants CALLER=CALLEE")
        skip_edges.append((caller, callee, "--skip-edge"))
    bad = 0
    for path in args.binaries:
        if not os.path.isfile(path):
            print("check_tls_switch: %s: no such file" % path, file=sys.stderr)
            return 2
        b = Binary(path, exported)
        n = report(b, tuple(args.switch) or SWITCH_DEFAULT, no_return, skip_edges, args.verbose)
        if n is None:
            return 2
        bad += n
    if bad:
        print("FAIL: %d gofer function(s) touch TLS on a path that can switch the task out; "
              "move each access into an #[inline(never)] function that never switches"
              % bad)
        return 1
    print("ok: no gofer function touches TLS on a path that can switch the task out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
