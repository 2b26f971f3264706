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
