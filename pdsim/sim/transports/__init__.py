"""KV transports: how a request's prompt KV moves from its prefill instance to its decode
instance (handshake, bytes on the fabric, where it lands). A plug-in kind: ``transfer.backend``."""
from .base import TRANSPORTS, Transfer, Transport, TransportContext
from .mooncake import Mooncake
from .nccl_p2p import P2PNccl
from .shared_storage import SharedStorage

__all__ = ["TRANSPORTS", "Transport", "TransportContext", "Transfer", "Mooncake", "P2PNccl", "SharedStorage"]
