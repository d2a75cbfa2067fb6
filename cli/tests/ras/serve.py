"""A stand-in for NCCL's RAS service, as the release LIB says it is: the
process maps LIB (a libnccl.so.2 whose `NCCL version` text names the
release; or several, `:`-separated, as a job that preloads one NCCL maps
its framework's too), listens on 127.0.0.1, prints its port, and answers as NCCL does:
`CLIENT PROTOCOL` with `SERVER PROTOCOL 2`, `TIMEOUT` with `OK`, `SET FORMAT
json` with `OK` when JSON is "1" (2.28.7 and newer) and with NCCL's `ERROR`
otherwise, `STATUS` and `VERBOSE STATUS` with the next report (the last one
again after them, `{PID}` in it replaced by this process's id), then closes.
Every line received goes to RECORD, one per line, as it came. It prints its
port, and the Slurm job it runs in where it does.

  python3 serve.py LIB JSON RECORD REPORT...
"""

import mmap
import os
import socket
import sys
import threading

lib, json_ok, record, reports = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4:]
mapped = []
for one in lib.split(":"):
    with open(one, "rb") as f:
        mapped.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ))
bodies = []
for r in reports:
    with open(r, "rb") as f:
        bodies.append(f.read().replace(b"{PID}", str(os.getpid()).encode()))
served = [0]
lock = threading.Lock()


def conversation(conn):
    with conn, conn.makefile("rb") as r:
        for line in r:
            with lock, open(record, "ab") as f:
                f.write(line if line.endswith(b"\n") else line + b"\n")
            cmd = line.strip().lower()
            if cmd.startswith(b"client protocol "):
                reply = b"SERVER PROTOCOL 2\n"
            elif cmd.startswith(b"timeout ") or (cmd == b"set format json" and json_ok):
                reply = b"OK\n"
            elif cmd in (b"status", b"verbose status"):
                with lock:
                    body = bodies[min(served[0], len(bodies) - 1)]
                    served[0] += 1
                conn.sendall(body)
                return
            else:
                reply = b"ERROR: Unknown command " + line.strip() + b"\n"
            conn.sendall(reply)


s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
print(s.getsockname()[1], os.environ.get("SLURM_JOB_ID", ""), flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=conversation, args=(c,), daemon=True).start()
