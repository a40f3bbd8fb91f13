"""A userspace packet delayer, shipped to and run INSIDE a node where the kernel has no netem.

The packet fault sends the node's outgoing packets to NFQUEUE; this script takes them from the
queue over raw netlink (Debian bookworm packages no Python binding for libnetfilter_queue, and a
node has only the standard library), holds each for its delay and then lets it go. With a
probability a packet goes at once, overtaking the held ones (reordering, as netem's `reorder`),
or is sent twice (duplication): the copy leaves through a raw socket with MARK set, which the
fault's rules let pass without queueing it again. On SIGTERM every held packet is let go, so a
heal loses nothing. It never imports the harness.
"""

from __future__ import annotations

import argparse
import heapq
import random
import select
import signal
import socket
import struct
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
MSG_PACKET, MSG_VERDICT, MSG_CONFIG = 0, 1, 2
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
CFG_CMD, CFG_PARAMS, CFG_QUEUE_MAXLEN, CFG_MASK, CFG_FLAGS = 1, 2, 3, 4, 5
CMD_BIND = 1
COPY_META, COPY_PACKET = 1, 2
CFG_F_FAIL_OPEN = 1
ATTR_PACKET_HDR, ATTR_VERDICT_HDR, ATTR_PAYLOAD = 1, 2, 10
NF_ACCEPT = 1
SOL_NETLINK, NETLINK_NO_ENOBUFS = 270, 5
SO_MARK, SO_RCVBUFFORCE = 36, 33
QUEUE_MAXLEN = 65536


def attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


class Queue:
    """One bound NFQUEUE queue: receive packets, give verdicts."""

    def __init__(self, number: int, copy_packets: bool) -> None:
        self.number = number
        self.seq = 0
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
        self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
        self.sock.bind((0, 0))
        self.configure([attr(CFG_CMD, struct.pack("!BBH", CMD_BIND, 0, 0))])
        mode = (COPY_PACKET, 0xFFFF) if copy_packets else (COPY_META, 0)
        self.configure([attr(CFG_PARAMS, struct.pack("!IB", mode[1], mode[0]))])
        self.configure([attr(CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN))])
        # Fail open: when the queue is full the kernel lets packets pass instead of dropping them.
        flags = struct.pack("!I", CFG_F_FAIL_OPEN)
        self.configure([attr(CFG_FLAGS, flags), attr(CFG_MASK, flags)])

    def send(self, msg_type: int, attrs: list[bytes], flags: int = NLM_F_REQUEST) -> None:
        self.seq += 1
        body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack("!H", self.number)
        body += b"".join(attrs)
        kind = (NFNL_SUBSYS_QUEUE << 8) | msg_type
        self.sock.send(struct.pack("=IHHII", 16 + len(body), kind, flags, self.seq, 0) + body)

    def configure(self, attrs: list[bytes]) -> None:
        """Send one configuration message and raise if the kernel refuses it."""
        self.send(MSG_CONFIG, attrs, NLM_F_REQUEST | NLM_F_ACK)
        data = self.sock.recv(65536)
        length, kind = struct.unpack_from("=IH", data)
        if kind == NLMSG_ERROR:
            (error,) = struct.unpack_from("=i", data, 16)
            if error:
                raise OSError(-error, f"NFQUEUE configuration refused: {data[16:length]!r}")

    def packets(self) -> list[tuple[int, bytes]]:
        """Read what the kernel queued: (packet id, payload or b"")."""
        data = self.sock.recv(1 << 20)
        found = []
        offset = 0
        while offset + 16 <= len(data):
            length, kind = struct.unpack_from("=IH", data, offset)
            if length < 16:
                break
            if kind == (NFNL_SUBSYS_QUEUE << 8) | MSG_PACKET:
                found.append(parse_packet(data[offset + 20 : offset + length]))
            offset += (length + 3) & ~3
        return found

    def accept(self, packet_id: int) -> None:
        self.send(MSG_VERDICT, [attr(ATTR_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, packet_id))])


def parse_packet(attrs: bytes) -> tuple[int, bytes]:
    packet_id, payload = -1, b""
    offset = 0
    while offset + 4 <= len(attrs):
        length, kind = struct.unpack_from("=HH", attrs, offset)
        if length < 4:
            break
        value = attrs[offset + 4 : offset + length]
        kind &= 0x3FFF  # without the nested and byte-order flags
        if kind == ATTR_PACKET_HDR:
            (packet_id,) = struct.unpack_from("!I", value)
        elif kind == ATTR_PAYLOAD:
            payload = value
        offset += (length + 3) & ~3
    return packet_id, payload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queue", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--reorder", type=float, default=0.0, help="probability of no delay")
    parser.add_argument("--duplicate", type=float, default=0.0, help="probability of a copy")
    parser.add_argument("--mark", type=int, required=True, help="mark of the copies")
    args = parser.parse_args()

    # SIGTERM only wakes the loop (through the wakeup pipe), so no packet is ever half-released.
    wake_r, wake_w = socket.socketpair()
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno())
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    rng = random.Random()
    queue = Queue(args.queue, copy_packets=args.duplicate > 0)
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    raw.setsockopt(socket.SOL_SOCKET, SO_MARK, args.mark)
    held: list[tuple[float, int, bytes]] = []  # (release time, packet id, payload)

    def release(packet_id: int, payload: bytes) -> None:
        queue.accept(packet_id)
        if payload[:1] and payload[0] >> 4 == 4 and rng.random() < args.duplicate:
            raw.sendto(payload, (socket.inet_ntoa(payload[16:20]), 0))

    print("ready", flush=True)
    while True:
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else None
        readable, _, _ = select.select([queue.sock, wake_r], [], [], timeout)
        if wake_r in readable:
            break
        if readable:
            for packet_id, payload in queue.packets():
                if rng.random() < args.reorder:
                    release(packet_id, payload)
                    continue
                delay = max(0.0, rng.gauss(args.delay_ms, args.jitter_ms)) / 1000
                heapq.heappush(held, (time.monotonic() + delay, packet_id, payload))
        while held and held[0][0] <= time.monotonic():
            _, packet_id, payload = heapq.heappop(held)
            release(packet_id, payload)
    for _, packet_id, payload in sorted(held):
        release(packet_id, payload)
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
