"""What the attach end-to-end checks share: pass/fail lines and free loopback ports."""
import socket
import sys


class Checks:
    """Prints "ok    what" or "FAIL  what: detail" per check and counts them."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def __call__(self, ok, what, detail=""):
        if ok:
            self.passed += 1
            print(f"ok    {what}")
        else:
            self.failed += 1
            print(f"FAIL  {what}" + (f": {detail}" if detail else ""))

    def finish(self):
        """The closing line CTest's output shows, and the exit status."""
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)


def free_ports(n, who):
    """n consecutive free loopback ports (the engines number DP ranks port + rank)."""
    for _ in range(200):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        base = probe.getsockname()[1]
        probe.close()
        if base + n > 65535:
            continue
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    sys.exit(f"{who}: no run of free ports")
