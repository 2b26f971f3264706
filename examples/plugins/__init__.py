"""Example policy plug-ins: a router and a batch scheduler, each one file (see README.md)."""
