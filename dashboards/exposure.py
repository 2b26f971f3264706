"""Who can reach the dashboard: a loopback bind is private to this machine; anything else is
a network service without login, and ``pdsim dashboard`` says so before it serves."""
from __future__ import annotations

import ipaddress
import socket


def is_loopback(host: str) -> bool:
    """True when every address ``host`` resolves to is a loopback address (127.0.0.0/8, ::1).
    The wildcard binds (0.0.0.0, ::, "") and unresolvable names count as not loopback."""
    name = (host or "").strip().strip("[]")
    if not name:
        return False
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(name, None)
    except (socket.gaierror, UnicodeError, OSError):
        return False
    addrs = {info[4][0].split("%")[0] for info in infos}
    return bool(addrs) and all(ipaddress.ip_address(a).is_loopback for a in addrs)


def exposure_warning(host: str, port: int, data_dir: str) -> str | None:
    """The warning printed for a non-loopback bind (None for a loopback one)."""
    if is_loopback(host):
        return None
    return (f"WARNING: the dashboard will listen on {host}:{port}, not only on this machine (127.0.0.1).\n"
            "  It has no login: anyone who can reach this port can run simulations on this machine "
            "(CPU and memory, bounded per browser session),\n"
            f"  upload trace files, and make scenarios read files inside the data folder {data_dir} "
            "and pdsim's bundled data.\n"
            "  Plug-ins are limited to pdsim's own and installed packages' 'pdsim.plugins' entry points "
            "(module:Class references are refused).\n"
            "  Serve it only on a trusted network, or keep the default --host 127.0.0.1 and use an SSH tunnel.")


# ---- Host header allow-list (DNS rebinding) ------------------------------------------------
# A web page on attacker.example can re-point its own name at 127.0.0.1 and then talk to a
# loopback dashboard from the victim's browser; the browser still sends "Host: attacker.example".
# Answering only the names this server is reached by closes that (reliability review SEC-F).
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARDS = ("0.0.0.0", "::")


def host_name(header: str | None) -> str:
    """The name of a Host header without its port, lower case: ``[::1]:8050`` -> ``::1``."""
    h = (header or "").strip().lower()
    if h.startswith("["):
        return h[1:h.find("]")] if "]" in h else h
    if h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


def allowed_hosts(bind: str, extra: tuple[str, ...] = ()) -> frozenset[str]:
    """Host names the dashboard answers: loopback names, the bound address, ``extra``
    (--allow-host), and for a wildcard bind this machine's host names."""
    names = {*LOOPBACK_NAMES, host_name(bind), *(host_name(e) for e in extra)}
    if host_name(bind) in WILDCARDS:
        names |= {host_name(socket.gethostname()), host_name(socket.getfqdn())}
    return frozenset(n for n in names if n)


def host_refusal(header: str | None, allowed: frozenset[str]) -> str | None:
    """None when a request with this Host header may be answered, else why not (one line)."""
    name = host_name(header)
    if name in allowed:
        return None
    shown = (header or "")[:80].encode("ascii", "replace").decode("ascii")
    return (f"this dashboard does not answer to Host {shown!r}; open it as http://127.0.0.1 or localhost, "
            "or start it with --allow-host NAME for the name you use")
